#!/usr/bin/env bash
# glm-engine launch --backend cpu: one process per rank over the TCP control
# plane (no GPU needed):
#  1. the oracle goldens and the tiny pack: launch --sparks 1..4 prints the
#     same tokens and writes a --dump-logits byte-identical to `run` at TP=1;
#  2. a rank killed (SIGKILL, by pid) mid-generation: launch exits 1 at once
#     with one line naming the rank and the signal, rank 0 names the dead
#     rank and its step, and no rank process is left;
#  3. a rank stopped (SIGSTOP): the others name it after --rank-timeout,
#     launch exits 1 and kills it;
#  4. ranks started by hand with different packs or --world are refused;
#  5. through plans of 2 and 4 ranks (--backend cpu, one process per rank):
#     tokens and --dump-logits byte-identical to the plan run in one process,
#     and each rank's --trace (FILE.rankR) the one process's launches of that
#     rank, line for line, and its plan graphs op by op (glmc inspect).
set -euo pipefail
T=${GLM_TEST_TMP:-/tmp/glm-e2e-launch-cpu}
ROOT=${GLM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$ROOT/tests/e2e/lib/coordinator.sh"
rm -rf "$T" && mkdir -p "$T"

# Prints "PROMPT_IDS NEW_TOKENS GENERATED..." of a golden.
golden_args() { python3 "$ROOT/tests/oracle/golden_args.py" "$1"; }

# 1. Byte-identical to TP=1.
same_as_tp1() { # NAME PACK TOKENS MAXNEW
  local name=$1 pack=$2 tok=$3 new=$4
  glm-engine run - --pack "$pack" --tokens "$tok" --max-new "$new" --greedy \
    --dump-logits "$T/$name-tp1.safetensors" > "$T/$name-tp1.out"
  for n in 1 2 3 4; do
    glm-engine launch --sparks $n - --pack "$pack" --backend reference \
      --tokens "$tok" --max-new "$new" --greedy \
      --dump-logits "$T/$name-l$n.safetensors" > "$T/$name-l$n.out" \
      2> "$T/$name-l$n.err"
    cmp "$T/$name-tp1.safetensors" "$T/$name-l$n.safetensors"
    cmp "$T/$name-tp1.out" "$T/$name-l$n.out"
    # Every other rank reported through launch with its prefix.
    for r in $(seq 1 $((n - 1))); do
      grep -q "^\[rank $r\] glm-engine: .* on $n rank(s)" "$T/$name-l$n.err"
    done
  done
  echo "$name: launch --sparks 1..4 byte-identical to run at TP=1 ($(head -1 "$T/$name-tp1.out"))"
}
for g in "$ROOT"/tests/oracle/goldens/*/; do
  [ -f "$g/golden.safetensors" ] || continue
  set -- $(golden_args "$g/golden.safetensors")
  same_as_tp1 "golden-$(basename "$g")" "$g" "$1" "$2"
done
glmc synth --preset tiny --layout hf --seed 7 -o "$T/tiny" > /dev/null
same_as_tp1 tiny "$T/tiny" 1,5,9,13,17,21,25,29,33,37,41,45 6

# --ignore-eos: this prompt meets an eos id within 200 tokens; with the flag
# every rank generates all 200 (rank 0's request carries it) and the tokens
# before the eos are the same.
eos_args=(- --pack "$T/tiny" --tokens 5 --max-new 200 --greedy)
glm-engine run "${eos_args[@]}" > "$T/eos.out"
grep -q "^finish reason: stop" "$T/eos.out"
glm-engine run "${eos_args[@]}" --ignore-eos > "$T/noeos.out"
glm-engine launch --sparks 2 "${eos_args[@]}" --backend reference --ignore-eos \
  > "$T/noeos-l2.out" 2> /dev/null
cmp "$T/noeos.out" "$T/noeos-l2.out"
grep -q "^finish reason: length" "$T/noeos.out"
stopped=$(grep "^generated tokens" "$T/eos.out" | cut -d: -f2)
all=$(grep "^generated tokens" "$T/noeos.out" | cut -d: -f2)
[ "$(echo $all | wc -w)" = 200 ] && [ "${all#"$stopped"}" != "$all" ] \
  || { echo "--ignore-eos: not 200 tokens that begin with the stopped run's"; exit 1; }
echo "--ignore-eos: $(echo $stopped | wc -w) tokens to the eos id, 200 past it (launch --sparks 2 the same)"

# Every rank holds an fp32 copy: launch refuses before starting any rank when
# the copies of all ranks exceed the memory left (pretend 1 MiB).
if GLM_HOST_MEMORY_GIB=0.001 glm-engine launch --sparks 3 - --pack "$T/tiny" \
    --backend reference --tokens 1,5,9 --max-new 2 > /dev/null 2> "$T/mem.err"; then
  echo "launch started ranks whose fp32 copies exceed the memory left"; exit 1
fi
grep -q "for each of the 3 ranks of this host) of host memory and 1.0 MiB are available" "$T/mem.err"
if grep -q "^\[rank" "$T/mem.err"; then echo "a rank started"; exit 1; fi
echo "launch: refused 3 cpu ranks whose fp32 copies exceed the memory left"

# A pack that never stops early: the tiny one without eos ids, so a run of
# 3000 tokens lasts seconds and a rank can be killed mid-generation.
cp -r "$T/tiny" "$T/long"
python3 - "$T/long/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["eos_token_id"] = []
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY

# PID of rank R among launch's children (by its command line).
rank_pid() { # LAUNCH_PID RANK
  local p
  for p in $(pgrep -P "$1" || true); do
    if tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q -- "--rank $2 "; then
      echo "$p"; return 0
    fi
  done
  return 1
}
# Waits until launch has all N ranks running; prints nothing.
wait_ranks() { # LAUNCH_PID N
  for _ in $(seq 1 200); do
    local all=1
    for r in $(seq 0 $(($2 - 1))); do rank_pid "$1" $r > /dev/null || all=0; done
    [ $all = 1 ] && return 0
    sleep 0.05
  done
  echo "launch did not start $2 ranks"; exit 1
}
no_rank_left() { # PIDS...
  for p in "$@"; do
    if kill -0 "$p" 2>/dev/null && ! grep -q zombie "/proc/$p/status" 2>/dev/null \
        && grep -q glm-engine "/proc/$p/cmdline" 2>/dev/null; then
      echo "rank process $p is still running"; exit 1
    fi
  done
}

# 2. SIGKILL one rank mid-run.
glm-engine launch --sparks 3 - --pack "$T/long" --tokens 1,5,9 \
  --max-new 3000 --rank-timeout 10 > "$T/kill.out" 2> "$T/kill.err" &
L=$!
wait_ranks $L 3
pids="$(rank_pid $L 0) $(rank_pid $L 1) $(rank_pid $L 2)"
victim=$(rank_pid $L 2)
sleep 1.5 # some tokens are generated (the step below proves it)
kill -9 "$victim"
t0=$(date +%s.%N)
rc=0; wait $L || rc=$?
dt=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$(date +%s.%N)")
cat "$T/kill.err"
[ $rc -ne 0 ] || { echo "launch exited 0 after a rank was killed"; exit 1; }
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 10 else 1)" "$dt" \
  || { echo "launch took $dt s to notice the dead rank"; exit 1; }
tail -1 "$T/kill.err" | grep -q "^glm-engine: error: launch: rank 2 (pid $victim) was killed by signal 9"
step=$(grep -o "^glm-engine: error: rank 2 (pid $victim) stopped responding during step [0-9]*" \
  "$T/kill.err" | grep -o "[0-9]*$")
[ "$step" -gt 3 ] || { echo "rank killed before generating (step $step)"; exit 1; }
grep -q "^\[rank 1\] glm-engine: error: rank 2 (pid $victim) stopped responding" "$T/kill.err"
if grep -q "^generated tokens" "$T/kill.out"; then
  echo "rank 0 printed tokens of a failed run"; exit 1
fi
no_rank_left $pids
echo "killed rank 2 at step $step: launch exited $rc after $dt s, no rank left"

# 3. SIGSTOP one rank: noticed after --rank-timeout, then killed.
glm-engine launch --sparks 3 - --pack "$T/long" --tokens 1,5,9 \
  --max-new 3000 --rank-timeout 2 --grace 1 > /dev/null 2> "$T/stop.err" &
L=$!
wait_ranks $L 3
pids="$(rank_pid $L 0) $(rank_pid $L 1) $(rank_pid $L 2)"
victim=$(rank_pid $L 1)
sleep 1
kill -STOP "$victim"
t0=$(date +%s)
rc=0; wait $L || rc=$?
dt=$(( $(date +%s) - t0 ))
cat "$T/stop.err"
[ $rc -ne 0 ] || { echo "launch exited 0 with a stopped rank"; exit 1; }
[ $dt -lt 15 ] || { echo "launch took $dt s with a stopped rank"; exit 1; }
grep -q "^glm-engine: error: rank 1 (pid $victim) stopped responding during step [0-9]*: nothing heard from it for 2 s" "$T/stop.err"
tail -1 "$T/stop.err" | grep -q "^glm-engine: error: launch: .*its error: rank 1 (pid $victim) stopped responding"
no_rank_left $pids
echo "stopped rank 1: named after the 2 s timeout, launch exited $rc after $dt s"

# 4. Ranks by hand that do not match.
mismatch() { # EXPECTED-TEXT RANK0-ARGS -- RANK1-ARGS
  local want=$1; shift
  local a=() b=()
  while [ "$1" != -- ]; do a+=("$1"); shift; done; shift; b=("$@")
  glm-engine run - --tokens 1,2 --rank 0 --coordinator 127.0.0.1:0 \
    --join-timeout 20 "${a[@]}" > /dev/null 2> "$T/m0.err" &
  local p0=$!
  local coord
  coord=$(coordinator_of "$T/m0.err" $p0)
  local rc1=0 rc0=0
  glm-engine run - --tokens 1,2 --rank 1 --coordinator "$coord" \
    --join-timeout 20 "${b[@]}" > /dev/null 2> "$T/m1.err" || rc1=$?
  wait $p0 || rc0=$?
  [ $rc0 = 1 ] && [ $rc1 = 1 ] || { cat "$T/m0.err" "$T/m1.err"; exit 1; }
  grep -q "$want" "$T/m0.err" && grep -q "$want" "$T/m1.err" \
    || { cat "$T/m0.err" "$T/m1.err"; exit 1; }
}
mismatch "runs pack .*long.* but rank 0 runs pack .*tiny" \
  --pack "$T/tiny" --world 2 -- --pack "$T/long" --world 2
mismatch "was started with --world 3 but rank 0 with --world 2" \
  --pack "$T/tiny" --world 2 -- --pack "$T/tiny" --world 3
mismatch "was given --ignore-eos but rank 0 stops at an eos id" \
  --pack "$T/tiny" --world 2 -- --pack "$T/tiny" --world 2 --ignore-eos
echo "mismatched ranks refused"

# Bad launch input: one line, exit 1.
bad() {
  if glm-engine "$@" > /dev/null 2> "$T/err"; then echo "accepted: $*"; exit 1; fi
  [ "$(wc -l < "$T/err")" -eq 1 ] || { cat "$T/err"; exit 1; }
  grep -q "^glm-engine: error: " "$T/err"
}
bad launch --sparks 2 - --pack "$T/tiny" --tokens 1 --rank 1
bad launch --sparks 2 - --pack "$T/tiny" --tokens 1 --devices 0,1
bad run - --pack "$T/tiny" --tokens 1 --world 2

# 5. Plans of 2 and 4 ranks, a process per rank (glmc with the compiler).
glmc compile --help > "$T/compile-help.txt" 2>&1 || true
if grep -q -- "--sparks" "$T/compile-help.txt"; then
  for n in 2 4; do
    glmc compile "$T/tiny" --sparks $n --no-nvrtc --max-context 256 \
      --prefill-chunks 0 -o "$T/tp$n.glmplan" > /dev/null 2>&1
    args=("$T/tp$n.glmplan" --pack "$T/tiny" --tokens 1,5,9,13 --max-new 4 --greedy)
    glm-engine run "${args[@]}" --trace "$T/one$n.jsonl" \
      --dump-logits "$T/one$n.st" > "$T/one$n.out" 2> /dev/null
    glm-engine launch --sparks $n "${args[@]}" --trace "$T/tp$n.jsonl" \
      --dump-logits "$T/l$n.st" > "$T/l$n.out" 2> "$T/l$n.err" \
      || { cat "$T/l$n.err"; exit 1; }
    cmp "$T/one$n.st" "$T/l$n.st"
    cmp "$T/one$n.out" "$T/l$n.out"
    glmc inspect "$T/tp$n.glmplan" --format json > "$T/tp$n.json"
    for r in $(seq 0 $((n - 1))); do
      grep -q "rank $r writes its trace to $T/tp$n.rank$r.jsonl" "$T/l$n.err"
      grep "^{\"rank\":$r," "$T/one$n.jsonl" | cmp - "$T/tp$n.rank$r.jsonl" \
        || { echo "rank $r of $n: its trace is not the one process's"; exit 1; }
    done
    python3 "$ROOT/tests/e2e/lib/trace_matches_plan.py" "$T/tp$n.json" "$T"/tp$n.rank*.jsonl
    echo "launch --sparks $n through the plan: logits byte-identical to one process, each rank's trace its graphs"
  done
else
  echo "glmc has no compiler (MLIR off): the plan cases skipped"
fi
echo "launch_cpu: OK"
