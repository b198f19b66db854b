#!/usr/bin/env bash
# glm-engine run --draft mtp (issue 21): greedy output with MTP drafting is
# token for token the output without it, and its logits rows the same
# bytes, on tiny packs with an MTP layer in every layout (hf; EXL3 MUL1 and
# MCG; exlr8 with its mixed manifest) at --sparks 1 and 2, with 1 and 3
# draft tokens; the acceptance statistics are printed. Also: a plan without
# a draft graph, the reference backend and a Flash plan (recurrent state)
# refuse --draft with what to do, and serve ranks started by hand with
# different --draft settings stop at the first request.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/coordinator.sh"
T=${GLM_TEST_TMP:-/tmp/glm-e2e-draft-mtp}
rm -rf "$T" && mkdir -p "$T"

glmc synth --preset tiny --layout hf --seed 3 -o "$T/hf" > /dev/null
glmc quantize "$T/hf" --layout exl3 --codebook mul1 --bits 3 -o "$T/exl3-mul1" > /dev/null 2>&1
glmc quantize "$T/hf" --layout exl3 --codebook mcg -o "$T/exl3-mcg" > /dev/null 2>&1
glmc quantize "$T/hf" --layout exlr8 -o "$T/exlr8" > /dev/null 2>&1

TOKENS=1,5,9,2,7,3,11,4,6,8,10,12,14,16,18,20,22,24,26,28,30
check() { # NAME PACK SPARKS [compile args...]
  local name=$1 pack=$2 n=$3
  shift 3
  glmc compile "$pack" --sparks "$n" --draft mtp --no-nvrtc "$@" \
    -o "$T/$name.glmplan" > /dev/null
  glm-engine run "$T/$name.glmplan" --pack "$pack" --tokens "$TOKENS" \
    --max-new 24 --dump-logits "$T/$name-plain.safetensors" \
    > "$T/$name-plain.out" 2> /dev/null
  for k in 1 3; do
    glm-engine run "$T/$name.glmplan" --pack "$pack" --tokens "$TOKENS" \
      --max-new 24 --draft mtp --draft-tokens $k \
      --dump-logits "$T/$name-k$k.safetensors" > "$T/$name-k$k.out" 2> /dev/null
    diff <(grep '^generated tokens' "$T/$name-plain.out") \
      <(grep '^generated tokens' "$T/$name-k$k.out")
    cmp "$T/$name-plain.safetensors" "$T/$name-k$k.safetensors"
    grep -q '^drafting: [0-9]* of [0-9]* drafted tokens accepted' "$T/$name-k$k.out"
    echo "$name, $n Spark(s), --draft-tokens $k: same tokens and logits as plain decoding; $(grep '^drafting' "$T/$name-k$k.out")"
  done
}
check hf "$T/hf" 1
check hf2 "$T/hf" 2
check exl3-mul1 "$T/exl3-mul1" 1
check exl3-mcg2 "$T/exl3-mcg" 2
check exlr8 "$T/exlr8" 1 --manifest mixed
check exlr82 "$T/exlr8" 2 --manifest mixed

# Refusals, each saying what to do.
glmc compile "$T/hf" --sparks 1 --no-nvrtc -o "$T/nodraft.glmplan" > /dev/null
if glm-engine run "$T/nodraft.glmplan" --pack "$T/hf" --tokens 1,2 --max-new 4 \
    --draft mtp > /dev/null 2> "$T/nodraft.err"; then
  echo "a plan without a draft graph drafted"; exit 1
fi
grep -q -- "--draft mtp: the plan has no MTP draft graph; re-plan with: .*--draft mtp" "$T/nodraft.err"
if glm-engine run - --pack "$T/hf" --tokens 1,2 --max-new 4 --draft mtp \
    > /dev/null 2> "$T/ref.err"; then
  echo "the reference forward drafted"; exit 1
fi
grep -q "the reference forward does not draft" "$T/ref.err"
if glm-engine run "$T/hf.glmplan" --pack "$T/hf" --tokens 1,2 --max-new 4 \
    --draft mtp --draft-tokens 9 > /dev/null 2> "$T/k9.err"; then
  echo "--draft-tokens 9 was accepted"; exit 1
fi
grep -q -- "--draft-tokens" "$T/k9.err"
glmc synth --preset flash-tiny --layout hf --seed 3 -o "$T/flash" > /dev/null
glmc compile "$T/flash" --sparks 1 --draft mtp --no-nvrtc -o "$T/flash.glmplan" > /dev/null
if glm-engine run "$T/flash.glmplan" --pack "$T/flash" --tokens 1,2 --max-new 4 \
    --draft mtp > /dev/null 2> "$T/flash.err"; then
  echo "a Flash plan drafted over its recurrent state"; exit 1
fi
grep -q "recurrent state" "$T/flash.err"
echo "refusals: no draft graph, reference backend, --draft-tokens 9, Flash's recurrent state"

