#!/usr/bin/env bash
# glm-engine launch --sparks N --backend cuda through the plan executor, one
# process and one GPU per rank, N = 2 and 4 (label gpu; a host with fewer
# than N GPUs skips that N):
#  1. the oracle goldens (GLM-5.3 DSA and Flash) and the tiny packs of the
#     three layouts: greedy tokens of the N-rank plan under launch identical
#     to its 1-rank plan's run (and, for the goldens, to transformers'); each
#     rank's --trace (FILE.rankR) its plan graphs op by op
#     (tests/e2e/lib/trace_matches_plan.py);
#  2. a rank killed (SIGKILL) mid-generation: launch exits 1 within the
#     timeout naming the rank, rank 0 names it and its step, no rank is left.
# Plans: compiled into the scratch directory when glmc has the compiler;
# a GPU host builds glmc without MLIR, so there it takes the ones
# `scripts/gpu-plans --prepare` wrote with this script's --prepare
# (GLM_GPU_RUN, default ROOT/gpurun: plans/launch-*.glmplan over packs/).
#   gpu_launch_cuda.sh --prepare PLANS_DIR PACKS_DIR   # writes the plans
# GLM_LAUNCH_BACKEND=cpu runs the same checks on the cpu backend, one process
# per rank and no GPU (this script's own check).
set -euo pipefail
ROOT=${GLM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}

# NAME:PACK (PACK under the packs directory, or a golden of the repo).
CASES="golden-a:@goldens/glm_dsa_a golden-b:@goldens/glm_dsa_b flash-a:@goldens/glm_flash_a
       tiny-hf:tiny-hf tiny-exl3:tiny-exl3 tiny-exlr8:tiny-exlr8"
