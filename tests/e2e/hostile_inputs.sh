#!/usr/bin/env bash
# Issue 18's holes through the real CLIs, on the tiny synthetic packs:
#  1. tokenizer.json with an added-token id >= 2^31 (used to segfault run and
#     serve) or >= 2^32 (used to wrap to id 0): one line naming the file and
#     the token, exit 1;
#  2. every byte of a fresh pack is covered by some check (verify's summary
#     says "no check 0"; without SHA-256 sidecars only padding no reader
#     uses is left), 64 flipped bytes of input_layernorm.weight are
#     found (SHA-256 sidecar), and without sidecars a damaged exponent is
#     still found (value check) and refused by run at load;
#  3. ranks started by hand with different --tokens / sampling flags or
#     --prefill are refused naming both; a rank given no request adopts
#     rank 0's;
#  4. out-of-range numbers: --max-new 2^63-1, --port 70000, --max-queue -1,
#     --memory-per-spark nan;
#  5. unbounded reads: PLAN /dev/zero, --manifest /dev/zero, a FIFO in place
#     of a pack file (used to block verify, compile and run in open()) or of
#     a kernel cache entry (blocked compile);
#  6. config.json values of the wrong type or range, and values of keys the
#     executors assume (scoring_func, rope_interleave: compile used to
#     ignore them);
#  9. --dump-logits DIR / dequant -o DIR leave no DIR.tmp; the server
#     accepts prompt ids the CLI accepts (ids above the tokenizer's own).
# Every refusal is one line "...: error: ..." and exit status 1 (CLI11 flag
# errors: its own status, not 0).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/coordinator.sh"
T=${GLM_TEST_TMP:-/tmp/glm-e2e-hostile}
rm -rf "$T" && mkdir -p "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }

glmc synth --preset tiny --layout hf --seed 5 -o "$T/hf" > /dev/null
glmc synth --preset tiny --layout exlr8 --seed 5 -o "$T/x8" > /dev/null

# refused WANT CMD...: CMD fails (any status but 0, no signal) and its stderr
# holds WANT.
refused() {
  local want=$1; shift
  local rc=0
  "$@" > "$T/out" 2> "$T/err" || rc=$?
  [ $rc -ne 0 ] || { cat "$T/out" "$T/err"; fail "accepted: $*"; }
  [ $rc -lt 128 ] || { cat "$T/err"; fail "crashed ($rc): $*"; }
  grep -q -- "$want" "$T/err" || { cat "$T/err"; fail "no '$want' from: $*"; }
}

# 1. Tokenizer ids.
for id in 2147483648 4294967296; do
  cp -r "$T/hf" "$T/tok-$id"
  python3 - "$T/tok-$id/tokenizer.json" "$id" <<'PY'
import json, sys
p, i = sys.argv[1], int(sys.argv[2])
t = json.load(open(p)); t["added_tokens"][0]["id"] = i
json.dump(t, open(p, "w"))
PY
  refused "tokenizer.json: added token '.*' has id $id; token ids must be integers in 0..511" \
    glm-engine run - --pack "$T/tok-$id" --tokens 1,2 --max-new 1
  refused "has id $id" glm-engine serve - --pack "$T/tok-$id" --port 0
done
echo "1. tokenizer ids >= 2^31 / 2^32 refused by run and serve"

# 2. Coverage.
for layout in hf exl3 exlr8; do
  d="$T/x8"; [ $layout = hf ] && d="$T/hf"
  if [ $layout = exl3 ]; then
    glmc synth --preset tiny --layout exl3 --seed 5 -o "$T/e3" > /dev/null; d="$T/e3"
  fi
  extra=(); [ $layout = exlr8 ] && extra=(--manifest mixed)
  glmc verify "$d" "${extra[@]}" > "$T/v.txt" || { cat "$T/v.txt"; fail "verify $layout"; }
  grep -q "^coverage: .*; no check 0 (0.00%" "$T/v.txt" || { cat "$T/v.txt"; fail "$layout: bytes without a check"; }
