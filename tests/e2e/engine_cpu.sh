#!/usr/bin/env bash
# glm-engine run end to end on the CPU:
#  1. the oracle goldens (transformers logits) through the reference forward
#     (PLAN `-`): --dump-logits within 1e-5 relative per position, greedy
#     tokens identical;
#  2. the synthesized tiny pack: --sparks 1..4 give byte-identical dumps;
#  3. EXL3 and exlr8 layouts of the tiny pack run end to end;
#  4. with `glmc compile` (MLIR builds): plans run by the plan executor
#     (--backend cpu, the kernels' C++ twins): a 2-Spark plan of the tiny pack
#     within 1e-4 of the reference with the same greedy tokens, `--trace`
#     listing every launch, the goldens (GLM-5.3 DSA and GLM-5.3-Flash)
#     through 1- and 3-Spark plans within 1e-5 of transformers;
#  4b. an EXL3 plan with prefill graphs: --prefill chunked (the default)
#     against --prefill tokens, same greedy tokens, within 1e-3;
#  5. bad input: one line on stderr, exit 1.
set -euo pipefail
T=${GLM_TEST_TMP:-/tmp/glm-e2e-engine}
ROOT=${GLM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
rm -rf "$T" && mkdir -p "$T"

# Reads safetensors without numpy: prints max relative error per row and the
# token comparison; exits 1 past the tolerance.
cat > "$T/compare.py" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
from dumps import read, worst_row_relative

got, want = read(sys.argv[1]), read(sys.argv[2])
rows = got["logits"][0][0]
worst = worst_row_relative(got["logits"], want["logits"])
prompt = list(want["prompt"][1])
gen = list(want["generated"][1])
seq = list(got["tokens"][1])
print(f"{sys.argv[2]}: {rows} rows, worst relative error {worst:.2e}")
if worst > 1e-5:
    sys.exit("logits differ from transformers by more than 1e-5")
if seq != prompt + gen:
    sys.exit(f"greedy tokens {seq[len(prompt):]} != transformers {gen}")
PY

# 1. Oracle goldens.
for g in "$ROOT"/tests/oracle/goldens/*/; do
  [ -f "$g/golden.safetensors" ] || continue
  prompt=$(python3 "$ROOT/tests/oracle/golden_args.py" "$g/golden.safetensors")
  set -- $prompt
  glm-engine run - --pack "$g" --backend reference --tokens "$1" --max-new "$2" \
    --greedy --dump-logits "$T/oracle.safetensors" > "$T/oracle.out"
  python3 "$T/compare.py" "$T/oracle.safetensors" "$g/golden.safetensors" "$ROOT/tests/oracle"
done

# 2. Tiny pack, TP invariance.
glmc synth --preset tiny --layout hf --seed 7 -o "$T/tiny-hf" > /dev/null
TOK=1,5,9,13,17,21,25,29,33,37,41,45
for n in 1 2 3 4; do
  glm-engine run - --pack "$T/tiny-hf" --sparks $n --tokens $TOK --max-new 6 \
    --dump-logits "$T/tp$n.safetensors" > "$T/tp$n.out"
  cmp "$T/tp1.safetensors" "$T/tp$n.safetensors"
  cmp "$T/tp1.out" "$T/tp$n.out"
done
echo "tiny pack: --sparks 1..4 byte-identical logits"
glm-engine run - --pack "$T/tiny-hf" --prompt "hello world" --max-new 3 \
  > "$T/prompt.out"
grep -q "^generated text: " "$T/prompt.out"
echo "tiny pack: --prompt through tokenizer.json"

# 3. Quantized layouts run end to end.
for layout in exl3 exlr8; do
  glmc synth --preset tiny --layout $layout --seed 7 -o "$T/tiny-$layout" > /dev/null
  man=(); [ $layout = exlr8 ] && man=(--manifest mixed)
  glm-engine run - --pack "$T/tiny-$layout" "${man[@]}" --sparks 2 \
    --tokens $TOK --max-new 4 > "$T/$layout.out"
  grep -q "^generated tokens: [0-9]" "$T/$layout.out"
  echo "$layout: $(head -1 "$T/$layout.out")"
done

# 3b. A pack whose fp32 copy does not fit the machine is refused before any
# allocation (a Spark freezes instead of failing): pretend 1 MiB is left.
if GLM_HOST_MEMORY_GIB=0.001 glm-engine run - --pack "$T/tiny-exlr8" \
    --manifest mixed --tokens $TOK --max-new 1 2> "$T/memory.err"; then
  echo "the cpu backend loaded a pack larger than the memory left"; exit 1
fi
grep -q "^glm-engine: error: --backend reference dequantizes every weight of .* to fp32: that needs [0-9.]* MiB of host memory and 1.0 MiB are available (GLM_HOST_MEMORY_GIB)" "$T/memory.err"
echo "cpu backend: refused a pack larger than the memory left"

# 4. A compiled plan (only where glmc has the compiler).
# (glmc without MLIR answers `compile --help` with its own help and exit 0.)
glmc compile --help > "$T/compile-help.txt" 2>&1 || true
if grep -q -- "--sparks" "$T/compile-help.txt"; then
  glmc compile "$T/tiny-hf" --sparks 2 -o "$T/tiny.glmplan" > /dev/null
  glm-engine run "$T/tiny.glmplan" --pack "$T/tiny-hf" --tokens $TOK \
    --max-new 6 --dump-logits "$T/plan.safetensors" \
    --trace "$T/plan.trace" > "$T/plan.out"
  python3 - "$T/plan.safetensors" "$T/tp1.safetensors" "$ROOT/tests/oracle" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
from dumps import read, worst_row_relative
got, want = read(sys.argv[1]), read(sys.argv[2])
worst = worst_row_relative(got["logits"], want["logits"])
print(f"plan for 2 Sparks vs the reference: worst relative error {worst:.2e}")
if worst > 1e-4:
    sys.exit("the plan's logits differ from the reference by more than 1e-4")
if list(got["tokens"][1]) != list(want["tokens"][1]):
    sys.exit("the plan's greedy tokens differ from the reference's")
PY
  # Every line of the trace is one launch or collective of a plan graph.
  [ "$(grep -c '"graph":"decode.1"' "$T/plan.trace")" -gt 100 ]
  grep -qE '"kernel":"glm_(dense_gemv|gemv_any)_' "$T/plan.trace"
  grep -q '"kernel":"all_reduce"' "$T/plan.trace"
  if glm-engine run "$T/tiny.glmplan" --pack "$T/tiny-exl3" --tokens 1 \
      2> "$T/mismatch.err"; then
    echo "a plan ran on a pack it was not compiled for"; exit 1
  fi
  [ "$(wc -l < "$T/mismatch.err")" -eq 1 ]
  # 4b. Chunked prefill (the default) through an EXL3 plan's prefill graphs
  # against --prefill tokens: the same greedy tokens, logits within the
  # prefill kernels' tolerance; the chunk shows in the trace.
  glmc compile "$T/tiny-exl3" --no-nvrtc --decode-batches 1 --prefill-chunks 8,16 \
    -o "$T/exl3-prefill.glmplan" > /dev/null 2>&1
  for mode in chunked tokens; do
    glm-engine run "$T/exl3-prefill.glmplan" --pack "$T/tiny-exl3" --prefill $mode \
      --tokens 1,5,9,2,7,3,11,4,6,8,10,12 --max-new 6 --greedy \
      --dump-logits "$T/prefill-$mode.safetensors" --trace "$T/prefill-$mode.trace" > /dev/null
  done
  grep -q '"graph":"prefill.16"' "$T/prefill-chunked.trace"
  if grep -q '"graph":"prefill' "$T/prefill-tokens.trace"; then
    echo "--prefill tokens ran a prefill graph"; exit 1
  fi
  python3 - "$T/prefill-chunked.safetensors" "$T/prefill-tokens.safetensors" "$ROOT/tests/oracle" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
from dumps import read, worst_row_relative
got, want = read(sys.argv[1]), read(sys.argv[2])
worst = worst_row_relative(got["logits"], want["logits"])
print(f"exl3 plan, chunked prefill vs token by token: worst relative error {worst:.2e}")
if worst > 1e-3:
    sys.exit("chunked prefill differs from token by token by more than 1e-3")
if list(got["tokens"][1]) != list(want["tokens"][1]):
    sys.exit("chunked prefill changed the greedy tokens")
PY
  # The oracle goldens through compiled plans (1 and 3 Sparks): still within
  # 1e-5 of transformers, greedy tokens identical.
  for g in "$ROOT"/tests/oracle/goldens/*/; do
    [ -f "$g/golden.safetensors" ] || continue
    set -- $(python3 "$ROOT/tests/oracle/golden_args.py" "$g/golden.safetensors")
    if grep -q '"glm5_next"' "$g/config.json"; then
      # Flash (KDA, mHC, k-pool indexer): prefill graphs where kda_chunk
      # takes the KDA heads (glm_flash_a's 16); glm_flash_b's heads of 20
      # keep decode graphs only, the prompt token by token with a note.
      glmc compile "$g" --sparks 3 --no-nvrtc -o "$T/flash.glmplan" > /dev/null 2>&1
      glm-engine run "$T/flash.glmplan" --pack "$g" --tokens "$1" --max-new 1 \
        > /dev/null 2> "$T/flash.err"
      want=0; [ "$(basename "$g")" = glm_flash_b ] && want=1
      [ "$(grep -c "^glm-engine: note: .* has no prefill graphs" "$T/flash.err")" -eq $want ] \
        || { cat "$T/flash.err"; exit 1; }
    fi
    for n in 1 3; do
      glmc compile "$g" --sparks $n --no-nvrtc -o "$T/golden.glmplan" 2> /dev/null
      glm-engine run "$T/golden.glmplan" --pack "$g" --tokens "$1" \
        --max-new "$2" --greedy --dump-logits "$T/golden-plan.safetensors" > /dev/null
      python3 "$T/compare.py" "$T/golden-plan.safetensors" "$g/golden.safetensors" "$ROOT/tests/oracle"
    done
  done
else
  echo "glmc compile not built here: plan run skipped"
fi

# 5. Bad input: exit 1, one line.
bad() {
  if glm-engine "$@" 2> "$T/err"; then echo "accepted: $*"; exit 1; fi
  [ "$(wc -l < "$T/err")" -eq 1 ] || { cat "$T/err"; exit 1; }
  grep -q "^glm-engine: error: " "$T/err"
}
bad run - --pack "$T/tiny-hf" --tokens 1,2,99999
bad run - --pack "$T/tiny-hf" --tokens 1,x
bad run - --pack "$T/nope" --tokens 1
bad run - --pack "$T/tiny-hf" --tokens 1 --greedy --seed 3
bad run - --pack "$ROOT/tests/oracle/goldens/glm_dsa_a" --prompt hello
echo "engine_cpu: OK"
