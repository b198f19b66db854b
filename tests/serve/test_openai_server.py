"""The OpenAI-compatible server through the official `openai` client, over
glm-serve-test's scripted fake engine (protocol behaviour independent of any
model): plain, streamed, tool call round trip, stop sequence, 20 concurrent
requests, client disconnect, bad requests -> 4xx, /metrics, still up."""
import concurrent.futures
import json
import os
import re
import socket
import time
import urllib.error
import urllib.request

import openai
import pytest

from conftest import DATA
from server_fixture import ServerProcess

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}}]


@pytest.fixture(scope="module")
def server(serve_test_bin, scratch):
    d = os.path.join(scratch, "openai")
    os.makedirs(d, exist_ok=True)
    s = ServerProcess([serve_test_bin, "serve",
                       "--tokenizer", os.path.join(DATA,
                                                   "glm_style_tokenizer.json"),
                       "--template", os.path.join(DATA, "templates",
                                                  "glm_style.jinja"),
                       "--host", "127.0.0.1", "--port", "0",
                       "--port-file", os.path.join(d, "port"),
                       "--max-context", "512", "--delay-ms", "2",
                       "--concurrency", "2", "--max-queue", "64"],
                      os.path.join(d, "port"), os.path.join(d, "server.log"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none",
                         timeout=60, max_retries=0)


def post_raw(server, path, body, content_type="application/json"):
    req = urllib.request.Request(server.base + path, data=body,
                                 headers={"Content-Type": content_type},
                                 method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def metric(server, name, labels=""):
    _, text = server.get("/metrics")
    m = re.search("^" + re.escape(name + labels) + r" ([0-9.e+-]+)$", text,
                  re.M)
    return float(m.group(1)) if m else 0.0


def test_models_and_health(server, client):
    assert server.get("/health")[0] == 200
    assert [m.id for m in client.models.list().data] == ["glm-fake"]
    assert client.models.retrieve("glm-fake").id == "glm-fake"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4")
    assert e.value.code == "model_not_found"


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(
            model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    assert e.value.code == "model_not_found" and "glm-fake" in e.value.message


def test_stream_without_usage_has_choices_in_every_chunk(client):
    # The OpenAI docs' loop reads chunk.choices[0] from every chunk: the
    # usage chunk (empty choices) comes only with include_usage.
    text = ""
    for chunk in client.chat.completions.create(
            model="glm-fake", messages=[{"role": "user", "content": "hi"}],
            stream=True):
        assert chunk.usage is None
        text += chunk.choices[0].delta.content or ""
    assert text


def test_plain_chat_with_reasoning(client):
    r = client.chat.completions.create(
        model="glm-fake", messages=[{"role": "user", "content": "hi"}])
    msg = r.choices[0].message
    assert msg.content == "Hello! I am a fake engine. 😀 Ünïcode works."
    assert msg.model_extra["reasoning_content"] == "Thinking about it."
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == (r.usage.prompt_tokens +
                                    r.usage.completion_tokens)


def test_thinking_off(client):
    r = client.chat.completions.create(
        model="glm-fake", messages=[{"role": "user", "content": "hi"}],
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.choices[0].message.content.startswith("Hello!")
    assert "reasoning_content" not in (r.choices[0].message.model_extra or {})


def test_streamed_chat_with_usage(client):
    stream = client.chat.completions.create(
        model="glm-fake", messages=[{"role": "user", "content": "hi"}],
        stream=True, stream_options={"include_usage": True})
    content, reasoning, finish, usage = "", "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            content += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get(
                "reasoning_content") or ""
            finish = c.finish_reason or finish
    assert content == "Hello! I am a fake engine. 😀 Ünïcode works."
    assert reasoning == "Thinking about it."
    assert "<" not in content + reasoning  # no markup leaks
    assert finish == "stop"
    assert usage and usage.completion_tokens > 0


def test_tool_call_round_trip(client):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model="glm-fake", messages=messages,
                                       tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris",
                                                       "days": 2}
    assert choice.message.content == "Sure, let me check."
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": calls[0].id,
                     "content": json.dumps({"sky": "sunny", "temp": 21})})
    r2 = client.chat.completions.create(model="glm-fake", messages=messages,
                                        tools=TOOLS)
    assert r2.choices[0].message.content == (
        "The weather in Paris is sunny, 21 degrees.")
    assert not r2.choices[0].message.tool_calls


