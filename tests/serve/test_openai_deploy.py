"""Deployment flags and OpenAI request fields of the server, through the
official `openai` client over glm-serve-test's scripted fake engine:
--api-key (401), --allowed-origins (CORS and preflight), several
--served-model-name aliases, generation_config.json sampling defaults,
the per-request access log, logprobs on both endpoints (plain and
streamed), and 400s naming unsupported fields instead of ignoring them."""
import json
import os
import re
import time
import urllib.error
import urllib.request

import openai
import pytest

from conftest import DATA
from server_fixture import ServerProcess

KEYS = ["key-one", "key-two"]
NAMES = ["glm-fake", "glm-alias", "local-model"]
HI = [{"role": "user", "content": "hi"}]
GREETING = "Hello! I am a fake engine. 😀 Ünïcode works."


def start(serve_test_bin, scratch, name, *flags):
    d = os.path.join(scratch, name)
    os.makedirs(d, exist_ok=True)
    return ServerProcess(
        [serve_test_bin, "serve",
         "--tokenizer", os.path.join(DATA, "glm_style_tokenizer.json"),
         "--template", os.path.join(DATA, "templates", "glm_style.jinja"),
         "--port", "0", "--port-file", os.path.join(d, "port"),
         "--max-context", "512", *flags],
        os.path.join(d, "port"), os.path.join(d, "server.log"))


@pytest.fixture(scope="module")
def gen_config(scratch):
    path = os.path.join(scratch, "generation_config.json")
    json.dump({"do_sample": True, "temperature": 0.6, "top_p": 0.9,
               "top_k": 40, "repetition_penalty": 1.05,
               "eos_token_id": [1, 2]}, open(path, "w"))
    return path


@pytest.fixture(scope="module")
def server(serve_test_bin, scratch, gen_config):
    flags = ["--api-key", ",".join(KEYS), "--allowed-origins",
             "http://ui.example, http://other.example",
             "--generation-config", gen_config]
    for n in NAMES:
        flags += ["--served-model-name", n]
    s = start(serve_test_bin, scratch, "deploy", *flags)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=KEYS[1],
                         timeout=60, max_retries=0)


