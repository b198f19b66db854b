#!/usr/bin/env python3
"""Prints what the e2e scripts replay from an oracle golden, on one line:
   PROMPT_CSV N_GENERATED GENERATED_TOKEN...
(prompt token ids comma-separated, then how many tokens transformers generated
greedily, then those ids). Standard library only: CI has no torch.

  set -- $(python3 tests/oracle/golden_args.py GOLDEN/golden.safetensors)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dumps  # noqa: E402


def main(path):
    tensors = dumps.read(path)

    def ints(key):
        if key not in tensors:
            sys.exit(f"{path}: no tensor '{key}' (not an oracle golden? "
                     "regenerate with tests/oracle/make_goldens.py)")
        return list(tensors[key][1])

    prompt, generated = ints("prompt"), ints("generated")
    print(",".join(map(str, prompt)), len(generated),
          " ".join(map(str, generated)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: golden_args.py GOLDEN.safetensors")
    main(sys.argv[1])
