#!/usr/bin/env bash
# glm-engine launch --sparks 2 --backend cuda (label gpu; skips without two
# GPUs or a CUDA build):
#  1. the oracle goldens and the tiny pack in hf, exl3 and exlr8 layouts:
#     greedy tokens of launch --sparks 2 identical to run --backend cuda at
#     TP=1 (and, for the goldens, to transformers');
#  2. a rank killed (SIGKILL) mid-generation: launch exits 1 within the
#     timeout naming the rank, rank 0 names it and its step, no rank is left.
set -euo pipefail
T=${GLM_TEST_TMP:-/tmp/glm-e2e-gpu-launch-cuda}
ROOT=${GLM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
rm -rf "$T" && mkdir -p "$T"
export NCCL_NVLS_ENABLE=0

gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
if [ "${gpus:-0}" -lt 2 ]; then
  echo "fewer than 2 CUDA devices: skipped"; exit 0
fi
# --backend cuda runs a plan, and the GPU hosts build no `glmc compile` (no
# MLIR): plans come from scripts/gpu-plans --prepare.
if ! glmc compile --help 2>/dev/null | grep -q -- "--sparks"; then
  echo "glmc compile not built here: skipped"; exit 0
fi
g0=$(ls -d "$ROOT"/tests/oracle/goldens/*/ | head -1)
if ! glm-engine run - --pack "$g0" --backend cuda --tokens 1 --max-new 1 \
    > /dev/null 2> "$T/probe.err"; then
  if grep -q "built without CUDA" "$T/probe.err"; then
    echo "glm-engine built without CUDA: skipped"; exit 0
  fi
  cat "$T/probe.err"; exit 1
fi

same_tokens() { # NAME PACK ARGS...: run TP=1 vs launch --sparks 2
  local name=$1 pack=$2; shift 2
  glm-engine run - --pack "$pack" --backend cuda "$@" > "$T/$name.tp1.out"
  glm-engine launch --sparks 2 - --pack "$pack" --backend cuda "$@" \
    > "$T/$name.tp2.out" 2> "$T/$name.tp2.err" \
    || { cat "$T/$name.tp2.err"; exit 1; }
  grep "^generated tokens" "$T/$name.tp1.out" > "$T/$name.tp1.tok"
  grep "^generated tokens" "$T/$name.tp2.out" > "$T/$name.tp2.tok"
  cmp "$T/$name.tp1.tok" "$T/$name.tp2.tok" \
    || { echo "$name: TP=2 tokens differ from TP=1"; cat "$T/$name".tp*.tok; exit 1; }
  echo "$name: launch --sparks 2 = run TP=1 ($(cat "$T/$name.tp1.tok"))"
}

# 1. Oracle goldens (tokens also equal transformers') and tiny packs.
for g in "$ROOT"/tests/oracle/goldens/*/; do
  [ -f "$g/golden.safetensors" ] || continue
  set -- $(python3 "$ROOT/tests/oracle/golden_args.py" "$g/golden.safetensors")
  name=$(basename "$g")
  same_tokens "$name" "$g" --tokens "$1" --max-new "$2" --greedy
  shift 2
  grep -qx "generated tokens: $*" "$T/$name.tp2.out" \
    || { echo "$name: TP=2 tokens differ from transformers ($*)"; exit 1; }
done
TOK=1,5,9,13,17,21,25,29,33,37,41,45
for layout in hf exl3 exlr8; do
  glmc synth --preset tiny --layout $layout --seed 7 -o "$T/tiny-$layout" \
    > /dev/null
  man=(); [ $layout = exlr8 ] && man=(--manifest mixed)
  same_tokens "tiny-$layout" "$T/tiny-$layout" "${man[@]}" --tokens $TOK \
    --max-new 8
done

# 2. Kill a rank mid-generation. The tiny pack without eos ids generates
#    until --max-new; a TP=1 run measures startup and generation time so the
#    kill lands in the middle of generation.
cp -r "$T/tiny-hf" "$T/long"
python3 - "$T/long/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["eos_token_id"] = []
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
LONG=(- --pack "$T/long" --backend cuda --tokens 1,5,9 --max-new 4000)
t0=$(date +%s.%N)
glm-engine run "${LONG[@]}" > /dev/null 2> "$T/long.err"
wall=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(date +%s.%N)")
gen=$(grep -o "backend cuda, [0-9.]* s" "$T/long.err" | grep -o "[0-9.]* s" | cut -d' ' -f1)
delay=$(python3 -c "import sys; w, g = map(float, sys.argv[1:]); print(f'{w - g + 1.5 + g / 2:.2f}')" "$wall" "$gen")
echo "TP=1 long run: ${wall} s wall, ${gen} s generating; killing rank 1 after ${delay} s"

glm-engine launch --sparks 2 "${LONG[@]}" --rank-timeout 20 \
  > "$T/kill.out" 2> "$T/kill.err" &
L=$!
sleep "$delay"
victim=""
for p in $(pgrep -P $L || true); do
  tr '\0' ' ' < "/proc/$p/cmdline" | grep -q -- "--rank 1 " && victim=$p
done
[ -n "$victim" ] || { echo "rank 1 not running after ${delay} s"; cat "$T/kill.err"; exit 1; }
pids=$(pgrep -P $L | tr '\n' ' ')
kill -9 "$victim"
t1=$(date +%s)
rc=0; wait $L || rc=$?
dt=$(( $(date +%s) - t1 ))
cat "$T/kill.err"
[ $rc -ne 0 ] || { echo "launch exited 0 after a rank was killed"; exit 1; }
[ $dt -lt 20 ] || { echo "launch took $dt s to notice the dead rank"; exit 1; }
tail -1 "$T/kill.err" | grep -q "^glm-engine: error: launch: rank 1 (pid $victim) was killed by signal 9"
step=$(grep -o "^glm-engine: error: rank 1 (pid $victim) stopped responding during step [0-9]*" \
  "$T/kill.err" | grep -o "[0-9]*$" || true)
[ -n "$step" ] && [ "$step" -gt 3 ] \
  || { echo "rank 0 did not name rank 1 during generation"; exit 1; }
for p in $pids; do
  if kill -0 "$p" 2>/dev/null && grep -q glm-engine "/proc/$p/cmdline" 2>/dev/null \
      && ! grep -q zombie "/proc/$p/status"; then
    echo "rank process $p is still running"; exit 1
  fi
done
echo "killed rank 1 at step $step: launch exited $rc after $dt s, no rank left"
echo "gpu_launch_cuda: OK"
