#!/usr/bin/env python3
"""README.md's CLI table against `--help`: every flag a command's --help
lists appears in that command's README row, and every flag a row names is
one its command's --help lists. Flags inside a code span that starts with
another command (`glm-engine bench --plan`) are references, not the row's
own. Also the plan schema and runtime ABI that "Formats and versions"
states against `glmc --version`. Usage: readme_cli.py README.md BIN_DIR;
exit 1 naming each stale row.
"""
import os
import re
import subprocess
import sys

# README row (the first cell's text without backticks) -> the help commands
# whose flags it documents; several rows may document one command.
ROWS = {
    "glmc, glm-engine": [["glmc"], ["glm-engine"]],
    "glmc synth": [["glmc", "synth"]],
    "glmc quantize SRC": [["glmc", "quantize"]],
    "glmc verify DIR": [["glmc", "verify"]],
    "glmc dequant DIR": [["glmc", "dequant"]],
    "glmc compile PACK": [["glmc", "compile"]],
    "glmc inspect PLAN": [["glmc", "inspect"]],
    "glmc-opt": [["glmc-opt"]],
    "glm-engine run PLAN": [["glm-engine", "run"]],
    "glm-engine run ... --rank R --world N": [["glm-engine", "run"]],
    "glm-engine launch --sparks N PLAN": [["glm-engine", "launch"]],
    "glm-engine serve PLAN": [["glm-engine", "serve"]],
    "glm-engine bench": [["glm-engine", "bench"]],
}
# Flags every command has; the `glmc, glm-engine` row documents them.
COMMON = {"--help", "--help-all", "-h"}
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])")
NAME = r"(?:-[a-zA-Z]|--[a-z][a-z0-9-]*)"
# "  -o,--output TEXT", "  --served-model-name,--model-name TEXT ...":
# an option and its aliases.
OPTION_LINE = re.compile(r"^  (" + NAME + r"(?:," + NAME + r")*)(?![\w-])")


def help_flags(bin_dir, cmd):
    exe = os.path.join(bin_dir, cmd[0])
    if not os.path.exists(exe):
        return None
    out = subprocess.run([exe] + cmd[1:] + ["--help"], capture_output=True,
                         text=True).stdout
    flags = {}  # first long name -> every name of that option
    glm_opt = cmd[0] == "glmc-opt"
    for line in out.splitlines():
        if glm_opt:
            # MLIR's opt driver lists hundreds of options: ours are --glm-*.
            m = re.match(r"^\s+(--glm-[a-z0-9-]+)", line)
            if m:
                flags[m.group(1)] = {m.group(1)}
            continue
        m = OPTION_LINE.match(line)
        if m:
            names = m.group(1).split(",")
            longs = [n for n in names if n.startswith("--")]
            if longs:
                flags[longs[0]] = set(names)
    return flags


def row_flags(text):
    """Flags a README row names as its own (not inside a span that names
    another command)."""
    own = set()
    for i, part in enumerate(text.split("`")):
        if i % 2 == 1 and re.match(r"^(glmc|glm-engine|glmc-opt)\b", part):
            continue
        own |= set(FLAG.findall(part))
    return own


def version_problems(readme, bin_dir):
    """README's "Plans: schema X.Y ..., runtime ABI N" against what
    `glmc --version` says it reads and writes."""
    exe = os.path.join(bin_dir, "glmc")
    if not os.access(exe, os.X_OK):
        return []
    out = subprocess.run([exe, "--version"], capture_output=True, text=True,
                         timeout=60).stdout
    have = re.search(r"plan schema (\d+\.\d+), runtime ABI (\d+)", out)
    text = open(readme, encoding="utf-8").read()
    said = re.search(r"Plans: schema (\d+\.\d+)\b.*?runtime ABI (\d+)", text)
    if not have:
        return [f"`glmc --version` names no plan schema: {out.strip()!r}"]
    if not said:
        return ["README.md states no \"Plans: schema X.Y ... runtime ABI N\""]
    if said.groups() != have.groups():
        return [f"README.md says plan schema {said.group(1)}, runtime ABI "
                f"{said.group(2)}; glmc --version says {have.group(1)}, "
                f"{have.group(2)}"]
    return []


def main():
    readme, bin_dir = sys.argv[1], sys.argv[2]
    rows = {}
    for line in open(readme, encoding="utf-8"):
        if not line.startswith("| `"):
            continue
        cells = line.rstrip("\n").split(" | ", 1)
        key = cells[0][2:].replace("`", "").strip()
        rows.setdefault(key, "")
        rows[key] += " " + (cells[1].rstrip(" |") if len(cells) > 1 else "")
    problems = []
    for key in ROWS:
        if key not in rows:
            problems.append(f"README.md has no CLI row `{key}`")
    # Rows documenting the same command are checked together.
    by_cmd = {}
    for key, cmds in ROWS.items():
        for cmd in cmds:
            by_cmd.setdefault(tuple(cmd), []).append(key)
    checked = 0
    for cmd, keys in by_cmd.items():
        helped = help_flags(bin_dir, list(cmd))
        name = " ".join(cmd)
        if helped is None:
            print(f"readme_cli: {name}: not built here, skipped")
            continue
        checked += 1
        text = " ".join(rows.get(k, "") for k in keys)
        # The first cell names flags too (`glm-engine launch --sparks N`).
        text += " " + " ".join(k for k in keys)
        named = row_flags(text)
        for long, names in sorted(helped.items()):
            if long in COMMON or (keys == ["glmc, glm-engine"]):
                continue
            if not names & named:
                problems.append(f"{name} --help lists {long}, README row "
                                f"`{keys[0]}` does not")
        if keys == ["glmc, glm-engine"]:
            for f in ("--version", "--help", "--help-all"):
                if f not in helped:
                    problems.append(f"{name} --help lacks {f}")
            continue
        every = set().union(*helped.values()) if helped else set()
        for f in sorted(named - COMMON):
            if cmd[0] == "glmc-opt" and not f.startswith("--glm-"):
                continue
            if f not in every:
                problems.append(f"README row `{keys[0]}` names {f}, "
                                f"`{name} --help` does not list it")
    problems += version_problems(readme, bin_dir)
    for p in problems:
        print("readme_cli: " + p, file=sys.stderr)
    if problems:
        print(f"readme_cli: {len(problems)} stale entries in the CLI table or versions "
              f"of {readme}", file=sys.stderr)
        return 1
    print(f"readme_cli: the CLI table matches --help of {checked} commands; "
          "the plan schema and runtime ABI match glmc --version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
