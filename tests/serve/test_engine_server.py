"""`glm-engine serve` on the tiny pack with the cpu backend, through the
official `openai` client: streamed and plain chat, a tool-call round trip
rendered through the pack's template, 20 concurrent requests, bad requests
answered with 4xx while the server stays up, /metrics counting them.
Skipped while glm-engine has no `serve` subcommand or glmc cannot compile."""
import concurrent.futures
import json
import os
import re
import socket
import subprocess

import openai
import pytest

from conftest import find_binary
from server_fixture import ServerProcess


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def engine_server(scratch):
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
    port = free_port()
    port_file = os.path.join(d, "port")
    # The server prints its address; a small wrapper writes the port file
    # once /health answers.
    s = ServerProcess(["bash", "-c",
                       f'"{engine}" serve "{plan}" --pack "{pack}" '
                       f'--backend cpu --host 127.0.0.1 --port {port} & '
                       f'pid=$!; trap "kill -TERM $pid; wait $pid" TERM; '
                       f'for i in $(seq 1200); do '
                       f'if python3 -c "import urllib.request as u; '
                       f"u.urlopen('http://127.0.0.1:{port}/health', "
                       f'timeout=2)" 2>/dev/null; then '
                       f'echo {port} > "{port_file}"; break; fi; '
                       f'kill -0 $pid || exit 1; sleep 0.1; done; wait $pid'],
                      port_file, os.path.join(d, "server.log"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(engine_server):
    return openai.OpenAI(base_url=engine_server.base + "/v1", api_key="none",
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
