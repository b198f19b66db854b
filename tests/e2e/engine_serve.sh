#!/usr/bin/env bash
# glm-engine serve on the cpu backend: the tiny pack answers /v1/models, a
# greedy chat completion and a seeded completion (twice the same), /health.
set -euo pipefail
T=${GLM_TEST_TMP:-/tmp/glm-e2e-engine-serve}
rm -rf "$T" && mkdir -p "$T"
glmc synth --preset tiny --layout hf --seed 3 -o "$T/tiny" > /dev/null
glm-engine serve - --pack "$T/tiny" --sparks 2 --port 0 > "$T/serve.log" 2>&1 &
PID=$!
trap 'kill $PID 2> /dev/null || true' EXIT
for _ in $(seq 1 100); do
  grep -q "listening on" "$T/serve.log" && break
  kill -0 $PID 2> /dev/null || { cat "$T/serve.log"; exit 1; }
  sleep 0.2
done
URL=$(grep -o "http://[0-9.]*:[0-9]*" "$T/serve.log" | head -1)
python3 - "$URL" <<'PY'
import json, sys, urllib.request
url = sys.argv[1]
def call(path, body=None):
    req = urllib.request.Request(url + path, data=None if body is None else
                                 json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, r.read().decode()
st, body = call("/v1/models")
assert st == 200 and json.loads(body)["data"][0]["id"] == "tiny", body
st, body = call("/v1/chat/completions", {"model": "tiny", "max_tokens": 4,
    "temperature": 0, "messages": [{"role": "user", "content": "hi"}]})
r = json.loads(body)
assert st == 200 and r["usage"]["completion_tokens"] >= 1, body
req = {"prompt": "hello", "max_tokens": 5, "seed": 11, "temperature": 0.9}
a, b = call("/v1/completions", req)[1], call("/v1/completions", req)[1]
ta, tb = json.loads(a)["choices"][0]["text"], json.loads(b)["choices"][0]["text"]
assert ta == tb, (ta, tb)
st, _ = call("/health")
assert st == 200
print("engine_serve: OK", repr(ta))
PY
