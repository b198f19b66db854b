#!/usr/bin/env bash
# glm-engine run --backend cuda against --backend cpu (label gpu: runs on the
# GPU host through scripts/gpu; skips without a CUDA build or a device):
#  1. the oracle goldens: greedy tokens identical to cpu and transformers,
#     logits within 1e-4 relative of the cpu backend's per position (the
#     GPU multiplies the stored formats with fp32 sums, the cpu backend
#     dequantizes to fp32 and sums in fp64; measured worst on the H200 is
#     printed per case);
#  2. the tiny pack in hf, exl3 and exlr8 layouts: the same;
#  3. more than one rank without glm-engine launch: refused with one line.
set -euo pipefail
T=${GLM_TEST_TMP:-/tmp/glm-e2e-gpu-engine-cuda}
ROOT=${GLM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
rm -rf "$T" && mkdir -p "$T"

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no CUDA device: skipped"; exit 0
fi
# --backend cuda runs a plan, and the GPU hosts build no `glmc compile` (no
# MLIR): scripts/gpu-plans carries plans compiled elsewhere and checks the
# plan executor on the GPU against the CPU twins instead.
if ! glmc compile --help 2>/dev/null | grep -q -- "--sparks"; then
  echo "glmc compile not built here (plans come from scripts/gpu-plans --prepare): skipped"; exit 0
fi
g0=$(ls -d "$ROOT"/tests/oracle/goldens/*/ | head -1)
if ! glm-engine run - --pack "$g0" --backend cuda --tokens 1 --max-new 1 \
    > /dev/null 2> "$T/probe.err"; then
  if grep -q "built without CUDA" "$T/probe.err"; then
    echo "glm-engine built without CUDA: skipped"; exit 0
  fi
  cat "$T/probe.err"; exit 1
fi

# Compares two --dump-logits files: tokens identical, worst relative logit
# difference per position <= 1e-4 (printed).
cat > "$T/compare.py" <<'PY'
import sys
sys.path.insert(0, sys.argv[4])
from dumps import read, worst_row_relative

got, want = read(sys.argv[1]), read(sys.argv[2])
rows = got["logits"][0][0]
worst = worst_row_relative(got["logits"], want["logits"])
same = list(got["tokens"][1]) == list(want["tokens"][1])
print(f"{sys.argv[3]}: {rows} positions, cuda vs cpu worst relative logit "
      f"difference {worst:.2e}, tokens {'identical' if same else 'DIFFER'}")
if not same:
    sys.exit(f"tokens: cuda {list(got['tokens'][1])} != cpu {list(want['tokens'][1])}")
if worst > 1e-4:
    sys.exit("cuda logits differ from cpu by more than 1e-4")
PY

both() { # NAME PACK ARGS...: runs cpu and cuda, compares
  local name=$1 pack=$2; shift 2
  glm-engine run - --pack "$pack" --backend cpu "$@" \
    --dump-logits "$T/$name.cpu.safetensors" > "$T/$name.cpu.out"
  glm-engine run - --pack "$pack" --backend cuda "$@" \
    --dump-logits "$T/$name.cuda.safetensors" > "$T/$name.cuda.out"
  python3 "$T/compare.py" "$T/$name.cuda.safetensors" \
    "$T/$name.cpu.safetensors" "$name" "$ROOT/tests/oracle"
  cmp "$T/$name.cpu.out" "$T/$name.cuda.out"
}

# 1. Oracle goldens (greedy tokens also equal transformers').
for g in "$ROOT"/tests/oracle/goldens/*/; do
  [ -f "$g/golden.safetensors" ] || continue
  set -- $(python3 "$ROOT/tests/oracle/golden_args.py" "$g/golden.safetensors")
  name=$(basename "$g")
  both "$name" "$g" --tokens "$1" --max-new "$2" --greedy
  shift 2
  grep -qx "generated tokens: $*" "$T/$name.cuda.out" \
    || { echo "$name: cuda tokens differ from transformers ($*)"; exit 1; }
done

# 2. Tiny packs of all three layouts; 12-token prompt > index_topk 8, so
#    DSA selects sparsely.
TOK=1,5,9,13,17,21,25,29,33,37,41,45
for layout in hf exl3 exlr8; do
  glmc synth --preset tiny --layout $layout --seed 7 -o "$T/tiny-$layout" \
    > /dev/null
  man=(); [ $layout = exlr8 ] && man=(--manifest mixed)
  both "tiny-$layout" "$T/tiny-$layout" "${man[@]}" --tokens $TOK --max-new 8
done

# 3. More than one rank: one line, exit 1.
if glm-engine run - --pack "$T/tiny-hf" --backend cuda --sparks 2 \
    --tokens 1 2> "$T/err"; then
  echo "--backend cuda --sparks 2 was accepted"; exit 1
fi
[ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "glm-engine launch" "$T/err"
echo "gpu_engine_cuda: OK"
