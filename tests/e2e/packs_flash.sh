#!/usr/bin/env bash
# GLM-5.3-Flash packs end to end through the CLI: synth flash-tiny in every
# layout, verify (vision and MTP tensors noted, not errors), dequantize a KDA
# projection against the hf source within each codec's error, run the
# reference forward on each (hf greedy tokens the baseline, quantized layouts
# finite logits), every layout through plans at 1 and 2 ranks (the
# reference's tokens, the SwiGLU clamp applied in the trellis experts, the
# MTP layer bound and shown by glmc inspect), damage each layout and check the error names the file and
# what to do, and the full-size index-only exlr8 pack.
set -euo pipefail
t="${GLM_TEST_TMP:?}"
rm -rf "$t" && mkdir -p "$t"
fail() { echo "FAIL: $*" >&2; exit 1; }

for layout in hf exl3 exlr8; do
  start=$(date +%s%N)
  glmc synth --preset flash-tiny --layout "$layout" --seed 5 -o "$t/$layout" > /dev/null
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "synth flash-tiny $layout: ${ms} ms"
  extra=(); [ "$layout" = exlr8 ] && extra=(--manifest k4)
  glmc verify "$t/$layout" "${extra[@]}" >"$t/verify-$layout.txt" \
    || { cat "$t/verify-$layout.txt"; fail "verify of fresh flash-tiny $layout pack"; }
  grep -Eq "^note: [0-9]+ vision tensors \(model.visual.\*\) recognised and skipped" \
    "$t/verify-$layout.txt" || { cat "$t/verify-$layout.txt"; fail "$layout: no vision note"; }
  grep -Eq "^note: [0-9]+ MTP tensors \(layer 2\) recognised and skipped" \
    "$t/verify-$layout.txt" || { cat "$t/verify-$layout.txt"; fail "$layout: no MTP note"; }
done
# The release's manifest names, the index slices and the weight set id.
for m in k2 k3 k4 bit201 bit349 mixed; do
  test -f "$t/exlr8/manifests/exlr8-manifest-$m.json" || fail "manifest $m missing"
done
test -f "$t/exlr8/index-slices/tp4/k3/rank3.safetensors" || fail "index slice missing"
grep -Eq '^[0-9a-f]{64}$' "$t/exlr8/set_id" || fail "set_id missing"
test -f "$t/exlr8/dense/exlr8-vision.safetensors" || fail "vision file missing"

# Dequantize KDA tensors from every layout; compare with the hf source.
P=model.language_model.layers.0.self_attn
for layout in hf exl3 exlr8; do
  for n in q_proj.weight o_proj.weight q_conv1d.weight A_log dt_bias; do
    glmc dequant "$t/$layout" --manifest k4 --tensor "$P.$n" -o "$t/$layout-$n.safetensors" \
      > /dev/null 2>&1 || glmc dequant "$t/$layout" --tensor "$P.$n" -o "$t/$layout-$n.safetensors" > /dev/null
  done
