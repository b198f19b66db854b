#!/usr/bin/env python3
"""Checks that each rank's `glm-engine --trace` file runs its plan graphs op by
op: every line is the next op of the graph it names (op name, kernel or
collective, grid, block; a repeated op once per launch), graph after whole
graph, all lines of the file's rank. The plan comes as `glmc inspect PLAN
--format json`.

  trace_matches_plan.py INSPECT.json TRACE.rankR.jsonl [TRACE.rankS.jsonl ...]

A file's rank is the R of its `.rankR` part; exit 1 naming the first line
that leaves its graph.
"""
import json
import re
import sys


def check(plan, path):
    m = re.search(r"\.rank(\d+)(\.[^./]*)?$", path)
    if not m:
        sys.exit(f"{path}: no .rankR in the name")
    rank = int(m.group(1))
    ranks = {r["rank"]: r for r in plan["ranks"]}
    if rank not in ranks:
        sys.exit(f"{path}: the plan has no rank {rank}")
    graphs = {g["name"]: g["ops"] for g in ranks[rank]["graphs"]}
    lines = [json.loads(l) for l in open(path) if l.strip()]
    if not lines:
        sys.exit(f"{path}: empty trace")
    fields = ("rank", "graph", "op", "kernel", "grid", "block")
    i = steps = 0
    while i < len(lines):
        name = lines[i].get("graph")
        if name not in graphs:
            sys.exit(f"{path} line {i + 1}: graph {name!r} is not one of rank "
                     f"{rank}'s ({', '.join(graphs)})")
        ops = [op for op in graphs[name] for _ in range(op.get("repeat", 1))]
        for k, op in enumerate(ops):
            e = lines[i + k] if i + k < len(lines) else {}
            want = [rank, name, op["name"], op["kernel"], op["grid"], op["block"]]
            got = [e.get(f) for f in fields]
            if got != want:
                sys.exit(f"{path} line {i + k + 1}: {got}, but op {k} of "
                         f"{name} on rank {rank} is {want}")
        i += len(ops)
        steps += 1
    print(f"rank {rank}: {len(lines)} launches, {steps} graphs of its plan "
          f"op by op")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    plan = json.load(open(sys.argv[1]))
    for path in sys.argv[2:]:
        check(plan, path)


if __name__ == "__main__":
    main()
