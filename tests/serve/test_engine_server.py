"""`glm-engine serve` on the tiny pack with the cpu backend, through the
official `openai` client: streamed and plain chat, a tool-call round trip
rendered through the pack's template, 20 concurrent requests, bad requests
answered with 4xx while the server stays up, /metrics counting them; the
deployment flags (API key from GLMC_API_KEY, model aliases, --chat-template,
--max-model-len, generation_config.json defaults), the real sampler
behind the request fields (seeds, top_k 1 = greedy, raw logprobs) and
grammar-constrained decoding (json_object, json_schema, forced tool calls).
Skipped while glm-engine has no `serve` subcommand or glmc cannot compile."""
import concurrent.futures
import json
import math
import os
import re
import subprocess

import openai
import pytest

from conftest import find_binary
from server_fixture import ServerProcess


KEY = "secret-2"


def serve_cmd(engine, plan, pack, log, port_file, flags, env=""):
    # The server takes a free port itself (--port 0; a port picked here and
    # released could be taken by another test's socket before the server
    # binds it) and prints it; a small wrapper reads it from the server's
    # log (the command's own output, `log`), writes the port file once
    # /health answers (by rename, so no reader sees it half written), and
    # exits with the server's status.
    return ["bash", "-c",
            f'{env} "{engine}" serve "{plan}" --pack "{pack}" '
            f'--backend cpu --host 127.0.0.1 --port 0 {flags} & '
            f'pid=$!; trap "kill -TERM $pid; wait $pid; exit \\$?" TERM; '
            f'for i in $(seq 1200); do '
            f"port=$(sed -n 's|^glm serve: listening on http://127.0.0.1:"
            f"\\([0-9][0-9]*\\) .*|\\1|p' \"{log}\" | head -n 1); "
            f'if [ -n "$port" ] && python3 -c "import urllib.request as u; '
            f"u.urlopen('http://127.0.0.1:$port/health', "
            f'timeout=2)" 2>/dev/null; then '
            f'echo $port > "{port_file}.tmp" && '
            f'mv "{port_file}.tmp" "{port_file}"; break; fi; '
            f'kill -0 $pid || exit 1; sleep 0.1; done; wait $pid']


@pytest.fixture(scope="module")
def tiny(scratch):
    engine, glmc = find_binary("glm-engine"), find_binary("glmc")
    if not engine or not glmc:
        pytest.skip("glm-engine or glmc is not built")
    h = subprocess.run([engine, "serve", "--help"], capture_output=True,
                       timeout=60)
    if h.returncode != 0:
        pytest.skip("glm-engine has no serve subcommand yet")
    d = os.path.join(scratch, "engine")
    os.makedirs(d, exist_ok=True)
    pack, plan = os.path.join(d, "tiny"), os.path.join(d, "tiny.plan")
    r = subprocess.run([glmc, "synth", "--preset", "tiny", "--layout", "hf",
                        "-o", pack], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    r = subprocess.run([glmc, "compile", pack, "--sparks", "1", "-o", plan],
                       capture_output=True, timeout=300)
    if r.returncode != 0:
        pytest.skip("glmc compile is unavailable: " +
                    r.stderr.decode(errors="replace")[-300:])
    return engine, d, pack, plan


@pytest.fixture(scope="module")
def engine_server(tiny):
    engine, d, pack, plan = tiny
    log = os.path.join(d, "server.log")
    port_file = os.path.join(d, "port")
    s = ServerProcess(serve_cmd(engine, plan, pack, log, port_file,
                                "--served-model-name tiny tiny-alias",
                                env=f"GLMC_API_KEY=secret-1,{KEY}"),
                      port_file, log)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(engine_server):
    return openai.OpenAI(base_url=engine_server.base + "/v1", api_key=KEY,
                         timeout=300, max_retries=0)


def test_plain_and_streamed(client):
    r = client.chat.completions.create(
        model="tiny", max_tokens=8, temperature=0,
        messages=[{"role": "user", "content": "Hello"}])
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 8
    chunks = list(client.chat.completions.create(
        model="tiny", max_tokens=8, stream=True, temperature=0.7, seed=3,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Hello"}]))
    assert chunks[-1].usage and chunks[-1].usage.completion_tokens <= 8


def test_tool_call_round_trip_renders(client):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}}}}}]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather",
                         "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    r = client.chat.completions.create(model="tiny", max_tokens=6,
                                       messages=messages, tools=tools)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_concurrent_requests(client):
    def one(i):
        return client.chat.completions.create(
            model="tiny", max_tokens=4,
            messages=[{"role": "user", "content": f"request {i}"}])

    with concurrent.futures.ThreadPoolExecutor(20) as ex:
        results = list(ex.map(one, range(20), timeout=600))
    assert len(results) == 20
    assert all(r.usage.completion_tokens > 0 for r in results)