done
echo "2. fresh hf/exl3/exlr8 packs: every byte covered by some check"
# Without the sidecars every byte but padding no reader uses is still
# covered (exl3's model.safetensors.index.json used to be left out).
for d in hf x8 e3; do
  rm -rf "$T/nosha"; cp -r "$T/$d" "$T/nosha"; rm -rf "$T/nosha/hashes"
  extra=(); [ $d = x8 ] && extra=(--manifest mixed)
  glmc verify "$T/nosha" "${extra[@]}" > "$T/v.txt" || { cat "$T/v.txt"; fail "verify $d without sidecars"; }
  grep -q "^coverage: .*; no check \([0-9]*\) (.*, of which \1 padding no reader uses)" "$T/v.txt" \
    || { cat "$T/v.txt"; fail "$d without sidecars: bytes without a check that are not padding"; }
done
echo "2. without sidecars: every byte but padding covered by some check"

# The dense file and offset of a plain tensor of the exlr8 pack.
locate() { # PACK TENSOR -> "FILE OFFSET BYTES DTYPE"
  python3 - "$1" "$2" <<'PY'
import glob, json, struct, sys
for f in sorted(glob.glob(sys.argv[1] + "/dense/*.safetensors")):
    b = open(f, "rb").read(8); n = struct.unpack("<Q", b)[0]
    h = json.loads(open(f, "rb").read(8 + n)[8:])
    if sys.argv[2] in h:
        s, e = h[sys.argv[2]]["data_offsets"]
        print(f, 8 + n + s, e - s, h[sys.argv[2]]["dtype"]); break
PY
}
read -r file off len dtype <<< "$(locate "$T/x8" input_layernorm.weight)"
[ -n "$file" ] || fail "no input_layernorm.weight in the exlr8 pack"
cp -r "$T/x8" "$T/x8-flip"
f2="$T/x8-flip/${file#$T/x8/}"
python3 - "$f2" "$off" <<'PY'
import sys
p, off = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read())
for i in range(off, off + 64):
    b[i] ^= 0xFF
open(p, "wb").write(b)
PY
rc=0; glmc verify "$T/x8-flip" --manifest mixed > "$T/v.txt" || rc=$?
[ $rc = 2 ] || { cat "$T/v.txt"; fail "64 flipped bytes of input_layernorm.weight passed verify ($rc)"; }
grep -q "^DAMAGED ${file#$T/x8/}: whole file at offset 0: SHA-256 .* differs" "$T/v.txt" \
  || { cat "$T/v.txt"; fail "damage not named by the sidecar"; }
echo "2. 64 flipped bytes of input_layernorm.weight: verify exit 2 ($(grep -c DAMAGED "$T/v.txt") finding(s))"

# Without sidecars: a damaged exponent (the high byte of one element) is
# found by the value check and refused at load.
cp -r "$T/x8-flip" "$T/x8-nosha"; rm -rf "$T/x8-nosha/hashes"
cp "$T/x8/${file#$T/x8/}" "$T/x8-nosha/${file#$T/x8/}"
python3 - "$T/x8-nosha/${file#$T/x8/}" "$off" "$dtype" <<'PY'
import sys
p, off, dt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
b = bytearray(open(p, "rb").read())
hi = off + (1 if dt in ("BF16", "F16") else 3)
b[hi] = 0x7F  # exponent all ones: inf/nan or a huge value
open(p, "wb").write(b)
PY
rc=0; glmc verify "$T/x8-nosha" --manifest mixed > "$T/v.txt" || rc=$?
[ $rc = 2 ] || { cat "$T/v.txt"; fail "damaged norm exponent passed verify without sidecars"; }
grep -q "^DAMAGED .*input_layernorm.weight at offset $off: element 0 is .*a norm weight or bias must be finite" "$T/v.txt" \
  || { cat "$T/v.txt"; fail "value check did not name the tensor"; }
