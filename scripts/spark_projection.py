#!/usr/bin/env python3
"""Predicted decode speed on DGX Sparks, from compiled plans and one measured
roofline fraction (issue 6, "A projection for the Sparks").

For GLM-5.3 the weight bytes each rank reads per decoded token come from real
plans: `glmc compile` of the full-size index-only pack (no weight bytes) with a
manifest at the target bits per weight, then `glmc inspect --format json`.
GLM-5.3-Flash has no pack layout yet (exlr8-format.md: Flash constants are
UNVERIFIED), so its bytes per token come from the parameter tables of
glm53-architecture.md (dense FP8, routed experts at K bits) split evenly over
the ranks, plus the KDA state read and written every token.

  predicted step = max-rank bytes / (bandwidth * roofline fraction)
                   + all-reduces per token * all-reduce latency
  tok/s = 1 / step

The roofline fraction is what the H200 measured for a whole decode step
(`glm-engine bench --suite step`: weight bytes per token / copy bandwidth /
step time); the all-reduce latency per call is an assumption (flag), since no
Spark interconnect was measured here. Usage:

  scripts/spark_projection.py --glmc build-mlir/bin/glmc --roofline 0.40 \
      [--allreduce-us 20] [--bandwidth 273] [--markdown]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# GLM-5.3-Flash (glm53-architecture.md, parameter table).
FLASH_BYTES_PER_TOKEN_GB = {2: 10.40, 3: 11.46, 4: 12.51}  # dense FP8
FLASH_KDA_STATE_GB = 0.143 * 2  # 34 x 4 MiB fp32, read and written
FLASH_LAYERS = 45                 # 34 KDA + 11 MLA decoder layers
GLM53_LAYERS = 78


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def mixed_manifest(k3_manifest, bpw):
    """A manifest whose expert halves average `bpw` bits: every half gets
    floor(bpw) or floor(bpw)+1, spread so that each rank sees the same mix
    (the index walks halves in the order the TP rule deals them out)."""
    lo = int(bpw)
    frac = bpw - lo
    hi = min(lo + 1, 4)
    out = {"layers": {}}
    counter = 0
    for layer, entry in sorted(k3_manifest["layers"].items(),
                               key=lambda kv: int(kv[0])):
        def pick():
            nonlocal counter
            counter += 1
            # Bresenham-style: take `hi` whenever the running share falls short.
            want = int(counter * frac + 1e-9) - int((counter - 1) * frac + 1e-9)
            return hi if want else lo
        gate = [[pick() for _ in range(16)] for _ in entry["gate"]]
        up = [[pick() for _ in range(16)] for _ in entry["up"]]
        down = [pick() for _ in entry["down"]]
        shared = {"gate": [pick() for _ in range(16)],
                  "up": [pick() for _ in range(16)], "down": pick()}
        out["layers"][layer] = {"gate": gate, "up": up, "down": down,
                                "shared": shared}
    return out


def glm53_rows(args, tmp):
    pack = args.pack or os.path.join(tmp, "glm53")
    if not args.pack:
        rc, log = run([args.glmc, "synth", "--preset", "glm53", "--layout",
                       "exlr8", "--index-only", "-o", pack])
        if rc:
            sys.exit(f"glmc synth failed:\n{log}")
    with open(os.path.join(pack, "manifests", "exlr8-manifest-k3.json")) as f:
        k3 = json.load(f)
    rows = []
    for bpw in (2.0, 2.75, 3.38):
        man = os.path.join(tmp, f"manifest-{bpw}.json")
        with open(man, "w") as f:
            json.dump(mixed_manifest(k3, bpw), f)
        for n in (2, 3, 4):
            plan = os.path.join(tmp, f"glm53-{bpw}-{n}.glmplan")
            rc, log = run([args.glmc, "compile", pack, "--sparks", str(n),
                           "--manifest", man, "--no-nvrtc",
                           "--memory-per-spark", str(args.memory_gib),
                           "-o", plan])
            if rc:
                rows.append(("GLM-5.3", f"{bpw:.2f} bpw experts", n, None,
                             "refused: does not fit "
                             f"{args.memory_gib} GiB per Spark"))
                continue
            rc, js = run([args.glmc, "inspect", plan, "--format", "json"])
            if rc:
                sys.exit(f"glmc inspect failed:\n{js}")
            s = json.loads(js)["summary"]
            rows.append(("GLM-5.3", f"{bpw:.2f} bpw experts", n,
                         s["max_rank_bytes_per_token"], "plan"))
    return rows


def flash_rows():
    rows = []
    for k, gb in FLASH_BYTES_PER_TOKEN_GB.items():
        for n in (1, 2, 3, 4):
            rows.append(("GLM-5.3-Flash", f"K{k} experts", n,
                         (gb + FLASH_KDA_STATE_GB) * 1e9 / n,
                         "spec tables / N"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--glmc", default="build-mlir/bin/glmc",
                    help="glmc built with MLIR (for compile)")
    ap.add_argument("--pack", help="existing index-only glm53 exlr8 pack")
    ap.add_argument("--roofline", type=float, required=True,
                    help="measured decode-step fraction of the bandwidth "
                         "roofline (H200 `glm-engine bench --suite step`)")
    ap.add_argument("--allreduce-us", type=float, default=20.0,
                    help="latency of one hidden-sized all-reduce between "
                         "Sparks, us (assumption; 0 for one Spark)")
    ap.add_argument("--bandwidth", type=float, default=273.0,
                    help="Spark memory bandwidth, GB/s (nominal 273)")
    ap.add_argument("--memory-gib", type=float, default=104.0,
                    help="usable memory per Spark, GiB (compile refuses "
                         "plans over it)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        rows = glm53_rows(args, tmp) + flash_rows()

    hdr = ("model", "experts", "Sparks", "GB/token/rank", "step ms",
           "tok/s", "source")
    lines = []
    for model, what, n, b, src in rows:
        if b is None:
            lines.append((model, what, str(n), "-", "-", "-", src))
            continue
        layers = GLM53_LAYERS if model == "GLM-5.3" else FLASH_LAYERS
        # Two all-reduces per layer (attention output, MLP/MoE output).
        comm_us = 0.0 if n == 1 else 2 * layers * args.allreduce_us
        step_us = b / (args.bandwidth * 1e3 * args.roofline) + comm_us
        lines.append((model, what, str(n), f"{b / 1e9:.2f}",
                      f"{step_us / 1e3:.1f}", f"{1e6 / step_us:.1f}", src))
    if args.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        fmt = "{:<14} {:<18} {:>6} {:>14} {:>8} {:>7}  {}"
        print(fmt.format(*hdr))
        for l in lines:
            print(fmt.format(*l))
    print(f"\nassumed: {args.bandwidth:g} GB/s x roofline fraction "
          f"{args.roofline:g} (measured on the H200), all-reduce "
          f"{args.allreduce_us:g} us each, 2 per layer")


if __name__ == "__main__":
    main()