def test_bad_requests_and_metrics(engine_server, client):
    for kwargs in [{"temperature": 9}, {"top_p": -1},
                   {"messages": [{"role": "user", "content": "x " * 10 ** 5}]}]:
        args = {"model": "tiny", "max_tokens": 2,
                "messages": [{"role": "user", "content": "x"}]}
        args.update(kwargs)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(**args)
    _, text = engine_server.get("/metrics")
    bad = sum(float(v) for v in re.findall(
        r'status="4\d\d"\} ([0-9.]+)$', text, re.M))
    assert bad >= 3
    assert engine_server.alive()
    assert engine_server.get("/health")[0] == 200


def test_key_from_env_aliases_and_generation_config(engine_server, client):
    bad = openai.OpenAI(base_url=engine_server.base + "/v1", api_key="none",
                        timeout=60, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert engine_server.get("/health")[0] == 200
    assert [m.id for m in client.models.list().data] == ["tiny",
                                                         "tiny-alias"]
    r = client.chat.completions.create(
        model="tiny-alias", max_tokens=3,
        messages=[{"role": "user", "content": "Hello"}])
    assert r.model == "tiny-alias"
    log = open(engine_server.log.name, errors="replace").read()
    # The synthetic pack's generation_config.json: temperature 1, top_p 0.95.
    assert re.search(r"sampling defaults from \S*generation_config\.json "
                     r"\(temperature 1, top_p 0\.95", log), log[-2000:]
    assert re.search(r"glm serve: chatcmpl-\w+ POST /v1/chat/completions "
                     r"status=200 prompt_tokens=\d+ completion_tokens=\d+ "
                     r"ttft_ms=[0-9.]+ tok_s=[0-9.-]+ finish=\w+", log)


def completion(client, **kw):
    # (A prompt the tiny model does not end at once with greedy decoding.)
    args = dict(model="tiny", prompt="hello world, how are you",
                max_tokens=12, logprobs=5)
    args.update(kw)
    return client.completions.create(**args).choices[0]


def test_same_seed_same_tokens_with_every_sampling_field(client):
    kw = dict(temperature=0.9, seed=1234, top_p=0.9, presence_penalty=0.3,
              frequency_penalty=0.2,
              extra_body={"top_k": 20, "min_p": 0.02,
                          "repetition_penalty": 1.2})
    a, b = completion(client, **kw), completion(client, **kw)
    assert a.logprobs.tokens == b.logprobs.tokens and a.text == b.text
    # Another seed draws another sequence (12 draws from a wide
    # distribution; equal only by a very unlikely accident).
    others = [completion(client, **dict(kw, seed=s)).logprobs.tokens
              for s in (1, 2, 3)]
    assert any(o != a.logprobs.tokens for o in others)


def test_top_k_1_is_greedy_and_logprobs_are_raw(client):
    greedy = completion(client, temperature=0)
    hot = completion(client, temperature=1.7, seed=5,
                     extra_body={"top_k": 1})
    assert hot.logprobs.tokens == greedy.logprobs.tokens
    lp = greedy.logprobs
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        # Greedy picks the most likely token; the logprobs are of the
        # model's distribution (log-softmax), so they sum to <= 1.
        assert l == pytest.approx(max(top.values()), abs=1e-5)
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-4
        assert len(top) == 5 or len(set(top)) < 5  # token strings may repeat
    # Raw: the same prompt gives the same first-position logprobs whatever
    # the temperature and penalties (they change the sampling only).
    other = completion(client, temperature=1.7, seed=8,
                       frequency_penalty=2.0, max_tokens=1)
    assert other.logprobs.top_logprobs[0] == pytest.approx(
        lp.top_logprobs[0], abs=1e-5)


def test_chat_logprobs_and_penalties(client):
    r = client.chat.completions.create(
        model="tiny", max_tokens=10, temperature=0, logprobs=True,
        top_logprobs=2, messages=[{"role": "user", "content": "Hello"}])
    entries = r.choices[0].logprobs.content
    assert 0 < len(entries) <= r.usage.completion_tokens
    for e in entries:
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob,
                                          abs=1e-5)
    plain = completion(client, temperature=0, max_tokens=16).logprobs.tokens
    penalised = completion(client, temperature=0, max_tokens=16,
                           frequency_penalty=2.0).logprobs.tokens
    if len(set(plain)) < len(plain):  # greedy repeated a token
        assert penalised != plain


