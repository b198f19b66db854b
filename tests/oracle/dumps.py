"""Reads the safetensors files the e2e tests compare (oracle goldens and
`glm-engine run --dump-logits` output) with the standard library only: CI has
no numpy or torch.

  read(path)                  -> {name: (shape, array)}; exits naming the file
  worst_row_relative(got, want) -> max over rows of max|got-want| / max|want|
"""
import json
import struct
import sys
from array import array

_CODES = {"F32": "f", "F64": "d", "I64": "q"}


def read(path):
    try:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
    except (OSError, struct.error, ValueError) as e:
        sys.exit(f"{path}: not a readable safetensors file ({e})")
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in _CODES:
            sys.exit(f"{path}: tensor '{name}' has dtype {t['dtype']}, "
                     f"expected one of {sorted(_CODES)}")
        a = array(_CODES[t["dtype"]])
        b, e = t["data_offsets"]
        a.frombytes(data[b:e])
        out[name] = (t["shape"], a)
    return out


def worst_row_relative(got, want):
    """got, want: (shape [rows, cols], flat array). Shapes must match."""
    (rows, cols), g = got
    assert got[0] == want[0], (got[0], want[0])
    w = want[1]
    worst = 0.0
    for r in range(rows):
        gr, wr = g[r * cols:(r + 1) * cols], w[r * cols:(r + 1) * cols]
        rel = max(abs(a - b) for a, b in zip(gr, wr)) / max(abs(b) for b in wr)
        worst = max(worst, rel)
    return worst