done
python3 - "$t" "$P" <<'PY'
import json, struct, sys, math
t, P = sys.argv[1], sys.argv[2]
def load(p, name):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    e = json.loads(b[8:8 + n])[name]
    s, f = e['data_offsets']
    return e['shape'], struct.unpack('<%df' % ((f - s) // 4), b[8 + n + s:8 + n + f])
# Codec error bounds (relative RMS vs the BF16 source): exl3 layer 0 is K2
# MUL1 (the mosaic's narrow layers), exlr8 q_proj MXFP8 and o_proj TRELLIS K4.
bounds = {('exl3', 'q_proj.weight'): 0.45, ('exl3', 'o_proj.weight'): 0.45,
          ('exlr8', 'q_proj.weight'): 0.08, ('exlr8', 'o_proj.weight'): 0.15}
for n in ('q_proj.weight', 'o_proj.weight', 'q_conv1d.weight', 'A_log', 'dt_bias'):
    name = f'{P}.{n}'
    shape, ref = load(f'{t}/hf-{n}.safetensors', name)
    for lay in ('exl3', 'exlr8'):
        s, w = load(f'{t}/{lay}-{n}.safetensors', name)
        assert s == shape, (lay, n, s, shape)
        err = math.sqrt(sum((a - b) ** 2 for a, b in zip(w, ref)) / sum(a * a for a in ref))
        bound = bounds.get((lay, n), 0.0)  # plain tensors: stored as they are
        print(f'{lay} {n}: relative RMS error vs hf {err:.4f} (bound {bound})')
        assert err <= bound, (lay, n, err, bound)
PY

# The reference forward: hf greedy tokens are the baseline; quantized
# layouts must run and give finite logits.
TOK=1,5,9,13,17,21,25,29,33,37,41,45
for layout in hf exl3 exlr8; do
  man=(); [ $layout = exlr8 ] && man=(--manifest k4)
  glm-engine run - --pack "$t/$layout" "${man[@]}" --backend reference --tokens $TOK \
    --max-new 6 --greedy --dump-logits "$t/$layout.logits" > "$t/$layout.out"
  grep -q "^generated tokens: [0-9]" "$t/$layout.out" || { cat "$t/$layout.out"; fail "$layout run"; }
  echo "$layout: $(grep '^generated tokens' "$t/$layout.out")"
done
glm-engine run - --pack "$t/hf" --backend reference --tokens $TOK --max-new 6 --greedy \
  > "$t/hf2.out"
cmp "$t/hf.out" "$t/hf2.out" || fail "hf greedy tokens differ between runs"
# The hf pack through plans (the vision tower stays out; the MTP layer is
# bound and its caches sized, read by no decode graph): the same greedy
# tokens as the reference, 1 and 2 ranks.
for n in 1 2; do
  glmc compile "$t/hf" --sparks $n --no-nvrtc --prefill-chunks 0 -o "$t/hf.glmplan" \
    2> "$t/hf-compile.err" || { cat "$t/hf-compile.err"; fail "hf plan ($n ranks)"; }
  grep -q "the MTP layer's weights and KV" "$t/hf-compile.err" \
    || { cat "$t/hf-compile.err"; fail "hf compile ($n ranks) does not report the MTP layer"; }
  glmc inspect "$t/hf.glmplan" > "$t/hf-inspect.txt"
  grep -Eq "^  mtp +moe +0 .*\(layer 2, not read per decoded token\) weights" "$t/hf-inspect.txt" \
    || { cat "$t/hf-inspect.txt"; fail "inspect shows no mtp row ($n ranks)"; }
  glm-engine run "$t/hf.glmplan" --pack "$t/hf" --backend cpu --tokens $TOK --max-new 6 \
    --greedy > "$t/hf-plan.out" 2> /dev/null
  [ "$(grep '^generated tokens' "$t/hf-plan.out")" = "$(grep '^generated tokens' "$t/hf.out")" ] \
    || { cat "$t/hf-plan.out" "$t/hf.out"; fail "hf plan ($n ranks) tokens differ from the reference"; }
done
grep "^  mtp" "$t/hf-inspect.txt"
# The quantized layouts through plans (trellis experts with the SwiGLU clamp
# in moe_trellis): the reference's greedy tokens, 1 and 2 ranks.
for layout in exl3 exlr8; do
  man=(); [ $layout = exlr8 ] && man=(--manifest k4)
  for n in 1 2; do
    glmc compile "$t/$layout" "${man[@]}" --sparks $n --no-nvrtc --prefill-chunks 0 \
      -o "$t/$layout-$n.glmplan" 2> /dev/null
    glm-engine run "$t/$layout-$n.glmplan" --pack "$t/$layout" "${man[@]}" --backend cpu \
      --tokens $TOK --max-new 6 --greedy > "$t/$layout-plan-$n.out" 2> /dev/null
    [ "$(grep '^generated tokens' "$t/$layout-plan-$n.out")" = \
      "$(grep '^generated tokens' "$t/$layout.out")" ] \
      || { cat "$t/$layout-plan-$n.out" "$t/$layout.out"; fail "$layout plan ($n ranks) tokens"; }
  done
  echo "$layout plan: $(grep '^generated tokens' "$t/$layout-plan-1.out")"
done
# A limit low enough to clamp most gate/up channels: the plan's logits stay
# the reference's (trellis families: fp32 sums, 2e-5 per layer) and the
# clamp changes the tokens, so it is applied on both sides.
for layout in exl3 exlr8; do
  man=(); [ $layout = exlr8 ] && man=(--manifest k4)
  rm -rf "$t/$layout-lo" && cp -r "$t/$layout" "$t/$layout-lo"
  python3 - "$t/$layout-lo/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.get('text_config', c)['swiglu_limit'] = 0.05
json.dump(c, open(sys.argv[1], 'w'), indent=2)
PY
  glmc compile "$t/$layout-lo" "${man[@]}" --no-nvrtc --prefill-chunks 0 -o "$t/lo.glmplan" 2> /dev/null
  glm-engine run - --pack "$t/$layout-lo" "${man[@]}" --backend reference --tokens $TOK \
    --max-new 6 --greedy --dump-logits "$t/lo-ref.logits" > "$t/lo-ref.out" 2> /dev/null
  glm-engine run "$t/lo.glmplan" --pack "$t/$layout-lo" "${man[@]}" --backend cpu \
    --tokens $TOK --max-new 6 --greedy --dump-logits "$t/lo-plan.logits" > "$t/lo-plan.out" 2> /dev/null
  [ "$(grep '^generated tokens' "$t/lo-ref.out")" = "$(grep '^generated tokens' "$t/lo-plan.out")" ] \
    || fail "$layout clamped plan tokens differ from the reference"
  [ "$(grep '^generated tokens' "$t/lo-ref.out")" != "$(grep '^generated tokens' "$t/$layout.out")" ] \
    || fail "$layout: swiglu_limit 0.05 changed nothing (clamp not applied)"
  python3 - "$t" "$layout" <<'PY'
import json, math, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    s, f = json.loads(b[8:8 + n])['logits']['data_offsets']
    return struct.unpack('<%df' % ((f - s) // 4), b[8 + n + s:8 + n + f])
t, lay = sys.argv[1:]
a, b = load(f'{t}/lo-ref.logits'), load(f'{t}/lo-plan.logits')
rel = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(x * x for x in a))
assert len(a) == len(b) and rel < 1e-4, (lay, rel)
print(f'{lay} clamped (limit 0.05): plan vs reference logits {rel:.1e}')
PY
done
python3 - "$t" <<'PY'
import json, struct, sys, math
t = sys.argv[1]
for lay in ('hf', 'exl3', 'exlr8'):
    b = open(f'{t}/{lay}.logits', 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    e = json.loads(b[8:8 + n])['logits']
    s, f = e['data_offsets']
    v = struct.unpack('<%df' % ((f - s) // 4), b[8 + n + s:8 + n + f])
    assert all(math.isfinite(x) for x in v), lay
    print(f'{lay}: {len(v)} finite logits')
PY

# Damage, one per kind; every error names the file and what to do.
expect_damage() { # DIR ARGS... : verify must fail and name $NEEDLE
  if glmc verify "$@" > "$t/damage.txt" 2>&1; then cat "$t/damage.txt"; fail "verify accepted: $*"; fi
  grep -q -- "$NEEDLE" "$t/damage.txt" || { cat "$t/damage.txt"; fail "'$NEEDLE' not named: $*"; }
  echo "damage named: $(grep -m1 -- "$NEEDLE" "$t/damage.txt" | cut -c1-160)"
}
# exlr8: a truncated expert file, a flipped byte (checksum), a manifest
# naming a width the pack lacks, a stale set_id, a damaged index slice.
cp -r "$t/exlr8" "$t/x-trunc"
f=$(ls "$t"/x-trunc/experts/*.k3.safetensors | head -1)
truncate -s $(( $(stat -c %s "$f") - 4096 )) "$f"
NEEDLE="$(basename "$f")" expect_damage "$t/x-trunc" --manifest k3
grep -q "re-download" "$t/damage.txt" || fail "truncation: no advice"
cp -r "$t/exlr8" "$t/x-flip"
f=$(ls "$t"/x-flip/experts/*.k2.safetensors | head -1)
python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-300]^=0x10; open(p,'wb').write(b)" "$f"
NEEDLE="xxh64 mismatch" expect_damage "$t/x-flip" --manifest k2
python3 - "$t/exlr8/manifests/exlr8-manifest-k4.json" "$t/k5.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
l = next(iter(j['layers'].values()))
l['down'][1] = 5
json.dump(j, open(sys.argv[2], 'w'))
PY
if glmc verify "$t/exlr8" --manifest "$t/k5.json" > "$t/k5.txt" 2>&1; then fail "K5 manifest accepted"; fi
grep -q "k5.json.*width K5.*stores widths 2,3,4" "$t/k5.txt" || { cat "$t/k5.txt"; fail "K5 not named"; }
echo "damage named: $(head -c 160 "$t/k5.txt")"
cp -r "$t/exlr8" "$t/x-set"
echo 0000000000000000000000000000000000000000000000000000000000000000 > "$t/x-set/set_id"
NEEDLE="set_id" expect_damage "$t/x-set" --manifest k4
cp -r "$t/exlr8" "$t/x-slice"
python3 - "$t/x-slice/index-slices/tp2/k3/rank1.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
e = h['layers.1.index']
b[8 + n + e['data_offsets'][0]] ^= 0x01  # the first offset, low byte
open(p, 'wb').write(b)
PY
rm -rf "$t/x-slice/hashes" "$t/x-slice/set_id"  # only the slice check remains
NEEDLE="rank1.safetensors" expect_damage "$t/x-slice" --manifest k4
# exl3: a truncated shard.
cp -r "$t/exl3" "$t/e-trunc"
f=$(ls "$t"/e-trunc/model-*.safetensors | head -1)
truncate -s $(( $(stat -c %s "$f") / 2 )) "$f"
NEEDLE="$(basename "$f")" expect_damage "$t/e-trunc"
# hf: an A_log far outside what exp(A_log) can use.
cp -r "$t/hf" "$t/h-alog"
python3 - "$t/h-alog" <<'PY'
import json, struct, sys, glob
for p in glob.glob(sys.argv[1] + '/*.safetensors'):
    b = bytearray(open(p, 'rb').read())
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    e = h.get('model.language_model.layers.0.self_attn.A_log')
    if e:
        b[8 + n + e['data_offsets'][0]: 8 + n + e['data_offsets'][0] + 4] = struct.pack('<f', 1e6)
        open(p, 'wb').write(b)
PY
rm -rf "$t/h-alog/hashes"
NEEDLE="A_log" expect_damage "$t/h-alog"

# Full-size geometry, index only: headers, manifests, index slices.
start=$(date +%s%N)
glmc synth --preset flash --layout exlr8 --index-only -o "$t/flash" > /dev/null
echo "synth flash exlr8 --index-only: $(( ($(date +%s%N) - start) / 1000000 )) ms"
for m in k2 k3 k4 bit201 bit349; do
  test -f "$t/flash/manifests/exlr8-manifest-$m.json" || fail "flash manifest $m missing"
done
python3 - "$t/flash" <<'PY'
import json, struct, sys
d = sys.argv[1]
def header(p):
    b = open(p, 'rb').read(8)
    n = struct.unpack('<Q', b)[0]
    return json.loads(open(p, 'rb').read(8 + n)[8:])
h = header(f'{d}/experts/exlr8-layer-003.index.safetensors')
assert h['k3.index']['shape'] == [289, 3, 16, 2], h['k3.index']  # 288 + shared row
assert h['k3.gate.su_block']['shape'] == [289, 32], h['k3.gate.su_block']
assert h['signs.in']['shape'] == [4096]
s = header(f'{d}/index-slices/tp4/k2/rank0.safetensors')
assert s['layers.3.owned']['shape'] == [289 * 16 // 4, 2], s['layers.3.owned']
print('flash index: 289 rows x 16 halves, 32 block scales, tp4 slices of 1156 halves')
PY
if glmc verify "$t/flash" --manifest k3 > "$t/flash-verify.txt" 2>&1; then fail "index-only verify passed"; fi
grep -q "index-only" "$t/flash-verify.txt" || { cat "$t/flash-verify.txt"; fail "index-only not said"; }
du -sh "$t/flash"
# Full size through plans: the exlr8 K2 release on one H200-sized rank, and the
# EXL3 mosaic (its quantization_config.json lists every tensor: ~35 MB) on one
# Spark.
# Both carry the MTP layer (index-only packs list it as a release ships it),
# its weights and caches in the budget.
glmc compile "$t/flash" --manifest k2 --sparks 1 --memory-per-spark 139 --no-nvrtc \
  --prefill-chunks 0 -o "$t/flash-k2.glmplan" 2> "$t/flash-k2.err" \
  || { cat "$t/flash-k2.err"; fail "flash k2 plan"; }
grep "rank 0:" "$t/flash-k2.err"
grep -q "the MTP layer's weights and KV" "$t/flash-k2.err" || fail "flash k2 plan has no MTP layer"
glmc synth --preset flash --layout exl3 --index-only -o "$t/mosaic" > /dev/null 2>&1
[ "$(stat -c %s "$t/mosaic/quantization_config.json")" -gt $((16 << 20)) ] \
  || fail "the mosaic's quantization_config.json is not the large case"
glmc compile "$t/mosaic" --sparks 1 --no-nvrtc --prefill-chunks 0 -o "$t/mosaic.glmplan" \
  2> "$t/mosaic.err" || { cat "$t/mosaic.err"; fail "mosaic plan"; }
grep "rank 0:" "$t/mosaic.err"
grep -q "the MTP layer's weights and KV" "$t/mosaic.err" || fail "mosaic plan has no MTP layer"
echo "packs_flash: all checks passed"