def request(server, method, path, headers=None, body=None):
    """(status, headers dict with lowercase names, body bytes)."""
    req = urllib.request.Request(server.base + path, method=method,
                                 data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, \
                r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def log_lines(server):
    return open(server.log.name, errors="replace").read().splitlines()


def log_lines_with(server, text, limit_s=10):
    """The log lines that contain `text`, waiting for the first: a line is
    written just after its reply went out."""
    deadline = time.time() + limit_s
    while True:
        lines = [l for l in log_lines(server) if text in l]
        if lines or time.time() > deadline:
            return lines
        time.sleep(0.05)


# --api-key ------------------------------------------------------------------

def test_api_key_required_on_v1_only(server, client):
    for key in ["none", "key-on", "key-one-and-more"]:
        bad = openai.OpenAI(base_url=server.base + "/v1", api_key=key,
                            timeout=30, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as e:
            bad.chat.completions.create(model="glm-fake", messages=HI)
        assert e.value.status_code == 401
        assert e.value.code == "invalid_api_key"
        assert set(e.value.body) == {"message", "type", "param", "code"}
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    status, _, body = request(server, "GET", "/v1/models")  # no header
    assert status == 401 and json.loads(body)["error"]["code"] == \
        "invalid_api_key"
    # Every configured key works; /health and /metrics stay open.
    for key in KEYS:
        ok = openai.OpenAI(base_url=server.base + "/v1", api_key=key,
                           timeout=30, max_retries=0)
        assert ok.chat.completions.create(
            model="glm-fake", messages=HI).choices[0].message.content == \
            GREETING
    assert request(server, "GET", "/health")[0] == 200
    assert request(server, "GET", "/metrics")[0] == 200


def test_no_key_on_a_public_host_warns(serve_test_bin, scratch):
    s = start(serve_test_bin, scratch, "public", "--host", "0.0.0.0")
    try:
        assert request(s, "GET", "/v1/models")[0] == 200  # no auth
        # Without --allowed-origins: no CORS headers, no preflight answer.
        status, h, _ = request(s, "GET", "/v1/models",
                               {"Origin": "http://ui.example"})
        assert status == 200 and "access-control-allow-origin" not in h
        status, h, _ = request(s, "OPTIONS", "/v1/chat/completions", {
            "Origin": "http://ui.example",
            "Access-Control-Request-Method": "POST"})
        assert status != 204 and "access-control-allow-origin" not in h
    finally:
        s.stop()
    log = open(s.log.name, errors="replace").read()
    assert "warning" in log and "without an API key" in log


# --allowed-origins ----------------------------------------------------------

def test_cors_preflight_and_headers(server):
    status, h, body = request(server, "OPTIONS", "/v1/chat/completions", {
        "Origin": "http://ui.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204 and body == b""  # no API key needed for it
    assert h["access-control-allow-origin"] == "http://ui.example"
    assert "POST" in h["access-control-allow-methods"]
    assert "authorization" in h["access-control-allow-headers"].lower()
    assert "origin" in h["vary"].lower()
    # Real requests from an allowed origin carry the header, also errors
    # and streams.
    auth = {"Authorization": "Bearer " + KEYS[0],
            "Origin": "http://other.example",
            "Content-Type": "application/json"}
    status, h, _ = request(server, "GET", "/v1/models", auth)
    assert status == 200
    assert h["access-control-allow-origin"] == "http://other.example"
    status, h, _ = request(server, "GET", "/v1/models",
                           {"Origin": "http://other.example"})
    assert status == 401
    assert h["access-control-allow-origin"] == "http://other.example"
    body = json.dumps({"model": "glm-fake", "messages": HI,
                       "stream": True}).encode()
    status, h, data = request(server, "POST", "/v1/chat/completions", auth,
                              body)
    assert status == 200 and b"[DONE]" in data
    assert h["access-control-allow-origin"] == "http://other.example"
    # An origin not in the list gets no CORS headers; its preflight is 403.
    status, h, _ = request(server, "GET", "/v1/models",
                           dict(auth, Origin="http://evil.example"))
    assert status == 200 and "access-control-allow-origin" not in h
    status, h, _ = request(server, "OPTIONS", "/v1/models", {
        "Origin": "http://evil.example",
        "Access-Control-Request-Method": "GET"})
    assert status == 403 and "access-control-allow-origin" not in h


def test_cors_any_origin(serve_test_bin, scratch):
    s = start(serve_test_bin, scratch, "cors-any", "--allowed-origins", "*")
    try:
        status, h, _ = request(s, "OPTIONS", "/v1/completions", {
            "Origin": "http://anything.example",
            "Access-Control-Request-Method": "POST"})
        assert status == 204 and h["access-control-allow-origin"] == "*"
        status, h, _ = request(s, "GET", "/v1/models",
                               {"Origin": "http://anything.example"})
        assert status == 200 and h["access-control-allow-origin"] == "*"
    finally:
        s.stop()


# --served-model-name --------------------------------------------------------

def test_every_alias_is_listed_and_accepted(client):
    assert [m.id for m in client.models.list().data] == NAMES
    for name in NAMES:
        assert client.models.retrieve(name).id == name
        r = client.chat.completions.create(model=name, messages=HI)
        assert r.model == name and r.choices[0].message.content == GREETING
        r = client.completions.create(model=name, prompt="hello",
                                      max_tokens=3)
        assert r.model == name
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4", messages=HI)
    assert e.value.code == "model_not_found"
    assert all(n in e.value.message for n in NAMES)


# generation_config.json and the sampling fields -----------------------------

def sampling_reply(client, extra_body=None, **kw):
    r = client.chat.completions.create(
        model="glm-fake", messages=[{"role": "user",
                                     "content": "sampling please"}],
        extra_body=dict(extra_body or {},
                        chat_template_kwargs={"enable_thinking": False}),
        **kw)
    return dict(kv.split("=") for kv in r.choices[0].message.content.split())


def test_generation_config_gives_the_defaults(client):
    got = sampling_reply(client)
    assert got == {"temperature": "0.6", "top_p": "0.9", "top_k": "40",
                   "min_p": "0", "repetition_penalty": "1.05",
                   "presence_penalty": "0", "frequency_penalty": "0",
                   "seed": "none"}


def test_request_sampling_fields_reach_the_engine(client):
    got = sampling_reply(
        client, temperature=0.2, top_p=0.5, seed=9, presence_penalty=0.5,
        frequency_penalty=-0.25,
        extra_body={"top_k": 5, "min_p": 0.1, "repetition_penalty": 1.3})
    assert got == {"temperature": "0.2", "top_p": "0.5", "top_k": "5",
                   "min_p": "0.1", "repetition_penalty": "1.3",
                   "presence_penalty": "0.5", "frequency_penalty": "-0.25",
                   "seed": "9"}
    assert sampling_reply(client, extra_body={"top_k": -1})["top_k"] == "0"


@pytest.mark.parametrize("field,value", [
    ("top_k", -2), ("top_k", 1.5), ("min_p", 1.5), ("repetition_penalty", 0),
    ("presence_penalty", 3), ("frequency_penalty", "x"),
    # 2^64 - 1 wrapped to -1 ("off") through get<int64_t> (issue 18).
    ("top_k", 2**64 - 1)])
def test_bad_sampling_values(client, field, value):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="glm-fake", messages=HI,
                                       extra_body={field: value})
    assert e.value.body["param"] == field


# access log -----------------------------------------------------------------

def test_one_access_log_line_per_request(server, client):
    r = client.chat.completions.create(model="glm-fake", messages=HI)
    c = client.completions.create(model="glm-fake", prompt="count",
                                  max_tokens=7)
    lines = log_lines_with(server, r.id)
    assert len(lines) == 1, lines
    m = re.search(r"POST /v1/chat/completions status=200 prompt_tokens=(\d+) "
                  r"completion_tokens=(\d+) ttft_ms=([0-9.]+) "
                  r"tok_s=([0-9.]+) finish=stop$", lines[0])
    assert m, lines[0]
    assert int(m.group(1)) == r.usage.prompt_tokens
    assert int(m.group(2)) == r.usage.completion_tokens
    lines = log_lines_with(server, c.id)
    assert len(lines) == 1 and lines[0].endswith(" finish=length"), lines
    assert "completion_tokens=7 " in lines[0]
    assert log_lines_with(server, " status=401 ")


# logprobs -------------------------------------------------------------------

def check_entries(entries, k):
    for e in entries:
        assert e.logprob <= 0 and e.bytes is not None
        assert bytes(e.bytes).decode(errors="replace") == e.token or \
            "\ufffd" in e.token
        assert len(e.top_logprobs) == k
        if k:
            assert e.top_logprobs[0].token == e.token
            assert e.top_logprobs[0].logprob == pytest.approx(e.logprob)
            lps = [t.logprob for t in e.top_logprobs]
            assert lps == sorted(lps, reverse=True)


def test_chat_logprobs_plain_and_streamed(client):
    r = client.chat.completions.create(model="glm-fake", messages=HI,
                                       logprobs=True, top_logprobs=3)
    entries = r.choices[0].logprobs.content
    # Every generated token but the final eos.
    assert len(entries) == r.usage.completion_tokens - 1
    check_entries(entries, 3)
    # A token may hold part of a character: its string has U+FFFD, its
    # bytes are exact.
    text = b"".join(bytes(e.bytes) for e in entries).decode()
    assert text == "Thinking about it.</think>" + GREETING
    streamed = []
    for chunk in client.chat.completions.create(
            model="glm-fake", messages=HI, logprobs=True, top_logprobs=3,
            stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            streamed += chunk.choices[0].logprobs.content
    assert [(e.token, e.logprob) for e in streamed] == \
        [(e.token, e.logprob) for e in entries]
    # logprobs alone: the sampled token's, no alternatives.
    r = client.chat.completions.create(model="glm-fake", messages=HI,
                                       logprobs=True)
    check_entries(r.choices[0].logprobs.content, 0)
    # Not asked: null.
    r = client.chat.completions.create(model="glm-fake", messages=HI)
    assert r.choices[0].logprobs is None
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="glm-fake", messages=HI,
                                       top_logprobs=2)
    assert e.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="glm-fake", messages=HI,
                                       logprobs=True, top_logprobs=21)


def test_completion_logprobs_plain_and_streamed(client):
    r = client.completions.create(model="glm-fake", prompt="count",
                                  max_tokens=12, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == 12
    assert "".join(lp.tokens) == r.choices[0].text
    offsets = [0]
    for t in lp.tokens[:-1]:
        offsets.append(offsets[-1] + len(t.encode()))
    assert lp.text_offset == offsets
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 2 and top[tok] == pytest.approx(l) and l <= 0
    tokens, text = [], ""
    for chunk in client.completions.create(model="glm-fake", prompt="count",
                                           max_tokens=12, logprobs=2,
                                           stream=True):
        for c in chunk.choices:
            text += c.text
            if c.logprobs:
                tokens += c.logprobs.tokens
    assert tokens == lp.tokens and text == r.choices[0].text
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="glm-fake", prompt="x", logprobs=99)


# fields the server does not implement ---------------------------------------

@pytest.mark.parametrize("kw,names", [
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {
            "a": {"type": "string", "pattern": "^x"}}}}}},
     ["response_format", "pattern", "properties.a"]),
    ({"response_format": {"type": "regex"}}, ["response_format", "regex"]),
    ({"tool_choice": {"type": "function",
                      "function": {"name": "get_time"}}},
     ["tool_choice", "get_time"]),
    ({"logit_bias": {"5": 10}}, ["logit_bias"]),
    ({"extra_body": {"guided_regex": "a+"}}, ["guided_regex"]),
    ({"extra_body": {"functions": [{"name": "f"}]}}, ["functions"]),
])
def test_unsupported_fields_are_refused_by_name(client, kw, names):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object"}}}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="glm-fake", messages=HI,
                                       tools=tools, **kw)
    for n in names:
        assert n in e.value.message, e.value.message
    assert e.value.body["param"] == names[0]