pack_dir() { # PACK-SPEC PACKS_DIR
  case $1 in @goldens/*) echo "$ROOT/tests/oracle/goldens/${1#@goldens/}" ;; *) echo "$2/$1" ;; esac
}
# The plans of every case at 1, 2 and 4 ranks (a 256-token context, what the
# goldens' configs hold), and tiny-hf's at 1 and 2 with 4096 tokens for the
# kill (it generates past its eos ids with --ignore-eos).
write_plans() { # PLANS_DIR PACKS_DIR
  local out=$1 packs=$2 spec name pack n m
  mkdir -p "$out"
  for spec in $CASES; do
    name=${spec%%:*}; pack=$(pack_dir "${spec#*:}" "$packs")
    m=(); [ "$name" = tiny-exlr8 ] && m=(--manifest mixed)
    for n in 1 2 4; do
      glmc compile "$pack" "${m[@]}" --sparks $n --no-nvrtc --arch sm_90 --max-context 256 \
        --decode-batches 1 --prefill-chunks 0 -o "$out/launch-$name-tp$n.glmplan" > /dev/null 2>&1 \
        || { echo "glmc compile $name --sparks $n failed"; return 1; }
    done
  done
  for n in 1 2; do
    glmc compile "$packs/tiny-hf" --sparks $n --no-nvrtc --arch sm_90 --max-context 4096 \
      --decode-batches 1 --prefill-chunks 0 -o "$out/launch-long-tp$n.glmplan" > /dev/null 2>&1
  done
}
if [ "${1:-}" = --prepare ]; then
  write_plans "$2" "$3"
  exit 0
fi

T=${GLM_TEST_TMP:-/tmp/glm-e2e-gpu-launch-cuda}
rm -rf "$T" && mkdir -p "$T"
export NCCL_NVLS_ENABLE=0
B=${GLM_LAUNCH_BACKEND:-cuda}
if [ "$B" = cuda ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
else
  gpus=4
fi
if [ "${gpus:-0}" -lt 2 ]; then
  echo "fewer than 2 CUDA devices: skipped"; exit 0
fi
command -v glm-engine > /dev/null || { echo "no glm-engine: skipped"; exit 0; }

# The plans and their packs.
# (glmc without MLIR answers `compile --help` with its own help.)
glmc compile --help > "$T/compile-help.txt" 2>&1 || true
if grep -q -- "--sparks" "$T/compile-help.txt"; then
  for l in hf exl3 exlr8; do
    glmc synth --preset tiny --layout $l -o "$T/packs/tiny-$l" > /dev/null
  done
  write_plans "$T/plans" "$T/packs"
  PLANS=$T/plans PACKS=$T/packs
else
  run_dir=${GLM_GPU_RUN:-$ROOT/gpurun}
  PLANS=$run_dir/plans PACKS=$run_dir/packs
  if [ ! -f "$PLANS/launch-long-tp2.glmplan" ]; then
    echo "glmc compile not built here and no plans in $PLANS (scripts/gpu-plans --prepare): skipped"
    exit 0
  fi
fi

# 1. Tokens of N ranks = 1 rank; each rank's trace = its plan graphs.
for n in 2 4; do
  if [ "$gpus" -lt $n ]; then echo "$gpus GPUs: launch --sparks $n skipped"; continue; fi
  for spec in $CASES; do
    name=${spec%%:*}; pack=$(pack_dir "${spec#*:}" "$PACKS")
    case $name in
      golden-*|flash-*)
        set -- $(python3 "$ROOT/tests/oracle/golden_args.py" "$pack/golden.safetensors")
        args=(--pack "$pack" --tokens "$1" --max-new "$2" --greedy); shift 2; want="$*" ;;
      *) args=(--pack "$pack" --tokens 1,5,9,13,17,21,25,29,33,37,41,45 --max-new 8 --greedy)
         want="" ;;
    esac
    one=$PLANS/launch-$name-tp1.glmplan many=$PLANS/launch-$name-tp$n.glmplan
    glm-engine run "$one" "${args[@]}" --backend "$B" > "$T/$name.tp1.out" 2> "$T/$name.tp1.err" \
      || { cat "$T/$name.tp1.err"; exit 1; }
    glm-engine launch --sparks $n "$many" "${args[@]}" --backend "$B" --trace "$T/$name-tp$n.jsonl" \
      > "$T/$name.tp$n.out" 2> "$T/$name.tp$n.err" || { cat "$T/$name.tp$n.err"; exit 1; }
    grep "^generated tokens" "$T/$name.tp1.out" > "$T/$name.tp1.tok"
    grep "^generated tokens" "$T/$name.tp$n.out" > "$T/$name.tp$n.tok"
    cmp "$T/$name.tp1.tok" "$T/$name.tp$n.tok" \
      || { echo "$name: TP=$n tokens differ from TP=1"; cat "$T/$name".tp*.tok; exit 1; }
    if [ -n "$want" ]; then
      grep -qx "generated tokens: $want" "$T/$name.tp$n.out" \
        || { echo "$name: TP=$n tokens differ from transformers ($want)"; exit 1; }
    fi
    glmc inspect "$many" --format json > "$T/$name-tp$n.json"
    python3 "$ROOT/tests/e2e/lib/trace_matches_plan.py" "$T/$name-tp$n.json" \
      "$T/$name-tp$n".rank*.jsonl > "$T/$name-tp$n.traces"
    [ "$(ls "$T/$name-tp$n".rank*.jsonl | wc -l)" = $n ] \
      || { echo "$name: launch --sparks $n did not write $n traces"; exit 1; }
    echo "$name: launch --sparks $n ($B) = run TP=1 ($(cat "$T/$name.tp1.tok")); $n traces are their plan graphs"
  done
done

# 2. Kill a rank mid-generation. A TP=1 run measures startup and generation
#    time so the kill lands in the middle of generation.
max_new=4000 # the cpu backend's own check: fewer, as it is slower
[ "$B" = cuda ] || max_new=600
LONG=(--pack "$PACKS/tiny-hf" --backend "$B" --tokens 1,5,9 --max-new $max_new --ignore-eos)
t0=$(date +%s.%N)
glm-engine run "$PLANS/launch-long-tp1.glmplan" "${LONG[@]}" > /dev/null 2> "$T/long.err"
wall=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(date +%s.%N)")
gen=$(grep -o "backend $B, [0-9.]* s" "$T/long.err" | grep -o "[0-9.]* s" | cut -d' ' -f1)
delay=$(python3 -c "import sys; w, g = map(float, sys.argv[1:]); print(f'{w - g + 1.5 + g / 2:.2f}')" "$wall" "$gen")
echo "TP=1 long run: ${wall} s wall, ${gen} s generating $max_new tokens; killing rank 1 after ${delay} s"

glm-engine launch --sparks 2 "$PLANS/launch-long-tp2.glmplan" "${LONG[@]}" --rank-timeout 20 \
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
echo "gpu_launch_cuda: OK ($B)"
