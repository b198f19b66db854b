#!/usr/bin/env bash
# glmc compile end to end: the tiny pack of every layout for 1..4 Sparks,
# byte-identical plans, every --emit stage, a refused over-budget plan, and
# the full-size GLM-5.3 exlr8 index-only pack for 1..4 Sparks within 10 s.
set -euo pipefail
T=${GLM_TEST_TMP:-$(mktemp -d)}
rm -rf "$T" && mkdir -p "$T"
if ! glmc compile --help >/dev/null 2>&1; then
  echo "glmc was built without MLIR (GLM_WITH_MLIR=OFF): compile tests skipped"
  exit 0
fi

glmc synth --preset tiny --layout exlr8 -o "$T/tiny" > /dev/null
manifest=$(ls "$T/tiny/manifests" | head -1 | sed 's/^exlr8-manifest-//; s/\.json$//')
for n in 1 2 3 4; do
  glmc compile "$T/tiny" --sparks "$n" --manifest "$manifest" --arch sm_121,sm_90 \
    -o "$T/tiny.$n.plan"
  test -s "$T/tiny.$n.plan"
done
glmc compile "$T/tiny" --sparks 3 --manifest "$manifest" --arch sm_121,sm_90 -o "$T/tiny.3b.plan"
cmp "$T/tiny.3.plan" "$T/tiny.3b.plan"

# Stages: model-level IR, kernel-level IR, kernel sources.
glmc compile "$T/tiny" --sparks 2 --manifest "$manifest" --emit=model | grep -q 'glm.moe'
glmc compile "$T/tiny" --sparks 2 --manifest "$manifest" --emit=kernel | grep -q 'glm.fused_expert_gemv'
glmc compile "$T/tiny" --sparks 2 --manifest "$manifest" --emit=cuda --no-nvrtc | grep -q '====='
glmc compile "$T/tiny" --sparks 2 --manifest "$manifest" --dump-ir-after fuse -o "$T/dump.plan" 2> "$T/dump.txt"
grep -q 'IR Dump After GlmFuse' "$T/dump.txt"

# A plan that does not fit is refused with a per-rank table.
if glmc compile "$T/tiny" --sparks 2 --manifest "$manifest" --max-context 1000000 \
     --memory-per-spark 0.01 -o "$T/over.plan" 2> "$T/over.txt"; then
  echo "over-budget plan was not refused" >&2; exit 1
fi
grep -q 'does not fit' "$T/over.txt"
grep -q 'OVER' "$T/over.txt"

# Other layouts.
for layout in exl3 hf; do
  glmc synth --preset tiny --layout "$layout" -o "$T/tiny-$layout" > /dev/null
  glmc compile "$T/tiny-$layout" --sparks 3 -o "$T/tiny-$layout.plan"
done

# Full size, index only: each compile within 10 s on a 2-core machine.
glmc synth --preset glm53 --layout exlr8 --index-only -o "$T/glm53" > /dev/null
fm=$(ls "$T/glm53/manifests" | head -1 | sed 's/^exlr8-manifest-//; s/\.json$//')
for n in 1 2 3 4; do
  start=$(date +%s.%N)
  glmc compile "$T/glm53" --sparks "$n" --manifest "$fm" --memory-per-spark 0 -o "$T/glm53.$n.plan"
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  echo "glm53 exlr8 index-only, $n Sparks: ${secs} s"
  if (( $(echo "$secs > 10" | bc) )); then
    echo "compile took ${secs} s (> 10 s)" >&2; exit 1
  fi
done
echo "compile_plans: ok"