# grammar-constrained decoding: a random-weight model still answers with one
# valid JSON value / tool call within max_tokens -----------------------------

PERSON = {"type": "object", "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", 3]},
             "minItems": 1, "maxItems": 3},
    "pet": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
        "kind": {"const": "cat"}}, "required": ["kind"],
        "additionalProperties": False}]},
    "ok": {"type": "boolean"}},
    "required": ["name", "age", "tags"], "additionalProperties": False}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time",
                                      "parameters": {"type": "object"}}}]


def valid(v, s):
    """The subset's JSON-schema validator (what the server promises)."""
    if "anyOf" in s:
        return any(valid(v, a) for a in s["anyOf"])
    if "const" in s and v != s["const"]:
        return False
    if "enum" in s and v not in s["enum"]:
        return False
    kinds = {"object": dict, "array": list, "string": str, "null": type(None),
             "boolean": bool}
    if "type" in s:
        t = s["type"]
        if t == "integer":
            if not isinstance(v, int) or isinstance(v, bool):
                return False
        elif t == "number":
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                return False
        elif not isinstance(v, kinds[t]):
            return False
    if isinstance(v, dict):
        props = s.get("properties", {})
        if any(k not in v for k in s.get("required", [])):
            return False
        for k, x in v.items():
            if k in props:
                if not valid(x, props[k]):
                    return False
            elif s.get("additionalProperties", True) is False:
                return False
    if isinstance(v, list):
        if not s.get("minItems", 0) <= len(v) <= s.get("maxItems", 1 << 30):
            return False
        if "items" in s and not all(valid(x, s["items"]) for x in v):
            return False
    return True


def chat(client, stream=False, **kw):
    """A chat reply as (content, tool_calls, finish_reason), streamed or not
    (stream: the deltas joined)."""
    msgs = [{"role": "user", "content": "Describe a person as JSON."}]
    if not stream:
        r = client.chat.completions.create(model="tiny", messages=msgs, **kw)
        m = r.choices[0].message
        return m.content, m.tool_calls or [], r.choices[0].finish_reason
    content, calls, finish = "", [], None
    for ch in client.chat.completions.create(model="tiny", messages=msgs,
                                             stream=True, **kw):
        d = ch.choices[0].delta
        content += d.content or ""
        calls += d.tool_calls or []
        finish = ch.choices[0].finish_reason or finish
    return content, calls, finish