grep -q "value check [1-9]" "$T/v.txt" || { cat "$T/v.txt"; fail "no value-check bytes in the summary"; }
refused "input_layernorm.weight: element 0 is" \
  glm-engine run - --pack "$T/x8-nosha" --manifest mixed --tokens 1,2 --max-new 1
echo "2. without sidecars: damaged norm named by verify and refused at load"

# Signs: one element that is not exactly +-1.
cp -r "$T/x8" "$T/x8-signs"; rm -rf "$T/x8-signs/hashes"
python3 - "$T/x8-signs" <<'PY'
import glob, json, struct, sys
f = sorted(glob.glob(sys.argv[1] + "/experts/*.index.safetensors"))[0]
b = bytearray(open(f, "rb").read()); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); s, e = h["signs.in"]["data_offsets"]
b[8 + n + s] ^= 0x01  # the lowest mantissa/integer bit of element 0
open(f, "wb").write(b)
PY
rc=0; glmc verify "$T/x8-signs" --manifest mixed > "$T/v.txt" || rc=$?
[ $rc = 2 ] && grep -q "DAMAGED .*signs.in .*not exactly +1 or -1" "$T/v.txt" \
  || { cat "$T/v.txt"; fail "damaged signs passed verify"; }
refused "signs.in: element 0" \
  glm-engine run - --pack "$T/x8-signs" --manifest mixed --tokens 1,2 --max-new 1
echo "2. a sign that is not +-1: named by verify and refused at load"

# 3. Ranks by hand must run one request.
ranks() { # RANK0-ARGS -- RANK1-ARGS; sets rc0 rc1, output in $T/r0.* $T/r1.*
  local a=() b=()
  while [ "$1" != -- ]; do a+=("$1"); shift; done; shift; b=("$@")
  glm-engine run "${PLAN:--}" --pack "$T/hf" --rank 0 --world 2 --coordinator 127.0.0.1:0 \
    --join-timeout 120 "${a[@]}" > "$T/r0.out" 2> "$T/r0.err" &
  local p0=$!
  local coord; coord=$(coordinator_of "$T/r0.err" $p0)
  rc1=0; rc0=0
  glm-engine run "${PLAN:--}" --pack "$T/hf" --rank 1 --world 2 --coordinator "$coord" \
    --join-timeout 120 "${b[@]}" > "$T/r1.out" 2> "$T/r1.err" || rc1=$?
  wait $p0 || rc0=$?
}
mismatch() { # WANT RANK0-ARGS -- RANK1-ARGS
  local want=$1; shift
  ranks "$@"
  [ $rc0 = 1 ] && [ $rc1 = 1 ] || { cat "$T/r0.err" "$T/r1.err"; fail "ranks ran ($rc0, $rc1): $*"; }
  grep -q -- "$want" "$T/r0.err" && grep -q -- "$want" "$T/r1.err" \
    || { cat "$T/r0.err" "$T/r1.err"; fail "not named: $want"; }
  if grep -q "^generated tokens" "$T/r0.out"; then fail "rank 0 printed tokens"; fi
}
mismatch "rank 1 was given the prompt tokens 1,2,4 but rank 0 runs 1,2,3" \
  --tokens 1,2,3 --max-new 2 --greedy -- --tokens 1,2,4 --max-new 2 --greedy
mismatch "rank 1 was given --max-new 3 but rank 0 runs --max-new 2" \
  --tokens 1,2,3 --max-new 2 -- --tokens 1,2,3 --max-new 3
mismatch "rank 1 was given --temperature 0.5 --top-p 1 --seed 1 but rank 0 runs --temperature 0.5 --top-p 1 --seed 2" \
  --tokens 1,2,3 --temperature 0.5 --seed 2 -- --tokens 1,2,3 --temperature 0.5 --seed 1
mismatch "rank 1 was given --greedy but rank 0 runs --temperature 0.7" \
  --tokens 1,2,3 --temperature 0.7 -- --tokens 1,2,3 --greedy
# Rank 1 with no request adopts rank 0's: the tokens of one process.
glm-engine run - --pack "$T/hf" --tokens 3,1,4,1,5 --max-new 4 --temperature 0.8 \
  --seed 9 > "$T/one.out"
