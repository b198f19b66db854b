#!/usr/bin/env python3
"""Prints what the e2e scripts replay from an oracle golden, on one line:
   PROMPT_CSV N_GENERATED GENERATED_TOKEN...
(prompt token ids comma-separated, then how many tokens transformers generated
greedily, then those ids). Standard library only: CI has no torch.

  set -- $(python3 tests/oracle/golden_args.py GOLDEN/golden.safetensors)
"""
import json
import struct
import sys
from array import array


def main(path):
    try:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
    except (OSError, struct.error, ValueError) as e:
        sys.exit(f"{path}: not a readable safetensors golden ({e})")

    def ints(key):
        if key not in header:
            sys.exit(f"{path}: no tensor '{key}' (not an oracle golden? "
                     "regenerate with tests/oracle/make_goldens.py)")
        a = array("q")
        b, e = header[key]["data_offsets"]
        a.frombytes(data[b:e])
        return list(a)

    prompt, generated = ints("prompt"), ints("generated")
    print(",".join(map(str, prompt)), len(generated),
          " ".join(map(str, generated)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: golden_args.py GOLDEN.safetensors")
    main(sys.argv[1])