@pytest.mark.parametrize("stream", [False, True])
def test_json_object_output_parses(client, stream):
    for seed in range(4):
        text, _, finish = chat(client, stream, seed=seed, temperature=1.0,
                               max_tokens=48,
                               response_format={"type": "json_object"})
        assert finish == "stop", text
        assert isinstance(json.loads(text), dict), text
    text, _, _ = chat(client, stream, temperature=0, max_tokens=48,
                      response_format={"type": "json_object"})
    assert isinstance(json.loads(text), dict), text


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_output_validates(client, stream):
    fmt = {"type": "json_schema",
           "json_schema": {"name": "person", "schema": PERSON,
                           "strict": True}}
    for seed in range(4):
        text, _, finish = chat(client, stream, seed=seed, temperature=1.0,
                               max_tokens=96, response_format=fmt)
        assert finish == "stop", text
        assert valid(json.loads(text), PERSON), text


def test_too_small_a_budget_ends_with_length(client):
    # The shortest valid reply is {"name":"","age":0,"tags":["a"]} (34 bytes).
    fmt = {"type": "json_schema",
           "json_schema": {"name": "person", "schema": PERSON}}
    text, _, finish = chat(client, max_tokens=5, temperature=0,
                           response_format=fmt)
    assert finish == "length"
    assert text.startswith("{"), text


def test_ignore_eos_generates_max_tokens(client):
    # vLLM's ignore_eos, which benchmark clients send: a prompt whose greedy
    # reply meets an eos id goes on to max_tokens, its first tokens the same.
    # The prompt is the first of a fixed list whose reply stops early.
    for prompt in [[i, 5, 9] for i in range(1, 40)]:
        stopped = client.completions.create(model="tiny", prompt=prompt,
                                            max_tokens=64, temperature=0,
                                            logprobs=0)
        if stopped.choices[0].finish_reason == "stop":
            break
    else:
        pytest.fail("no prompt of the list meets an eos id within 64 tokens")
    n = stopped.usage.completion_tokens
    assert n < 64
    full = client.completions.create(model="tiny", prompt=prompt,
                                     max_tokens=64, temperature=0, logprobs=0,
                                     extra_body={"ignore_eos": True})
    assert full.choices[0].finish_reason == "length"
    assert full.usage.completion_tokens == 64
    # The eos id is now a generated token: one logprob more than the text
    # before it, whose tokens are the stopped reply's.
    got = full.choices[0].logprobs.tokens
    want = stopped.choices[0].logprobs.tokens
    assert len(got) == 64 and got[:len(want)] == want
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt=prompt, max_tokens=4,
                                  extra_body={"ignore_eos": "yes"})
    assert "ignore_eos" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, max_tokens=8, response_format={"type": "json_object"},
             extra_body={"ignore_eos": True})
    assert "ignore_eos" in str(e.value)


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_calls(client, stream):
    for choice, names in [("required", {"get_weather", "get_time"}),
                          ({"type": "function",
                            "function": {"name": "get_weather"}},
                           {"get_weather"})]:
        for seed in range(3):
            text, calls, finish = chat(client, stream, seed=seed,
                                       temperature=1.0, max_tokens=64,
                                       tools=TOOLS, tool_choice=choice)
            assert finish == "tool_calls", (text, calls)
            assert calls and not text
            for c in calls:
                assert c.function.name in names
                args = json.loads(c.function.arguments)
                if c.function.name == "get_weather":
                    assert "city" in args and isinstance(args["city"], str)
                    assert set(args) <= {"city", "days", "unit"}
                    assert isinstance(args.get("days", 0), int)
                    assert args.get("unit", "c") in ("c", "f")
                else:
                    assert args == {}


def test_grammar_requests_refused_by_name(client):
    def refused(**kw):
        with pytest.raises(openai.BadRequestError) as e:
            chat(client, max_tokens=8, **kw)
        return e.value
    e = refused(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {
            "when": {"type": "string", "format": "date-time"}}}}})
    assert "format" in e.message and "properties.when" in e.message
    assert e.body["param"] == "response_format"
    e = refused(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"$ref": "#/$defs/a"}}})
    assert "$ref" in e.message
    e = refused(tools=TOOLS, tool_choice={"type": "function",
                                          "function": {"name": "nope"}})
    assert "nope" in e.message and e.body["param"] == "tool_choice"
    e = refused(tool_choice="required")
    assert e.body["param"] == "tool_choice"