ranks --tokens 3,1,4,1,5 --max-new 4 --temperature 0.8 --seed 9 --
[ $rc0 = 0 ] && [ $rc1 = 0 ] || { cat "$T/r0.err" "$T/r1.err"; fail "adopting rank failed"; }
diff <(grep "^generated tokens" "$T/one.out") <(grep "^generated tokens" "$T/r0.out") \
  || fail "2 ranks (rank 1 adopting) differ from one process"
# Chunked prefill runs other graphs (other collectives) than token steps:
# the ranks must feed the prompt the same way.
glmc compile --help > "$T/compile-help.txt" 2>&1 || true
if grep -q -- "--sparks" "$T/compile-help.txt"; then
  glmc compile "$T/hf" --sparks 2 --no-nvrtc --decode-batches 1 --prefill-chunks 8 \
    -o "$T/p2.glmplan" > /dev/null 2>&1
  PLAN="$T/p2.glmplan" mismatch "rank 1 runs --prefill chunked but rank 0 runs --prefill tokens" \
    --tokens 1,2,3,4,5,6,7,8,9,10,11 --max-new 2 --prefill tokens --
fi
echo "3. ranks by hand: differing requests refused naming both; rank 1 adopts rank 0's"

# 4. Numbers.
refused "exceeds the context of" \
  glm-engine run - --pack "$T/hf" --tokens 1 --max-new 9223372036854775807
refused "not an integer in" glm-engine run - --pack "$T/hf" --tokens 1 --max-new 9223372036854775808
refused "not an integer in 0..65535" glm-engine serve - --pack "$T/hf" --port 70000
refused "not an integer in 0..4096" glm-engine serve - --pack "$T/hf" --max-queue -1
refused "not a finite number in" glmc compile "$T/hf" --memory-per-spark nan -o "$T/p.glmplan"
refused "not a finite number in" glm-engine run - --pack "$T/hf" --tokens 1 --temperature inf
refused "is not an integer token id" glm-engine run - --pack "$T/hf" --tokens 1,99999999999999999999
echo "4. out-of-range numbers refused"

# 5. Unbounded reads.
refused "/dev/zero: a plan must be a regular file, not a device" \
  glm-engine run /dev/zero --pack "$T/hf" --tokens 1
refused "/dev/zero: the manifest must be a regular file, not a device" \
  glmc compile "$T/x8" --manifest /dev/zero -o "$T/p.glmplan"
truncate -s 30G "$T/sparse.glmplan"
refused "a plan is 32212254720 bytes (30 GiB), more than the 2 GiB" \
  glm-engine run "$T/sparse.glmplan" --pack "$T/hf" --tokens 1
