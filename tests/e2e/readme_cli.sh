#!/usr/bin/env bash
# README.md's CLI table against --help of every subcommand (readme_cli.py):
# each flag --help lists is in its command's row, and each flag a row names
# is one --help lists.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(dirname "$(command -v glmc)")
python3 "$here/readme_cli.py" "$here/../../README.md" "$bin"