def test_chat_template_and_max_model_len_flags(tiny, scratch):
    engine, d, pack, plan = tiny
    # A template that ignores the messages: every chat has the same prompt,
    # the text it renders.
    tpl = os.path.join(d, "fixed.jinja")
    open(tpl, "w").write("{{ 'The quick brown fox' }}")
    log = os.path.join(d, "server2.log")
    port_file = os.path.join(d, "port2")
    s = ServerProcess(serve_cmd(engine, plan, pack, log, port_file,
                                f'--chat-template "{tpl}" '
                                f'--max-model-len 48'),
                      port_file, log)
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none",
                          timeout=300, max_retries=0)
        outs = [c.chat.completions.create(
            model="tiny", max_tokens=4, temperature=0,
            messages=[{"role": "user", "content": m}])
            for m in ("Hello", "something else entirely")]
        ref = c.completions.create(model="tiny", max_tokens=4,
                                   temperature=0,
                                   prompt="The quick brown fox")
        for o in outs:
            assert o.usage.prompt_tokens == ref.usage.prompt_tokens
        assert outs[0].usage.completion_tokens == \
            outs[1].usage.completion_tokens
        assert [m.max_model_len for m in c.models.list().data] == [48]
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model="tiny", prompt="word " * 60,
                                 max_tokens=2)
        assert "48" in e.value.message
    finally:
        s.stop()
    # A template that is missing or does not parse: exit 1 naming it.
    bad = os.path.join(d, "broken.jinja")
    open(bad, "w").write("{% for x in %}")
    for path in (os.path.join(d, "missing.jinja"), bad):
        r = subprocess.run([engine, "serve", plan, "--pack", pack,
                            "--backend", "cpu", "--port", "0",
                            "--chat-template", path],
                           capture_output=True, timeout=300)
        assert r.returncode == 1
        assert path in r.stderr.decode(errors="replace")


def launch_serve_cmd(engine, plan, pack, log, port_file):
    """`glm-engine launch --sparks 2 serve`: one process per rank, rank 0
    answering HTTP (serve_cmd's wrapper around another command line)."""
    cmd = serve_cmd(engine, plan, pack, log, port_file, "")
    cmd[2] = cmd[2].replace(f'"{engine}" serve',
                            f'"{engine}" launch --sparks 2 serve', 1)
    return cmd