rm -f "$T/sparse.glmplan"
rm -rf "$T/fifo"; cp -r "$T/hf" "$T/fifo"
f=$(ls "$T/fifo"/model-*.safetensors | head -1); rm "$f"; mkfifo "$f"
refused "${f#$T/}: not a regular file" timeout 60 glmc verify "$T/fifo"
refused "${f#$T/}: not a regular file" timeout 60 glm-engine run - --pack "$T/fifo" --tokens 1
if grep -q -- "--sparks" "$T/compile-help.txt"; then
  refused "${f#$T/}: not a regular file" timeout 60 glmc compile "$T/fifo" -o "$T/p.glmplan"
  # A FIFO named like a kernel cache entry is a miss, not a wait.
  export GLMC_KERNEL_CACHE="$T/kernel-cache"
  if glmc compile "$T/hf" -o "$T/p.glmplan" > /dev/null 2>&1 &&
     e=$(ls "$T/kernel-cache"/*.ptx 2> /dev/null | head -1) && [ -n "$e" ]; then
    rm "$e"; mkfifo "$e"
    timeout 120 glmc compile "$T/hf" -o "$T/p.glmplan" > /dev/null 2>&1 \
      || fail "compile with a FIFO in the kernel cache ($?)"
  fi # else: no NVRTC here, no cache
  unset GLMC_KERNEL_CACHE
fi
echo "5. devices, pipes and oversized files refused, not read"

# 6. config.json by key.
badcfg() { # WANT JSON-EDIT
  rm -rf "$T/cfg"; cp -r "$T/hf" "$T/cfg"
  python3 - "$T/cfg/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); k, v = sys.argv[2].split("=", 1)
*outer, k = k.split(".")  # rope_parameters.rope_theta
d = c
for o in outer:
    d = d[o]
d[k] = json.loads(v); json.dump(c, open(sys.argv[1], "w"))
PY
  refused "$1" glm-engine run - --pack "$T/cfg" --tokens 1 --max-new 1
}
badcfg 'config.json: key "eos_token_id" is "x"; allowed: a token id' 'eos_token_id="x"'
badcfg 'config.json: key "num_experts_per_tok" is 0; allowed: an integer in 1..' 'num_experts_per_tok=0'
badcfg 'config.json: key "num_experts_per_tok" is -1; allowed' 'num_experts_per_tok=-1'
badcfg 'config.json: key "rope_theta" is -1; allowed: a finite number in (1, ' 'rope_parameters.rope_theta=-1'
badcfg 'config.json: key "scoring_func" is \["sigmoid"\]; allowed: "sigmoid"' 'scoring_func=["sigmoid"]'
badcfg 'config.json: key "n_group" is "x"; allowed: an integer' 'n_group="x"'
if grep -q -- "--sparks" "$T/compile-help.txt"; then
  # Compile and the plan executor used to run sigmoid routing regardless.
  badcfg 'config.json: key "scoring_func" is "softmax"; allowed: "sigmoid"' 'scoring_func="softmax"'
  refused 'config.json: key "scoring_func" is "softmax"; allowed: "sigmoid"' \
    glmc compile "$T/cfg" -o "$T/p.glmplan"
  badcfg 'config.json: key "rope_interleave" is false; allowed: true' 'rope_interleave=false'
  refused 'config.json: key "rope_interleave" is false; allowed: true' \
    glmc compile "$T/cfg" -o "$T/p.glmplan"
fi
echo "6. config values of the wrong type or range refused by key"

# 9. No DIR.tmp; the server takes the CLI's prompt ids.
mkdir -p "$T/dumpdir"
refused "dumpdir: exists and is not a regular file" \
  glm-engine run - --pack "$T/hf" --tokens 1 --max-new 1 --dump-logits "$T/dumpdir"
refused "dumpdir: exists and is not a regular file" \
  glmc dequant "$T/hf" --tensor model.norm.weight -o "$T/dumpdir"
[ ! -e "$T/dumpdir.tmp" ] || fail "left $T/dumpdir.tmp"
vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$T/hf/config.json")
top=$((vocab - 1))
glm-engine run - --pack "$T/hf" --tokens $top --max-new 1 > /dev/null
glm-engine serve - --pack "$T/hf" --port 0 > "$T/serve.log" 2>&1 &
SP=$!
trap 'kill $SP 2> /dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q "listening on" "$T/serve.log" && break
  kill -0 $SP 2> /dev/null || { cat "$T/serve.log"; fail "serve exited"; }
  sleep 0.2
done
URL=$(grep -o "http://[0-9.]*:[0-9]*" "$T/serve.log" | head -1)
[ -n "$URL" ] || { cat "$T/serve.log"; fail "serve did not listen"; }
python3 - "$URL" "$top" "$vocab" <<'PY'
import json, sys, urllib.request, urllib.error
url, top, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def call(ids):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(
        {"prompt": ids, "max_tokens": 1, "temperature": 0}).encode(),
        headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
assert call([top]) == 200, "the server refused an id the CLI accepts"
assert call([vocab]) == 400, "the server accepted an id outside the vocabulary"
PY
kill $SP; wait $SP || true
echo "9. no DIR.tmp left; server and CLI accept the same prompt ids (0..$top)"
echo "hostile_inputs: OK"