def test_streamed_tool_call(client):
    stream = client.chat.completions.create(
        model="glm-fake", tools=TOOLS, stream=True,
        messages=[{"role": "user", "content": "weather in Paris?"}])
    calls, content, finish = {}, "", None
    for chunk in stream:
        for c in chunk.choices:
            content += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                e = calls.setdefault(tc.index, {"name": "", "args": ""})
                e["name"] += tc.function.name or ""
                e["args"] += tc.function.arguments or ""
            finish = c.finish_reason or finish
    assert content == "Sure, let me check."
    assert calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["args"]) == {"city": "Paris", "days": 2}
    assert finish == "tool_calls"


def test_malformed_call_is_text(client):
    r = client.chat.completions.create(
        model="glm-fake", tools=TOOLS,
        messages=[{"role": "user", "content": "malformed please"}])
    m = r.choices[0].message
    assert not m.tool_calls
    assert m.content == ("<tool_call>get_weather<arg_key>city</arg_key>Paris"
                         "</tool_call> done")


def test_stop_sequence_and_max_tokens(client):
    r = client.chat.completions.create(
        model="glm-fake", messages=[{"role": "user", "content": "count"}],
        stop=["5 6"])
    assert r.choices[0].message.content == "1 2 3 4 "
    assert r.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model="glm-fake", messages=[{"role": "user", "content": "count"}],
        stop="12", stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream
                   if c.choices)
    assert text == "1 2 3 4 5 6 7 8 9 10\n11 "
    r = client.chat.completions.create(
        model="glm-fake", messages=[{"role": "user", "content": "count"}],
        max_tokens=10)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 10


def test_completions_endpoint(client):
    r = client.completions.create(model="glm-fake", prompt="count to ten",
                                  max_tokens=8, temperature=0, seed=7)
    assert r.choices[0].text.startswith("1 2 3")
    assert r.usage.completion_tokens == 8
    chunks = list(client.completions.create(
        model="glm-fake", prompt="hello", stream=True, max_tokens=200))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == "Hello! I am a fake engine. 😀 Ünïcode works."


@pytest.mark.parametrize("path,extra", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/completions", {"prompt": "hello"}),
])
@pytest.mark.parametrize("model", ["", None])
def test_replies_name_the_served_model_when_none_is_asked(server, path, extra,
                                                           model):
    # Clients that send "model": "" or null get the served name back, on
    # both endpoints (not an empty name, not a server error).
    body = dict(extra, model=model, max_tokens=4)
    status, reply = post_raw(server, path, json.dumps(body).encode())
    assert status == 200, reply
    assert reply["model"] == "glm-fake"


def test_twenty_concurrent_requests(server, client):
    before = metric(server, "glm_requests_total",
                    '{endpoint="/v1/chat/completions",status="200"}')

    def one(i):
        r = client.chat.completions.create(
            model="glm-fake", messages=[{"role": "user",
                                         "content": f"hi {i}"}],
            stream=(i % 2 == 0))
        if i % 2 == 0:
            return "".join(c.choices[0].delta.content or "" for c in r
                           if c.choices)
        return r.choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(20) as ex:
        results = list(ex.map(one, range(20), timeout=120))
    assert all(r == "Hello! I am a fake engine. 😀 Ünïcode works."
               for r in results)
    after = metric(server, "glm_requests_total",
                   '{endpoint="/v1/chat/completions",status="200"}')
    assert after - before == 20


def test_disconnect_cancels_generation(server):
    cancelled = metric(server, "glm_requests_cancelled_total")
    generated = metric(server, "glm_generation_tokens_total")
    body = json.dumps({"model": "glm-fake", "stream": True,
                       "messages": [{"role": "user", "content": "count"}]})
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
               "Content-Type: application/json\r\nContent-Length: "
               f"{len(body)}\r\n\r\n{body}").encode())
    assert b"200 OK" in s.recv(4096)
    s.close()  # after the first bytes of a ~1000-token reply
    deadline = time.time() + 20
    while metric(server, "glm_requests_cancelled_total") <= cancelled:
        assert time.time() < deadline, "generation was not cancelled"
        time.sleep(0.1)
    # The reply has ~1000 tokens; cancelled early, far fewer were made.
    assert metric(server, "glm_generation_tokens_total") - generated < 900