def rank_pid(plan, rank):
    out = subprocess.run(["pgrep", "-f", f"serve {plan}.* --rank {rank} "],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def test_two_rank_processes_serve_like_one(tiny, scratch, client):
    """A 2-rank plan served by two processes: the same greedy answers as the
    1-rank server, streams (also one the client drops) keep the ranks in
    step, a killed rank turns the next request into a 503 naming it and
    stops the server; SIGTERM stops both ranks cleanly (exit 0)."""
    engine, d, pack, _ = tiny
    glmc = find_binary("glmc")
    plan2 = os.path.join(d, "tiny-tp2.plan")
    r = subprocess.run([glmc, "compile", pack, "--sparks", "2", "-o", plan2],
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    msgs = [{"role": "user", "content": "Hello there"}]

    def start(name):
        log = os.path.join(d, f"{name}.log")
        port_file = os.path.join(d, f"port-{name}")
        return ServerProcess(launch_serve_cmd(engine, plan2, pack, log,
                                              port_file),
                             port_file, log)

    s = start("tp2")
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none",
                          timeout=300, max_retries=0)
        one = client.chat.completions.create(model="tiny", max_tokens=8,
                                             temperature=0, messages=msgs)
        two = c.chat.completions.create(model="tiny", max_tokens=8,
                                        temperature=0, messages=msgs)
        assert two.choices[0].message.content == \
            one.choices[0].message.content
        assert two.usage.completion_tokens == one.usage.completion_tokens
        # Constrained decoding: every rank builds the same mask, so the
        # 2-rank server writes the 1-rank server's tokens.
        for kw in [dict(temperature=0), dict(temperature=1.0, seed=7)]:
            fmt = {"type": "json_schema",
                   "json_schema": {"name": "p", "schema": PERSON}}
            a = client.chat.completions.create(
                model="tiny", max_tokens=64, messages=msgs,
                response_format=fmt, **kw)
            b = c.chat.completions.create(
                model="tiny", max_tokens=64, messages=msgs,
                response_format=fmt, **kw)
            assert b.choices[0].message.content == \
                a.choices[0].message.content
            assert valid(json.loads(b.choices[0].message.content), PERSON)
        # A stream the client drops after two chunks, then a whole one.
        dropped = c.chat.completions.create(model="tiny", max_tokens=40,
                                            stream=True, temperature=0,
                                            messages=msgs)
        for i, _ in enumerate(dropped):
            if i == 1:
                break
        dropped.close()
        chunks = list(c.chat.completions.create(
            model="tiny", max_tokens=8, stream=True, temperature=0.7, seed=5,
            stream_options={"include_usage": True}, messages=msgs))
        assert chunks[-1].usage.completion_tokens <= 8
        again = c.chat.completions.create(model="tiny", max_tokens=8,
                                          temperature=0, messages=msgs)
        assert again.choices[0].message.content == \
            one.choices[0].message.content
        # Kill rank 1: the next request is a 503 naming it, then the server
        # (launch) exits.
        victim = rank_pid(plan2, 1)
        assert victim, "rank 1 not found"
        os.kill(victim, 9)
        with pytest.raises(openai.APIStatusError) as e:
            c.chat.completions.create(model="tiny", max_tokens=8,
                                      temperature=0, messages=msgs)
        assert e.value.status_code == 503
        assert "rank 1" in e.value.message
        s.proc.wait(timeout=60)
        assert s.proc.returncode != 0
    finally:
        s.stop()
    # SIGTERM: rank 0 stops serving and ends rank 1; launch exits 0.
    s = start("tp2-stop")
    s.stop()
    assert s.proc.returncode == 0, open(os.path.join(d, "tp2-stop.log")).read()


def test_reasoning_parser_none_keeps_thinking_in_content(tiny, client):
    """The tiny pack's template opens <think>: by default the generated
    text is reasoning_content; with --reasoning-parser none the same
    tokens come back as content."""
    engine, d, pack, plan = tiny
    msgs = [{"role": "user", "content": "Hello"}]
    ref = client.chat.completions.create(model="tiny", max_tokens=6,
                                         temperature=0, messages=msgs)
    ref_reasoning = getattr(ref.choices[0].message, "reasoning_content",
                            None) or ""
    assert ref_reasoning, "the tiny template no longer opens <think>"
    log = os.path.join(d, "noparse.log")
    port_file = os.path.join(d, "port-noparse")
    s = ServerProcess(serve_cmd(engine, plan, pack, log, port_file,
                                "--served-model-name tiny "
                                "--reasoning-parser none"),
                      port_file, log)
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none",
                          timeout=300, max_retries=0)
        r = c.chat.completions.create(model="tiny", max_tokens=6,
                                      temperature=0, messages=msgs)
        m = r.choices[0].message
        assert not (getattr(m, "reasoning_content", None) or "")
        assert (m.content or "") == \
            ref_reasoning + (ref.choices[0].message.content or "")
    finally:
        s.stop()


