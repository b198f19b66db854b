#!/usr/bin/env python3
"""Calibrates and checks the per-kernel performance model (plans/perf_model.h)
against times measured on an H200.

  glm-engine bench --plan P.glmplan --pack DIR --measured-out m.json   # GPU host
  glmc inspect P.glmplan --target h200 --rank 0 --format json --measured m.json > i.json
  scripts/calibrate_model.py i.json [--table]     # --table: the C++ lines

Per family, the compute efficiency is the modelled compute time (busiest
pipe or issue, from the kernels' SASS, uncalibrated) over the measured time
less the launch, summed over the family's kernels whose measured time the
memory term does not explain. Without --table it prints, per kernel, the
model's prediction (as inspect made it, with the table compiled into glmc)
against the measurement, and how many of the kernels that make 90% of the
measured step are within +-25%.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inspect_json")
    ap.add_argument("--table", action="store_true",
                    help="print the calibration table for perf_model.cpp")
    ap.add_argument("--rank", type=int, default=0)
    a = ap.parse_args()
    d = json.load(open(a.inspect_json))
    t = d.get("target")
    if not t:
        sys.exit(f"{a.inspect_json}: not an inspect --target json")
    launch = t["launch_us"]
    ks = [k for k in d["ranks"][a.rank]["kernel_costs"] if "measured_us" in k]
    if not ks:
        sys.exit(f"{a.inspect_json}: no measured kernels (inspect --measured FILE)")
    if a.table:
        fam = {}
        for k in ks:
            n = k["launches"]
            compute = max([k["issue_us"]] + list(k["pipe_us"].values()))
            busy = k["measured_us"] - n * launch
            if busy <= k["memory_us"] * 1.05 or compute <= 0 or busy < n:
                continue  # the bytes or the launch explain it
            c, b = fam.get(k["template"], (0.0, 0.0))
            fam[k["template"]] = (c + compute, b + busy)
        for f in sorted(fam):
            c, b = fam[f]
            eff = min(8.0, max(0.05, c / b))
            print(f'      {{"{f}", {eff:.3f}}}, // {c:.0f} of {b:.0f} us')
        return
    total = sum(k["measured_us"] for k in ks)
    rows = sorted(ks, key=lambda k: -k["measured_us"])
    acc, within, counted = 0.0, 0, 0
    print(f"{'kernel':60} {'meas us':>9} {'pred us':>9} {'ratio':>6}  bound")
    for k in rows:
        top = acc < 0.9 * total
        acc += k["measured_us"]
        r = k["predicted_us"] / k["measured_us"] if k["measured_us"] else 0
        ok = 0.75 <= r <= 1.25
        if top:
            counted += 1
            within += ok
        print(f"{k['name'][:60]:60} {k['measured_us']:9.1f} {k['predicted_us']:9.1f} "
              f"{r:6.2f}  {k['bound']}{'' if ok else ' *'}{'  (90%)' if top else ''}")
    pred = sum(k["predicted_us"] for k in ks)
    print(f"kernels making 90% of the measured time: {within} of {counted} within +-25%; "
          f"sum measured {total:.0f} us, predicted {pred:.0f} us ({pred / total:.2f})")


if __name__ == "__main__":
    main()