BAD = [
    (b"{not json", "malformed json"),
    (json.dumps({"model": 5, "messages": [{"role": "user", "content": "x"}]})
     .encode(), "model type"),
    # One request nested 100,000 deep used to overflow the server's stack.
    (b'{"messages": [{"role": "user", "content": "x"}], "tools": '
     + b"[" * 100000 + b"]" * 100000 + b"}", "nesting too deep"),
    (b"[1, 2]", "not an object"),
    (json.dumps({"messages": "hi"}).encode(), "messages not a list"),
    (json.dumps({"messages": []}).encode(), "empty messages"),
    (json.dumps({"messages": [{"role": "robot", "content": "x"}]}).encode(),
     "bad role"),
    (json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(),
     "content wrong type"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}],
                 "temperature": "hot"}).encode(), "temperature type"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}],
                 "temperature": 7}).encode(), "temperature range"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}],
                 "top_p": 0}).encode(), "top_p zero"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}],
                 "max_tokens": -3}).encode(), "negative max_tokens"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}],
                 "stream": "yes"}).encode(), "stream type"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}],
                 "stop": [1, 2]}).encode(), "stop type"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}],
                 "tools": {"a": 1}}).encode(), "tools type"),
    # Found by tests/fuzz: a number as a tool's type was a 500.
    (json.dumps({"messages": [{"role": "user", "content": "x"}],
                 "tools": [{"type": 1, "function": {"name": "f"}}]}).encode(),
     "tool type not a string"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}],
                 "seed": "abc"}).encode(), "seed type"),
    (json.dumps({"messages": [{"role": "user",
                               "content": "word " * 2000}]}).encode(),
     "prompt too long"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}],
                 "max_tokens": 100000}).encode(), "max_tokens over context"),
]


@pytest.mark.parametrize("body,why", BAD, ids=[w for _, w in BAD])
def test_bad_requests_get_openai_errors(server, body, why):
    status, err = post_raw(server, "/v1/chat/completions", body)
    assert 400 <= status < 500, why
    e = err["error"]
    assert set(e) == {"message", "type", "param", "code"}
    assert e["message"] and e["type"] == "invalid_request_error"
    assert server.alive()


def test_client_raises_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="glm-fake", temperature=-1,
            messages=[{"role": "user", "content": "x"}])
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="glm-fake",
            messages=[{"role": "user", "content": "long " * 3000}])
    assert e.value.body["code"] == "context_length_exceeded"


def test_http_level_errors(server):
    status, err = post_raw(server, "/v1/nothing", b"{}")
    assert status == 404 and "error" in err
    req = urllib.request.Request(server.base + "/v1/chat/completions")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 405
    # A body over the limit is refused before it is read.
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
              b"Content-Length: 999999999999\r\n\r\n")
    assert b" 413 " in s.recv(4096)
    s.close()
    # Garbage instead of HTTP.
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(b"\x00\x01garbage\r\n\r\n")
    assert b" 400 " in s.recv(4096)
    s.close()


def test_metrics_count_everything_and_server_is_up(server, client):
    _, text = server.get("/metrics")
    for name in ["glm_requests_total", "glm_prompt_tokens_total",
                 "glm_generation_tokens_total", "glm_queue_depth",
                 "glm_time_to_first_token_seconds_bucket",
                 "glm_decode_tokens_per_second"]:
        assert name in text
    bad = sum(float(v) for v in re.findall(
        r'^glm_requests_total\{endpoint="/v1/chat/completions",'
        r'status="4\d\d"\} ([0-9.]+)$', text, re.M))
    assert bad >= len(BAD)
    assert metric(server, "glm_generation_tokens_total") > 0
    r = client.chat.completions.create(
        model="glm-fake", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content.startswith("Hello!")


def test_queue_full_gives_429(serve_test_bin, scratch):
    d = os.path.join(scratch, "queue")
    os.makedirs(d, exist_ok=True)
    s = ServerProcess([serve_test_bin, "serve",
                       "--tokenizer", os.path.join(DATA,
                                                   "glm_style_tokenizer.json"),
                       "--template", os.path.join(DATA, "templates",
                                                  "glm_style.jinja"),
                       "--port", "0", "--port-file", os.path.join(d, "port"),
                       "--delay-ms", "20", "--concurrency", "1",
                       "--max-queue", "1"],
                      os.path.join(d, "port"), os.path.join(d, "log"))
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="none",
                          timeout=60, max_retries=0)

        def one(_):
            try:
                c.chat.completions.create(
                    model="glm-fake", max_tokens=20,
                    messages=[{"role": "user", "content": "count"}])
                return 200
            except openai.RateLimitError:
                return 429

        with concurrent.futures.ThreadPoolExecutor(6) as ex:
            codes = list(ex.map(one, range(6), timeout=120))
        assert codes.count(429) >= 1 and codes.count(200) >= 2
        assert metric(s, "glm_requests_rejected_total") == codes.count(429)
        assert s.alive()
    finally:
        s.stop()


