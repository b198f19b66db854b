#!/usr/bin/env bash
# End to end through the glmc CLI: synth every layout of the tiny preset (timed
# against the 30 s budget), verify, dequantize, damage a pack and check that
# verify names the damage, and the full-size index-only pack.
set -euo pipefail
t="${GLM_TEST_TMP:?}"
rm -rf "$t" && mkdir -p "$t"
fail() { echo "FAIL: $*" >&2; exit 1; }

# --version names the release and the plan formats it reads and writes.
glmc --version | grep -Eq '^glmc [0-9.]+ \(plan schema [0-9]+\.[0-9]+, runtime ABI [0-9]+\)$' \
  || fail "glmc --version: $(glmc --version 2>&1)"

for layout in hf exl3 exlr8; do
  start=$(date +%s%N)
  glmc synth --preset tiny --layout "$layout" --seed 3 -o "$t/tiny-$layout"
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "synth tiny $layout: ${ms} ms (budget 30000 ms on 2 cores)"
  extra=(); [ "$layout" = exlr8 ] && extra=(--manifest mixed)
  glmc verify "$t/tiny-$layout" "${extra[@]}" >"$t/verify-$layout.txt" \
    || { cat "$t/verify-$layout.txt"; fail "verify of fresh $layout pack"; }
done

# Every layout stores the MTP layer (layer 2) and verify names it.
for layout in hf exl3 exlr8; do
  grep -Eq "^note: [0-9]+ MTP tensors \(layer 2\)" "$t/verify-$layout.txt" \
    || { cat "$t/verify-$layout.txt"; fail "$layout: no MTP layer noted"; }
done

# dequant of an expert projection, and of the MTP layer's eh_proj, an MTP
# expert and its kv_a_proj_with_mqa (160 rows: EXL3 pads it), in every
# layout; the F32 output must exist under the HF name with the HF shape.
for name in model.layers.1.mlp.experts.3.up_proj.weight \
            model.layers.2.eh_proj.weight \
            model.layers.2.mlp.experts.1.down_proj.weight \
            model.layers.2.self_attn.kv_a_proj_with_mqa.weight; do
glmc dequant "$t/tiny-hf" --tensor "$name" -o "$t/hf.safetensors"
glmc dequant "$t/tiny-exl3" --tensor "$name" -o "$t/exl3.safetensors"
glmc dequant "$t/tiny-exlr8" --manifest mixed --tensor "$name" -o "$t/exlr8.safetensors"
glmc dequant "$t/tiny-exlr8" --width 4 --tensor "$name" -o "$t/exlr8-k4.safetensors"
python3 - "$t" "$name" <<'PY'
import json, struct, sys, math
t, name = sys.argv[1], sys.argv[2]
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    e = h[name]
    assert e['dtype'] == 'F32', e
    s, f = e['data_offsets']
    data = b[8 + n + s:8 + n + f]
    return e['shape'], struct.unpack('<%df' % (len(data) // 4), data)
shape, ref = load(f'{t}/hf.safetensors')
for lay in ('exl3', 'exlr8', 'exlr8-k4'):
    s, w = load(f'{t}/{lay}.safetensors')
    assert s == shape, (lay, s, shape)
    err = math.sqrt(sum((a - b) ** 2 for a, b in zip(w, ref)) / sum(a * a for a in ref))
    print(f'{name} {lay}: relative RMS error vs the BF16 source {err:.4f}')
    assert err < 0.35, (lay, err)
PY
done

# A flipped byte inside an exlr8 expert file must be named by verify.
f=$(ls "$t"/tiny-exlr8/experts/*.k3.safetensors | head -1)
cp -r "$t/tiny-exlr8" "$t/damaged"
g="$t/damaged/experts/$(basename "$f")"
size=$(stat -c %s "$g")
python3 - "$g" "$size" <<'PY'
import sys
p, size = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, 'rb').read())
b[size - 100] ^= 0x40
open(p, 'wb').write(b)
PY
if glmc verify "$t/damaged" --manifest k3 >"$t/damaged.txt" 2>&1; then
  cat "$t/damaged.txt"; fail "verify accepted a damaged pack"
fi
grep -q "DAMAGED.*k3" "$t/damaged.txt" || { cat "$t/damaged.txt"; fail "damage not named"; }
grep -q "half" "$t/damaged.txt" || { cat "$t/damaged.txt"; fail "half not named"; }
echo "damaged pack reported: $(grep DAMAGED "$t/damaged.txt" | head -1)"

# A truncated file is a clear error, not a crash.
cp -r "$t/tiny-exlr8" "$t/truncated"
h=$(ls "$t"/truncated/experts/*.index.safetensors | head -1)
truncate -s 1000 "$h"
if glmc verify "$t/truncated" --manifest mixed >"$t/trunc.txt" 2>&1; then fail "truncated index accepted"; fi
grep -q "$(basename "$h")" "$t/trunc.txt" || { cat "$t/trunc.txt"; fail "truncated file not named"; }

# Full-size geometry, index only: no weight bytes, fast.
glmc synth --preset glm53 --layout exlr8 --index-only -o "$t/glm53"
test -f "$t/glm53/config.json"
ls "$t/glm53/manifests/" | grep -q json
du -sh "$t/glm53"
echo "packs_cli: all checks passed"