def test_serve_starts_the_ranks_of_a_multi_rank_cuda_plan(tiny):
    """`serve PLAN --backend cuda` of a 2-rank plan starts one process per
    rank (as `launch --sparks 2 serve` does). Here, in a build without CUDA,
    both ranks start and fail, and launch names the rank; --devices on a
    1-process serve is refused."""
    engine, d, pack, plan = tiny
    glmc = find_binary("glmc")
    plan2 = os.path.join(d, "tiny-tp2-cuda.plan")
    r = subprocess.run([glmc, "compile", pack, "--sparks", "2", "-o", plan2],
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    r = subprocess.run([engine, "serve", plan2, "--pack", pack, "--backend",
                        "cuda", "--port", "0"], capture_output=True,
                       timeout=120)
    err = r.stderr.decode(errors="replace")
    if "without" not in err:
        pytest.skip("a CUDA build: the ranks would serve for real")
    assert r.returncode == 1
    assert "launch: rank" in err and "[rank 1]" in err, err
    r = subprocess.run([engine, "serve", plan, "--pack", pack, "--devices",
                        "0,1", "--port", "0"], capture_output=True,
                       timeout=120)
    assert r.returncode == 1
    assert "--devices is for serving a plan of several ranks" in \
        r.stderr.decode(errors="replace")


@pytest.mark.parametrize("paged", [False, True])
def test_continuous_batching_load(tiny, scratch, paged):
    """--max-batch 8 on a plan of 8 KV slots: 32 concurrent streaming chat
    requests of mixed lengths (greedy and seeded sampling), every reply the
    text its request gets alone from a server without batching on the same
    plan; /metrics shows decode steps of more than one request and prefix
    hits for the requests that share a system prompt. Paged (glmc compile
    --kv-page-tokens 64): the system prompt spans whole pages, which the
    requests after the first to finish share (the first of them to end
    files its pages; at most 7 others run then, so later ones take them)."""
    engine, d, pack, _ = tiny
    glmc = find_binary("glmc")
    plan8 = os.path.join(d, "tiny-slots8%s.plan" % ("-paged" if paged else ""))
    r = subprocess.run([glmc, "compile", pack, "--sparks", "1",
                        "--kv-slots", "8", "-o", plan8] +
                       (["--kv-page-tokens", "64"] if paged else []),
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    system = "You are a terse assistant. Answer in one short line. " * \
        (6 if paged else 2)

    def request(i):
        msgs = [{"role": "user",
                 "content": f"question {i}: " + "more words " * (i % 6)}]
        if i % 2 == 0:  # half share a system prompt
            msgs.insert(0, {"role": "system", "content": system})
        kw = dict(temperature=0) if i % 3 else dict(temperature=0.8,
                                                    seed=1000 + i)
        return dict(model="tiny", max_tokens=4 + i % 9, messages=msgs, **kw)

    def streamed(c, i):
        text = ""
        for ch in c.chat.completions.create(stream=True, **request(i)):
            if ch.choices and ch.choices[0].delta.content:
                text += ch.choices[0].delta.content
        return text

    def start(name, flags):
        log = os.path.join(d, f"{name}-{paged}.log")
        port_file = os.path.join(d, f"port-{name}-{paged}")
        return ServerProcess(serve_cmd(engine, plan8, pack, log, port_file,
                                       flags), port_file, log)

    solo = start("solo", "--no-access-log")
    try:
        c = openai.OpenAI(base_url=solo.base + "/v1", api_key="none",
                          timeout=300, max_retries=0)
        want = [streamed(c, i) for i in range(32)]
    finally:
        solo.stop()
    batched = start("batched", "--max-batch 8 --no-access-log")
    try:
        c = openai.OpenAI(base_url=batched.base + "/v1", api_key="none",
                          timeout=300, max_retries=0)
        with concurrent.futures.ThreadPoolExecutor(32) as ex:
            got = list(ex.map(lambda i: streamed(c, i), range(32),
                              timeout=600))
        for i in range(32):
            assert got[i] == want[i], f"request {i}"
        _, text = batched.get("/metrics")

        def value(name):
            m = re.search(r"^" + name + r" (\d+)", text, re.M)
            assert m, name + " missing from /metrics"
            return int(m.group(1))

        assert value("glm_batch_step_rows_sum") > \
            value("glm_batch_step_rows_count"), "no step of 2+ requests"
        assert value("glm_prefix_hit_tokens_total") > 0
        assert value("glm_prefix_hit_requests_total") > 0
        assert "glm_inter_token_latency_seconds_count" in text
        if paged:
            assert value("glm_kv_pages_total") == 8 * 4096 // 64
            assert value("glm_kv_pages_in_use") == 0
            assert value("glm_kv_pages_cached") > 0
    finally:
        batched.stop()