def test_harmless_fields_are_accepted(client):
    r = client.chat.completions.create(
        model="glm-fake", messages=HI, n=1, user="someone",
        response_format={"type": "text"}, logit_bias={}, store=False,
        metadata={"a": "b"}, parallel_tool_calls=True, tool_choice="auto")
    assert r.choices[0].message.content == GREETING
    r = client.completions.create(model="glm-fake", prompt="hello", n=1,
                                  user="x", echo=False, best_of=1,
                                  max_tokens=4,
                                  stream_options=None)
    assert r.choices[0].text
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="glm-fake", prompt="x", echo=True)
    assert e.value.body["param"] == "echo"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="glm-fake", prompt="x",
                                  extra_body={"messages": HI})
    assert e.value.body["param"] == "messages"


# grammar-constrained decoding (the fake engine decodes seeded noise through
# the real token mask; tests/serve/test_engine_server.py does it with the
# tiny model) ----------------------------------------------------------------

WEATHER_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time"}}]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_object_replies_parse(client, seed):
    r = client.chat.completions.create(
        model="glm-fake", messages=HI, seed=seed, max_tokens=40,
        response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_forced_tool_calls(client):
    for choice, names in [("required", {"get_weather", "get_time"}),
                          ({"type": "function",
                            "function": {"name": "get_weather"}},
                           {"get_weather"})]:
        for seed in range(3):
            r = client.chat.completions.create(
                model="glm-fake", messages=HI, tools=WEATHER_TOOLS,
                tool_choice=choice, seed=seed, max_tokens=60)
            c = r.choices[0]
            assert c.finish_reason == "tool_calls", c
            for call in c.message.tool_calls:
                assert call.function.name in names
                args = json.loads(call.function.arguments)
                if call.function.name == "get_weather":
                    assert set(args) <= {"city", "days"} and "city" in args
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="glm-fake", messages=HI,
                                       tool_choice="required")
    assert e.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="glm-fake", messages=HI, tools=WEATHER_TOOLS,
            tool_choice="required", response_format={"type": "json_object"})
    assert e.value.body["param"] == "response_format"