# serve --draft mtp: a greedy chat completion is the plain server's text, a
# streamed forced tool call (tool_choice required) the same calls, and
# /metrics counts the verify steps and drafted tokens.
serve_text() { # NAME ARGS...
  local name=$1
  shift
  glm-engine serve "$T/hf.glmplan" --pack "$T/hf" --port 0 "$@" > "$T/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 150); do
    grep -q "listening on" "$T/$name.log" && break
    kill -0 $pid 2> /dev/null || { cat "$T/$name.log"; exit 1; }
    sleep 0.2
  done
  local url
  url=$(grep -o "http://[0-9.]*:[0-9]*" "$T/$name.log" | head -1)
  python3 - "$url" "$T/$name" <<'PY'
import json, sys, urllib.request
url, out = sys.argv[1], sys.argv[2]
req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(
    {"max_tokens": 12, "temperature": 0,
     "messages": [{"role": "user", "content": "hello there"}]}).encode(),
    headers={"content-type": "application/json"})
with urllib.request.urlopen(req, timeout=120) as r:
    open(out + ".text", "w").write(json.loads(r.read())["choices"][0]["message"]["content"])
# A streamed, forced tool call (the grammar on a random model): the
# deltas the stream sends, joined, and the finish reason.
tools = [{"type": "function", "function": {"name": "get_weather",
          "parameters": {"type": "object", "properties": {
              "city": {"type": "string"}, "days": {"type": "integer"}},
              "required": ["city"]}}}]
req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(
    {"max_tokens": 48, "temperature": 0, "stream": True, "tools": tools,
     "tool_choice": "required",
     "messages": [{"role": "user", "content": "weather?"}]}).encode(),
    headers={"content-type": "application/json"})
calls, finish = {}, None
with urllib.request.urlopen(req, timeout=120) as r:
    for line in r.read().decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for c in json.loads(line[6:]).get("choices", []):
            finish = c.get("finish_reason") or finish
            for t in c.get("delta", {}).get("tool_calls", []) or []:
                d = calls.setdefault(t["index"], {"name": "", "arguments": ""})
                f = t.get("function", {})
                d["name"] += f.get("name") or ""
                d["arguments"] += f.get("arguments") or ""
assert finish == "tool_calls" and calls, (finish, calls)
json.loads(calls[0]["arguments"])
open(out + ".tools", "w").write(json.dumps(calls, sort_keys=True))
with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
    open(out + ".metrics", "w").write(r.read().decode())
PY
  kill $pid
  wait $pid 2> /dev/null || true
}
serve_text serve-plain
serve_text serve-draft --draft mtp --draft-tokens 3
cmp "$T/serve-plain.text" "$T/serve-draft.text"
cmp "$T/serve-plain.tools" "$T/serve-draft.tools"
grep -q '^glm_draft_verify_steps_total [1-9]' "$T/serve-draft.metrics"
grep -q '^glm_draft_tokens_total [1-9]' "$T/serve-draft.metrics"
grep -q '^glm_draft_accepted_tokens_total [0-9]' "$T/serve-draft.metrics"
if grep -q glm_draft "$T/serve-plain.metrics"; then echo "plain serve counts drafts"; exit 1; fi
echo "serve --draft mtp: the plain server's greedy text and streamed tool call $(cat "$T/serve-draft.tools"); /metrics: $(grep '^glm_draft' "$T/serve-draft.metrics" | tr '\n' ' ')"

# Serve ranks started by hand must draft alike: rank 1 without --draft
# exits at the first request naming both settings, and rank 0 answers 503.
glm-engine serve "$T/hf2.glmplan" --pack "$T/hf" --port 0 --rank 0 --world 2 \
  --coordinator 127.0.0.1:0 --join-timeout 120 --draft mtp --draft-tokens 3 \
  > "$T/sr0.log" 2>&1 &
r0=$!
coord=$(coordinator_of "$T/sr0.log" $r0)
glm-engine serve "$T/hf2.glmplan" --pack "$T/hf" --rank 1 --world 2 \
  --coordinator "$coord" --join-timeout 120 > "$T/sr1.log" 2>&1 &
r1=$!
for _ in $(seq 1 300); do
  grep -q "listening on http" "$T/sr0.log" && break
  kill -0 $r0 2> /dev/null || { cat "$T/sr0.log" "$T/sr1.log"; exit 1; }
  sleep 0.2
done
url=$(grep -o "http://[0-9.]*:[0-9]*" "$T/sr0.log" | head -1)
code=$(python3 - "$url" <<'PY'
import json, sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", data=json.dumps(
    {"max_tokens": 4, "temperature": 0,
     "messages": [{"role": "user", "content": "hello"}]}).encode(),
    headers={"content-type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=120)
    print(200)
except urllib.error.HTTPError as e:
    print(e.code)
PY
)
wait $r1 && { echo "rank 1 kept serving with another --draft"; exit 1; }
kill $r0 2> /dev/null || true
wait $r0 2> /dev/null || true
[ "$code" = 503 ] || { echo "rank 0 answered $code"; cat "$T/sr0.log" "$T/sr1.log"; exit 1; }
grep -q "rank 1 serves with --draft none but rank 0 with --draft mtp --draft-tokens 3" "$T/sr1.log" \
  || { cat "$T/sr1.log"; exit 1; }
echo "serve ranks by hand with different --draft: rank 1 exits naming both, rank 0 answers 503"