def read_until_close(sock, limit_s=60):
    """Everything the server sends until it closes (a hang detector bound)."""
    sock.settimeout(limit_s)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def raw_request(server, head, body):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(head + body)
    data = read_until_close(s)
    s.close()
    return data


def test_http10_stream_is_close_delimited(server):
    # An HTTP/1.0 client does not know chunked encoding: the event stream
    # comes as a plain body that ends when the server closes.
    body = json.dumps({"model": "glm-fake", "prompt": "count", "stream": True,
                       "max_tokens": 5}).encode()
    data = raw_request(server, b"POST /v1/completions HTTP/1.0\r\n"
                       b"Content-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body), body)
    head, _, payload = data.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0]
    assert b"transfer-encoding" not in head.lower()
    assert b"connection: close" in head.lower()
    events = [e for e in payload.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]", events
    for e in events[:-1]:  # no chunk-size lines between the events
        assert e.startswith("data: {"), e
        json.loads(e[len("data: "):])
    # HTTP/1.1 still streams chunked.
    data = raw_request(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Connection: close\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body), body)
    assert b"transfer-encoding: chunked" in data.partition(
        b"\r\n\r\n")[0].lower()


@pytest.mark.parametrize("lengths,status", [
    ([b"2", b"40"], b" 400 "),       # conflicting: refused (was: first won)
    ([b"2, 40"], b" 400 "),          # the same as one comma list
    ([b"+2"], b" 400 "),             # not digits
    ([b"2", b"2"], b" 404 "),        # repeated but equal: read as 2
])
def test_content_length_must_be_one_number(server, lengths, status):
    head = b"POST /v1/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    for v in lengths:
        head += b"Content-Length: " + v + b"\r\n"
    data = raw_request(server, head + b"\r\n", b"{}" + b" " * 38)
    assert status in data.split(b"\r\n")[0], data[:200]
    if status == b" 400 ":
        assert b"Content-Length" in data
    assert server.alive()


def test_hostile_pack_files_get_clean_errors(serve_test_bin, scratch):
    # A backtracking tokenizer regex and a template that builds 1 GB: each
    # request is refused in bounded time, naming the file, and the server
    # keeps serving.
    d = os.path.join(scratch, "hostile")
    os.makedirs(d, exist_ok=True)
    tok = json.load(open(os.path.join(DATA, "glm_style_tokenizer.json")))
    tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a+)+$"
    tok_path = os.path.join(d, "tokenizer.json")
    json.dump(tok, open(tok_path, "w"))
    tpl_path = os.path.join(d, "chat_template.jinja")
    open(tpl_path, "w").write('{{ "x" * 1000000000 }}')
    good_tpl = os.path.join(DATA, "templates", "glm_style.jinja")
    good_tok = os.path.join(DATA, "glm_style_tokenizer.json")
    for tokenizer, template, status, names in [
            (tok_path, good_tpl, 500, [tok_path, "(a+)+$"]),
            (good_tok, tpl_path, 400, [tpl_path + ":1: rendering refused"])]:
        s = ServerProcess([serve_test_bin, "serve", "--tokenizer", tokenizer,
                           "--template", template, "--port", "0",
                           "--port-file", os.path.join(d, "port")],
                          os.path.join(d, "port"), os.path.join(d, "log"))
        try:
            for _ in range(2):
                t0 = time.time()
                code, err = post_raw(s, "/v1/chat/completions", json.dumps({
                    "model": "glm-fake", "messages": [
                        {"role": "user", "content": "a" * 60 + "b"}]
                }).encode())
                assert code == status, err
                for n in names:
                    assert n in err["error"]["message"], err
                assert time.time() - t0 < 60  # hang detector, not a timing
            assert s.get("/health")[0] == 200 and s.alive()
        finally:
            s.stop()
