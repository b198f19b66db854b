#!/usr/bin/env bash
# The generated engine binary (glmc compile --emit engine): one executable,
# the glm-engine beside glmc with the plan inside.
#  1. it runs a tiny pack with no plan file beside it: the same tokens and
#     the same logit bytes as glm-engine running the plan file;
#  2. glmc inspect reads it; a 2-Spark engine under `launch` gives the
#     1-Spark tokens;
#  3. damage: a flipped byte in the embedded plan fails its checksum, a
#     damaged trailer is named, both with exit 1 and one line.
set -euo pipefail
T=${GLM_TEST_TMP:-/tmp/glm-e2e-engine-image}
rm -rf "$T" && mkdir -p "$T"
glmc compile --help > "$T/compile-help.txt" 2>&1 || true
if ! grep -q -- "--sparks" "$T/compile-help.txt"; then
  echo "glmc has no compiler (MLIR off): skipped"
  exit 0
fi
glmc synth --preset tiny --layout exl3 --seed 7 -o "$T/pack" > /dev/null 2>&1
glmc compile "$T/pack" --no-nvrtc --max-context 256 -o "$T/tiny.glmplan" 2> /dev/null
glmc compile "$T/pack" --no-nvrtc --max-context 256 --emit engine -o "$T/tiny-engine" \
  2> "$T/compile.err"
grep -q 'with the plan inside' "$T/compile.err"
[ -x "$T/tiny-engine" ]
[ ! -e "$T/tiny-engine.plan.tmp" ]

# 1. The engine alone against glm-engine + the plan file.
args=(--pack "$T/pack" --tokens 1,5,9,2,7 --max-new 6 --greedy)
glm-engine run "$T/tiny.glmplan" "${args[@]}" --dump-logits "$T/plan.st" > "$T/plan.out"
(cd "$T" && ./tiny-engine run "${args[@]}" --dump-logits "$T/engine.st" > "$T/engine.out")
diff "$T/plan.out" "$T/engine.out"
cmp "$T/plan.st" "$T/engine.st"
"$T/tiny-engine" --version | grep -q 'plan schema'

# 2. inspect reads the engine; launch runs a 2-Spark engine's ranks.
glmc inspect "$T/tiny-engine" > "$T/inspect.txt"
grep -q "^plan $T/tiny-engine: schema" "$T/inspect.txt"
glmc compile "$T/pack" --no-nvrtc --max-context 256 --sparks 2 --emit engine \
  -o "$T/tp2-engine" 2> /dev/null
"$T/tp2-engine" launch --sparks 2 "${args[@]}" > "$T/tp2.out" 2> "$T/tp2.err"
grep '^generated tokens' "$T/plan.out" > "$T/plan.tokens"
grep '^generated tokens' "$T/tp2.out" > "$T/tp2.tokens"
diff "$T/plan.tokens" "$T/tp2.tokens"

# 3. Damage: one byte of the embedded plan, then the trailer's offset.
size=$(stat -c %s "$T/tiny-engine")
plan_size=$(stat -c %s "$T/tiny.glmplan")
cp "$T/tiny-engine" "$T/flipped"
at=$(( size - 32 - plan_size / 2 ))
# The byte's complement: always a change (0xff written over 0xff was none).
old=$(od -An -tu1 -j $at -N1 "$T/flipped" | tr -d ' ')
printf "\\x$(printf %02x $(( 255 - old )))" | dd of="$T/flipped" bs=1 seek=$at conv=notrunc 2> /dev/null
cmp -s "$T/flipped" "$T/tiny-engine" && { echo "the damage changed no byte"; exit 1; }
if "$T/flipped" run "${args[@]}" > /dev/null 2> "$T/flipped.err"; then
  echo "a damaged engine ran"; exit 1
fi
grep -q 'fails its checksum' "$T/flipped.err"
[ "$(wc -l < "$T/flipped.err")" = 1 ]
cp "$T/tiny-engine" "$T/trailer"
printf '\xff\xff\xff\x7f' | dd of="$T/trailer" bs=1 seek=$(( size - 24 )) conv=notrunc 2> /dev/null
if glmc inspect "$T/trailer" > /dev/null 2> "$T/trailer.err"; then
  echo "a damaged trailer was read"; exit 1
fi
grep -q 'truncated or damaged' "$T/trailer.err"
# -o is required.
if glmc compile "$T/pack" --no-nvrtc --emit engine 2> "$T/noout.err"; then
  echo "--emit engine without -o succeeded"; exit 1
fi
grep -q 'needs -o ENGINE' "$T/noout.err"
echo "engine image: OK"
