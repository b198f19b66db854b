#!/usr/bin/env python3
"""Predicted decode speed on DGX Sparks, from compiled plans and one measured
roofline fraction (issue 6, "A projection for the Sparks").

For both models the weight bytes each rank reads per decoded token come from
real plans: `glmc compile` of the full-size index-only pack (no weight bytes)
with a manifest at the target bits per weight, then `glmc inspect --format
json`. GLM-5.3-Flash adds the KDA state (fp32, read and written every token,
split over the ranks with the heads), which the plans keep outside the weight
bytes. Flash rows are the release's: exlr8 K2 on one Spark, K3 on two, K4 on
three and four, and the 2.31 bpw EXL3 mosaic on one.

  predicted step = max-rank bytes / (bandwidth * roofline fraction)
                   + all-reduces per token * all-reduce latency
  tok/s = 1 / step

Next to it, "GB10 model tok/s" is what `glmc inspect --target gb10` models
for the plan on a Spark (plans/perf_model.h): per kernel max(bytes / 220
GB/s, busiest pipe, issue) with the pipes counted in the kernel's sm_121 SASS
and scaled by the family's compute efficiency measured on the H200, plus
1.3 us per launch in the step's graph and 30 us per all-reduce over RoCE, at
--context tokens in the cache. The first column instead carries the H200's
whole-step shortfall over to 273 GB/s.

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

# GLM-5.3-Flash (glm53-architecture.md §1b): 34 KDA layers of 64 heads with
# a [128, 128] fp32 state each, read and written once per token.
FLASH_KDA_STATE_BYTES = 34 * 64 * 128 * 128 * 4 * 2
FLASH_LAYERS = 45                 # 34 KDA + 11 MLA decoder layers
# What users measure today (the figures), tok/s, for the table.
FLASH_USERS = {("exlr8 K2", 1): "vLLM exlr8 + drafter: 53.0",
               ("exlr8 K3", 2): "vLLM exlr8 + drafter: 84.2",
               ("exlr8 K4", 3): "vLLM exlr8 + drafter: 105.8",
               ("exlr8 K4", 4): "vLLM exlr8 + drafter: 128.0",
               ("EXL3 mosaic", 1): "SGLang, no drafter: 9-11.5"}
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
                             f"{args.memory_gib} GiB per Spark", None))
                continue
            s = modelled(args, plan)
            rows.append(("GLM-5.3", f"{bpw:.2f} bpw experts", n,
                         s["max_rank_bytes_per_token"], "plan",
                         s["modelled_tok_per_s"]))
    return rows


def plan_bytes(args, pack, plan, extra):
    """(max-rank weight bytes per token, the plan's modelled GB10 tok/s) of
    `pack` compiled with `extra`, or None when the plan does not fit."""
    rc, log = run([args.glmc, "compile", pack, "--no-nvrtc",
                   "--prefill-chunks", "0",
                   "--memory-per-spark", str(args.memory_gib), "-o", plan]
                  + extra)
    if rc:
        return None
    s = modelled(args, plan)
    return s["max_rank_bytes_per_token"], s["modelled_tok_per_s"]


def modelled(args, plan):
    """The inspector's summary of `plan` under the GB10 model."""
    # stdout only: the SASS progress lines go to stderr.
    p = subprocess.run([args.glmc, "inspect", plan, "--format", "json",
                        "--rank", "0", "--target", "gb10", "--context",
                        str(args.context)], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"glmc inspect failed:\n{p.stderr}")
    return json.loads(p.stdout)["summary"]


def flash_rows(args, tmp):
    rows = []
    packs = {}
    for layout in ("exlr8", "exl3"):
        packs[layout] = os.path.join(tmp, f"flash-{layout}")
        rc, log = run([args.glmc, "synth", "--preset", "flash", "--layout",
                       layout, "--index-only", "-o", packs[layout]])
        if rc:
            sys.exit(f"glmc synth failed:\n{log}")
    for what, layout, man, n in (("exlr8 K2", "exlr8", "k2", 1),
                                 ("exlr8 K3", "exlr8", "k3", 2),
                                 ("exlr8 K4", "exlr8", "k4", 3),
                                 ("exlr8 K4", "exlr8", "k4", 4),
                                 ("EXL3 mosaic", "exl3", None, 1)):
        plan = os.path.join(tmp, f"flash-{layout}-{man}-{n}.glmplan")
        extra = ["--sparks", str(n)] + (["--manifest", man] if man else [])
        b = plan_bytes(args, packs[layout], plan, extra)
        src = "plan + KDA state / N"
        if b is None:
            rows.append(("GLM-5.3-Flash", what, n, None,
                         f"refused: does not fit {args.memory_gib} GiB",
                         None))
            continue
        rows.append(("GLM-5.3-Flash", what, n,
                     b[0] + FLASH_KDA_STATE_BYTES / n,
                     src + "; users: " + FLASH_USERS[(what, n)], b[1]))
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
    ap.add_argument("--flash-roofline", type=float,
                    help="measured fraction for GLM-5.3-Flash's step (its "
                         "own H200 bench); default --roofline")
    ap.add_argument("--context", type=int, default=4096,
                    help="tokens in the cache for the GB10 model's step "
                         "(KV and index-key reads)")
    ap.add_argument("--flash-only", action="store_true",
                    help="only the GLM-5.3-Flash rows")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        rows = ([] if args.flash_only else glm53_rows(args, tmp)) + \
            flash_rows(args, tmp)

    hdr = ("model", "experts", "Sparks", "GB/token/rank", "step ms",
           "tok/s", "GB10 model tok/s", "source")
    lines = []
    for model, what, n, b, src, gb10 in rows:
        if b is None:
            lines.append((model, what, str(n), "-", "-", "-", "-", src))
            continue
        layers = GLM53_LAYERS if model == "GLM-5.3" else FLASH_LAYERS
        # Two all-reduces per layer (attention output, MLP/MoE output).
        comm_us = 0.0 if n == 1 else 2 * layers * args.allreduce_us
        frac = args.roofline
        if model != "GLM-5.3" and args.flash_roofline:
            frac = args.flash_roofline
        step_us = b / (args.bandwidth * 1e3 * frac) + comm_us
        lines.append((model, what, str(n), f"{b / 1e9:.2f}",
                      f"{step_us / 1e3:.1f}", f"{1e6 / step_us:.1f}",
                      f"{gb10:.1f}", src))
    if args.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        fmt = "{:<14} {:<18} {:>6} {:>14} {:>8} {:>7} {:>16}  {}"
        print(fmt.format(*hdr))
        for l in lines:
            print(fmt.format(*l))
    print(f"\nassumed: {args.bandwidth:g} GB/s x roofline fraction "
          f"{args.roofline:g} (Flash {args.flash_roofline or args.roofline:g}; "
          f"measured on the H200), all-reduce "
          f"{args.allreduce_us:g} us each, 2 per layer; GB10 model at "
          f"context {args.context}")


if __name__ == "__main__":
    main()
