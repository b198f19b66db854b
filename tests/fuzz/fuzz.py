#!/usr/bin/env python3
"""Deterministic fuzz suite: damaged packs, re-signed plans, tokenizer and
chat-template files and HTTP requests, each run through the real tools.

Every case comes from a fixed seed (no time, no os.urandom), so a failure
reproduces with `fuzz.py --only KIND --seed N`. A case fails when a tool
  - dies by a signal or exits with a code >= 128 or outside its documented
    set (glmc verify: 0 whole, 1 unreadable, 2 damaged; the others: 0, 1),
  - runs past the hang detector (60 s; cases normally take well under 2 s),
  - or prints a sanitizer report (the ASan/UBSan build of scripts/test).
The failing case's files stay in the work folder, named in the report.

Usage: fuzz.py --bin DIR [--planner GLMC] [--work DIR] [--only KIND]
               [--seed N] [--keep]
KIND: pack-hf pack-exl3 pack-exlr8 plan tokenizer template http http-engine
"""
import argparse
import copy
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

HANG_S = 60  # a hang detector, never a timing: cases take < 2 s
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                   "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer",
                   "SUMMARY: AddressSanitizer")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "serve")

# The fixed seeds of each kind: the case count is len(range).
SEEDS = {
    "pack-hf": range(1, 25),
    "pack-exl3": range(1, 25),
    "pack-exlr8": range(1, 41),
    "plan": range(1, 61),
    "tokenizer": range(1, 61),
    "template": range(1, 81),
    "http": range(1, 1001),         # the fake engine's server
    "http-engine": range(1, 201),   # glm-engine serve, tiny pack, cpu
}

# Sanitizer reports must be visible (exit code 223, not the tools' 1).
SAN_ENV = {
    "ASAN_OPTIONS": "exitcode=223:abort_on_error=0:detect_leaks=1:"
                    "allocator_may_return_null=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=223",
}


# --------------------------------------------------------------------------
# xxh64 (the plan trailer's checksum), written out from its specification.
# --------------------------------------------------------------------------
P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P4, P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
M64 = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    acc = (acc + lane * P2) & M64
    return (_rotl(acc, 31) * P1) & M64


def _merge(acc, v):
    acc ^= _round(0, v)
    return (acc * P1 + P4) & M64


def xxh64(data, seed=0):
    n = len(data)
    i = 0
    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed,
             (seed - P1) & M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], struct.unpack_from("<Q", data, i)[0])
                i += 8
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) +
             _rotl(v[3], 18)) & M64
        for k in range(4):
            h = _merge(h, v[k])
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        h = (_rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * P1) & M64
        h = (_rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (_rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    h ^= h >> 32
    return h


assert xxh64(b"") == 0xEF46DB3751D8E999  # the reference value of the spec


def resign(body):
    return body + b"GLMPXH64" + struct.pack("<Q", xxh64(body))


# --------------------------------------------------------------------------
# Damage
# --------------------------------------------------------------------------
def flip_bytes(data, rng, count=None):
    if not data:
        return data
    b = bytearray(data)
    for _ in range(count or rng.randint(1, 16)):
        k = rng.randrange(len(b))
        b[k] ^= rng.randint(1, 255)
    return bytes(b)


def small_int(data, rng):
    """Raises, negates or nudges one aligned little-endian int32 holding a
    small positive value (a size, offset, index or count, e.g. a kernel
    argument), keeping the bytes around it."""
    if len(data) < 8:
        return data
    spots = [k for k in range(0, len(data) - 3, 4)
             if 0 < struct.unpack_from("<i", data, k)[0] <= 1 << 20]
    if not spots:
        return data
    k = rng.choice(spots)
    v = struct.unpack_from("<i", data, k)[0]
    v = rng.choice([v * rng.randint(2, 4096), -v, v + 1, v - 1,
                    2 ** 31 - 1])
    b = bytearray(data)
    struct.pack_into("<i", b, k, max(-2 ** 31, min(v, 2 ** 31 - 1)))
    return bytes(b)


def truncate(data, rng):
    return data[:rng.randrange(len(data) + 1)] if data else data


def splice(data, rng):
    """Copies a random slice of the data over another place (keeps size)."""
    if len(data) < 2:
        return data
    n = rng.randint(1, min(64, len(data) // 2))
    src, dst = rng.randrange(len(data) - n), rng.randrange(len(data) - n)
    return data[:dst] + data[src:src + n] + data[dst + n:]


HOSTILE_VALUES = [
    0, -1, 1, 2 ** 31, 2 ** 32, 2 ** 63 - 1, -2 ** 63, 2 ** 64, 10 ** 30,
    0.5, -1e308, 1e308, "", "x", "nan", "-1", "9" * 40, None, True, False,
    [], {}, [[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]], ["x"] * 3, {"a": 1},
    "\u0000\uffff\ud7ff", "a" * 5000,
]


def paths_of(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths_of(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:50]):  # long lists: their head
            yield from paths_of(v, prefix + (i,))


def json_mutate(obj, rng, extra_values=()):
    """One random change: replace a value, delete a key, or duplicate one."""
    obj = copy.deepcopy(obj)
    paths = [p for p in paths_of(obj) if p]
    if not paths:
        return rng.choice(HOSTILE_VALUES)
    path = rng.choice(paths)
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    last = path[-1]
    op = rng.random()
    values = list(HOSTILE_VALUES) + list(extra_values)
    if op < 0.7:
        parent[last] = copy.deepcopy(rng.choice(values))
    elif op < 0.85:
        del parent[last]
    elif isinstance(parent, dict):
        parent[str(last) + "_"] = copy.deepcopy(parent[last])
        parent[last] = copy.deepcopy(rng.choice(values))
    else:
        parent.append(copy.deepcopy(parent[last]))
    return obj


def json_bytes(obj):
    return json.dumps(obj, allow_nan=True).encode()


# --------------------------------------------------------------------------
# Running one tool
# --------------------------------------------------------------------------
class Suite:
    def __init__(self, args):
        self.args = args
        self.bin = args.bin
        self.work = args.work
        self.failures = []
        self.counts = {}
        self.statuses = {}  # kind -> HTTP status (or "closed") -> count
        self.env = dict(os.environ, **SAN_ENV)

    def tool(self, name):
        return os.path.join(self.bin, name)

    def run(self, case, argv, allowed, cwd=None):
        """Runs argv; records a failure (crash, hang, bad code, report)."""
        try:
            p = subprocess.run(argv, cwd=cwd, env=self.env, timeout=HANG_S,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except subprocess.TimeoutExpired:
            self.fail(case, argv, f"hang: no exit within {HANG_S} s")
            return None
        err = p.stderr.decode(errors="replace")
        if any(m in err for m in SANITIZER_MARKS):
            self.fail(case, argv, "sanitizer report:\n" + err[-3000:])
        elif p.returncode < 0:
            self.fail(case, argv, "killed by signal " +
                      signal.Signals(-p.returncode).name + "\n" + err[-1500:])
        elif p.returncode >= 128 or p.returncode not in allowed:
            self.fail(case, argv, f"exit code {p.returncode} (allowed "
                      f"{sorted(allowed)})\n" + err[-1500:])
        return p

    def fail(self, case, argv, why):
        self.failures.append((case, " ".join(argv), why))
        print(f"FAIL {case}: {why.splitlines()[0]}", flush=True)

    def count(self, kind):
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def case_dir(self, kind, seed):
        d = os.path.join(self.work, "cases", f"{kind}-{seed}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    def done_with(self, d, case):
        # Keep the files of failing cases for reproduction.
        if not self.args.keep and not any(f[0] == case
                                           for f in self.failures):
            shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------
# Packs of the three layouts
# --------------------------------------------------------------------------
def make_base(s):
    base = s.args.base or os.path.join(s.work, "base")
    stamp = os.path.join(base, "done")
    if os.path.exists(stamp):
        return base
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    # The base files are not under test: the planner's glmc (an ordinary
    # build) makes them faster than a sanitized one would.
    planner = s.args.planner
    for layout in ("hf", "exl3", "exlr8"):
        subprocess.run([planner, "synth", "--preset", "tiny",
                        "--layout", layout, "--threads", "2", "-o",
                        os.path.join(base, layout)], check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
    # Relative paths and a bare program name: the plan records its compile
    # command, and the plan cases mutate its bytes, so a plan that named
    # this checkout's folders would give each checkout other cases.
    subprocess.run(["glmc", "compile", "exlr8", "--manifest", "mixed",
                    "--no-nvrtc", "-o", "p1.glmplan"],
                   executable=os.path.abspath(planner), cwd=base, check=True,
                   stdout=subprocess.DEVNULL, timeout=600)
    open(stamp, "w").close()
    return base


def pack_case(s, base, layout, seed):
    kind = "pack-" + layout
    case = f"{kind} seed {seed}"
    rng = random.Random(f"{kind}-{seed}")
    d = s.case_dir(kind, seed)
    pack = os.path.join(d, "pack")
    shutil.copytree(os.path.join(base, layout), pack)
    files = sorted(os.path.relpath(os.path.join(r, f), pack)
                   for r, _, fs in os.walk(pack) for f in fs)
    jsons = [f for f in files if f.endswith(".json")]
    # Half the cases damage a JSON file structurally, half any file's bytes.
    if rng.random() < 0.5 and jsons:
        target = rng.choice(jsons)
        path = os.path.join(pack, target)
        try:
            obj = json.load(open(path))
            data = json_bytes(json_mutate(obj, rng))
            how = "json field"
        except ValueError:
            data = flip_bytes(open(path, "rb").read(), rng)
            how = "byte flips"
        json_damage = True
    else:
        target = rng.choice(files)
        path = os.path.join(pack, target)
        data = open(path, "rb").read()
        how = rng.choice(["byte flips", "truncation", "splice"])
        data = {"byte flips": flip_bytes, "truncation": truncate,
                "splice": splice}[how](data, rng)
        json_damage = target.endswith(".json")
    open(path, "wb").write(data)
    case += f" ({how} in {target})"
    s.count(kind)
    manifest = ["--manifest", "mixed"] if layout == "exlr8" else []
    s.run(case, [s.tool("glmc"), "verify", pack] + manifest, {0, 1, 2})
    s.run(case, [s.tool("glm-engine"), "run", "-", "--pack", pack,
                 "--backend", "reference", "--tokens", "1,2,3", "--max-new", "2",
                 "--greedy"] + manifest, {0, 1})
    if json_damage and s.args.planner_can_compile:
        # compile reads config, manifest and index only
        s.run(case, [s.args.planner, "compile", pack, "--no-nvrtc", "-o",
                     os.path.join(d, "p.glmplan")] + manifest, {0, 1})
    s.done_with(d, case)


# --------------------------------------------------------------------------
# Plans re-signed with a valid checksum
# --------------------------------------------------------------------------
def plan_case(s, base, seed):
    case = f"plan seed {seed}"
    rng = random.Random(f"plan-{seed}")
    data = open(os.path.join(base, "p1.glmplan"), "rb").read()
    body = data[:-16]
    how = rng.choice(["byte flips", "byte flips", "splice", "truncation",
                      "one byte", "small int", "small int"])
    if how == "small int":
        body = small_int(body, rng)
    elif how == "byte flips":
        body = flip_bytes(body, rng)
    elif how == "one byte":
        body = flip_bytes(body, rng, 1)
    elif how == "splice":
        body = splice(body, rng)
    else:
        body = truncate(body, rng)
    d = s.case_dir("plan", seed)
    plan = os.path.join(d, "p.glmplan")
    open(plan, "wb").write(resign(body))
    case += f" ({how})"
    s.count("plan")
    # The plan itself runs (the default backend, cpu): the executor checks
    # every launch against its buffers at load, so damaged kernel
    # arguments end in an error, never outside the arena.
    s.run(case, [s.tool("glm-engine"), "run", plan, "--pack",
                 os.path.join(base, "exlr8"), "--tokens", "1,2,3",
                 "--max-new", "2", "--greedy"], {0, 1})
    s.run(case, [s.tool("glmc"), "inspect", plan, "--format",
                 rng.choice(["text", "json", "dot"]), "-o",
                 os.path.join(d, "out")], {0, 1})
    s.done_with(d, case)


# --------------------------------------------------------------------------
# Tokenizer and chat-template files
# --------------------------------------------------------------------------
REGEX_SNIPPETS = ["(a+)+$", "(a|a)*b", "(?:ab)+", "\\p{L}+", "[", "(?i)",
                  "(?=x)", "a{1,100000}", "(" * 300, "\\", "(?<=a)",
                  "a**", "[z-a]", "\\x{110000}", ".*.*.*.*=", "(?>a+)b"]
TEXTS = ["Hello world", "a" * 60 + "b", "ab" * 3000, "[gMASK]<sop>x",
         "   \n\n\t  ", "日本語 😀 x=1234;", "\u00ff\u0100" * 100, ""]


def tokenizer_case(s, seed):
    case = f"tokenizer seed {seed}"
    rng = random.Random(f"tokenizer-{seed}")
    src = open(os.path.join(DATA, "glm_style_tokenizer.json"), "rb").read()
    how = rng.choice(["json field", "json field", "regex", "byte flips",
                      "truncation"])
    if how == "json field":
        data = json_bytes(json_mutate(json.loads(src), rng,
                                      extra_values=REGEX_SNIPPETS))
    elif how == "regex":
        obj = json.loads(src)
        obj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = \
            "".join(rng.choice(REGEX_SNIPPETS)
                    for _ in range(rng.randint(1, 3)))
        data = json_bytes(obj)
    elif how == "byte flips":
        data = flip_bytes(src, rng)
    else:
        data = truncate(src, rng)
    d = s.case_dir("tokenizer", seed)
    tok = os.path.join(d, "tokenizer.json")
    open(tok, "wb").write(data)
    texts = os.path.join(d, "in.json")
    json.dump(TEXTS + [{"ids": [0, 1, 2**31 - 1, -5]}], open(texts, "w"))
    case += f" ({how})"
    s.count("tokenizer")
    s.run(case, [s.tool("glm-serve-test"), "tokenize", tok, texts], {0, 1})
    s.done_with(d, case)


JINJA_SNIPPETS = [
    "{{ 'x' * 1000000000 }}", "{% for i in range(1000000) %}{% for j in "
    "range(1000000) %}{% endfor %}{% endfor %}", "{{ 2 ** 10000000000 }}",
    "{{ messages|tojson(indent=1000000000) }}", "{% macro f(n) %}{{ f(n) }}"
    "{% endmacro %}{{ f(1) }}", "{{ ((((((((((1)))))))))) }}", "{% if %}",
    "{{ 9223372036854775807 + 1 }}", "{{ -(-9223372036854775807 - 1) }}",
    "{% set l = [1] %}{% for i in range(40) %}{% set l = [l, l] %}"
    "{% endfor %}{{ l }}", "{{ 'a'.replace('', 'b' * 100000) * 1000 }}",
    "{{ range(-9223372036854775807, 9223372036854775807, 1)|length }}",
    "{{ (1e300 * 1e300)|int }}", "{{ 'x'|indent(99999999999) }}",
    "{% raw %}", "{{ x.y.z }}", "{%- endfor %}", "{{ 1 // 0 }}",
    "{{ [1,2][9999999999999] }}", "{{ 'abc'[::-9223372036854775807] }}",
    "{{ 'abc'[::0] }}", "{{ '%s' % 1 }}", "{{ messages[0]['content'] * 99 }}",
]


def template_case(s, seed):
    case = f"template seed {seed}"
    rng = random.Random(f"template-{seed}")
    names = ["glm_style.jinja", "features.jinja"]
    src = open(os.path.join(DATA, "templates", rng.choice(names)),
               "rb").read()
    how = rng.choice(["snippet", "snippet", "byte flips", "truncation",
                      "splice"])
    if how == "snippet":
        k = rng.randrange(len(src) + 1)
        src = src[:k] + rng.choice(JINJA_SNIPPETS).encode() + src[k:]
    elif how == "byte flips":
        src = flip_bytes(src, rng)
    elif how == "truncation":
        src = truncate(src, rng)
    else:
        src = splice(src, rng)
    d = s.case_dir("template", seed)
    tpl = os.path.join(d, "chat_template.jinja")
    open(tpl, "wb").write(src)
    ctx = {"messages": [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Hi " * 50},
                        {"role": "assistant", "content": "<think>x</think>ok",
                         "tool_calls": [{"function": {
                             "name": "f", "arguments": {"a": 1}}}]},
                        {"role": "tool", "content": "42"}],
           "tools": [{"type": "function", "function": {"name": "f"}}],
           "add_generation_prompt": True}
    cases = os.path.join(d, "cases.json")
    json.dump([ctx, json_mutate(ctx, rng), {}], open(cases, "w"))
    case += f" ({how})"
    s.count("template")
    # 2 s per render instead of the default 10: the time limit is what is
    # under test, not its figure.
    s.run(case, [s.tool("glm-serve-test"), "render", tpl, cases, "2"], {0, 1})
    s.done_with(d, case)


# --------------------------------------------------------------------------
# HTTP requests against one running server
# --------------------------------------------------------------------------
def base_requests():
    chat = {"model": "glm-fake", "messages": [{"role": "user",
                                               "content": "hi"}],
            "max_tokens": 4}
    tools = dict(chat, tools=[{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object"}}}])
    comp = {"model": "glm-fake", "prompt": "count", "max_tokens": 4}
    bodies = [("/v1/chat/completions", chat),
              ("/v1/chat/completions", dict(chat, stream=True,
                                            stream_options={
                                                "include_usage": True})),
              ("/v1/chat/completions", tools),
              ("/v1/completions", comp),
              ("/v1/completions", dict(comp, stream=True)),
              ("/v1/completions", dict(comp, prompt=[1, 2, 3]))]
    return bodies


def http_bytes(method, path, body, version="HTTP/1.1", extra=b""):
    head = (f"{method} {path} {version}\r\nHost: x\r\n"
            f"Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n").encode() + extra + b"\r\n"
    return head + body


def http_case(s, kind, port, seed):
    case = f"{kind} seed {seed}"
    rng = random.Random(f"{kind}-{seed}")
    path, obj = rng.choice(base_requests())
    how = rng.choice(["json field", "json field", "json field", "byte flips",
                      "truncation", "headers", "version", "get"])
    version = "HTTP/1.1"
    extra = b""
    if how == "json field":
        raw = http_bytes("POST", path, json_bytes(json_mutate(obj, rng)))
    elif how == "byte flips":
        raw = flip_bytes(http_bytes("POST", path, json_bytes(obj)), rng)
    elif how == "truncation":
        raw = truncate(http_bytes("POST", path, json_bytes(obj)), rng)
    elif how == "headers":
        extra = rng.choice([
            b"Content-Length: 3\r\n", b"Content-Length: -1\r\n",
            b"Content-Length: 99999999999999999999999\r\n",
            b"Transfer-Encoding: chunked\r\n", b"Expect: 100-continue\r\n",
            b"Connection: keep-alive, close\r\n", b"X: " + b"y" * 70000 +
            b"\r\n", b"no colon here\r\n", b":\r\n"])
        raw = http_bytes("POST", path, json_bytes(obj), extra=extra)
    elif how == "version":
        version = rng.choice(["HTTP/1.0", "HTTP/2.0", "HTTP/1.1 x", "HTTP"])
        raw = http_bytes("POST", path, json_bytes(obj), version=version)
    else:
        raw = rng.choice([b"GET /health HTTP/1.0\r\n\r\n",
                          b"GET /metrics HTTP/1.1\r\n\r\n",
                          b"GET /v1/models?x=%00 HTTP/1.1\r\n\r\n",
                          b"DELETE /v1/models HTTP/1.1\r\n\r\n",
                          b"\r\n\r\n", b"GET\r\n\r\n"])
    s.count(kind)
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=HANG_S)
        c.settimeout(HANG_S)
        c.sendall(raw)
        c.shutdown(socket.SHUT_WR)  # the server sees the end of the request
        reply = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            if len(reply) < 4096:
                reply += chunk[:4096]
        c.close()
        m = re.match(rb"HTTP/1\.1 ([0-9]{3}) ", reply)
        status = m.group(1).decode() if m else "closed"
        # The pack files are good, the engine cannot fail: a 500 is an
        # exception that validation missed (a bug), e.g. a nlohmann type
        # error for a field of the wrong type.
        if status == "500":
            s.fail(case + f" ({how})", ["http", repr(raw[:300])],
                   "500: " + reply.partition(b"\r\n\r\n")[2][:500]
                   .decode(errors="replace"))
        s.statuses.setdefault(kind, {}).setdefault(status, 0)
        s.statuses[kind][status] += 1
    except socket.timeout:
        s.fail(case + f" ({how})", ["http", repr(raw[:200])],
               f"hang: the server neither answered nor closed in {HANG_S} s")
    except OSError:
        pass  # a reset is an answer: the server refused the connection


def listening_port(log_path):
    m = re.search(r"http://[0-9.]+:([0-9]+)", open(log_path,
                                                   errors="replace").read())
    return int(m.group(1)) if m else None


def run_http(s, kind, base):
    """One server (the fake engine's or glm-engine's on the tiny pack), all
    the kind's requests, then: still up, /health 200, stops on SIGTERM."""
    d = os.path.join(s.work, kind)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    log_path = os.path.join(d, "server.log")
    log = open(log_path, "wb")
    if kind == "http":
        argv = [s.tool("glm-serve-test"), "serve", "--tokenizer",
                os.path.join(DATA, "glm_style_tokenizer.json"), "--template",
                os.path.join(DATA, "templates", "glm_style.jinja"),
                "--port", "0", "--port-file", os.path.join(d, "port"),
                "--max-context", "512", "--concurrency", "2"]
    else:
        argv = [s.tool("glm-engine"), "serve",
                os.path.join(base, "p1.glmplan"), "--pack",
                os.path.join(base, "exlr8"), "--port", "0"]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                            env=s.env)
    deadline = time.monotonic() + HANG_S
    port = None
    while port is None:
        if os.path.exists(os.path.join(d, "port")):
            port = int(open(os.path.join(d, "port")).read())
        else:
            port = listening_port(log_path)
        if port is None and (proc.poll() is not None or
                             time.monotonic() > deadline):
            s.fail(kind + " server start", argv, "did not start:\n" +
                   open(log_path, errors="replace").read()[-1500:])
            proc.kill()
            return
        time.sleep(0.05)
    for seed in select(s, kind):
        http_case(s, kind, port, seed)
        if proc.poll() is not None:
            s.fail(f"{kind} seed {seed}", argv,
                   f"the server exited ({proc.returncode})")
            break
    alive = proc.poll() is None
    if alive:
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=HANG_S)
            c.sendall(b"GET /health HTTP/1.0\r\n\r\n")
            c.settimeout(HANG_S)
            reply = c.recv(4096)
            c.close()
            if b" 200 " not in reply:
                s.fail(kind + " after all cases", argv, "health is not 200")
        except OSError as e:
            s.fail(kind + " after all cases", argv, f"health failed: {e}")
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            s.fail(kind + " server stop", argv, "did not stop on SIGTERM")
    log.close()
    text = open(log_path, errors="replace").read()
    if any(m in text for m in SANITIZER_MARKS):
        s.fail(kind + " server", argv, "sanitizer report:\n" + text[-3000:])
    elif proc.returncode not in (0, None) and alive:
        s.fail(kind + " server", argv, f"exit code {proc.returncode}")


def select(s, kind):
    if s.args.seed is not None:
        return [s.args.seed]
    return list(SEEDS[kind])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="glmc, glm-engine, "
                    "glm-serve-test")
    ap.add_argument("--planner", help="a glmc with `compile` (default: "
                    "--bin's, when it has one)")
    ap.add_argument("--work", default="fuzz-work")
    ap.add_argument("--base", help="where the undamaged packs and plan are "
                    "made once (default WORK/base; deterministic, so two "
                    "builds may share them)")
    ap.add_argument("--only", choices=sorted(SEEDS), action="append")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--keep", action="store_true", help="keep every case")
    args = ap.parse_args()
    args.work = os.path.abspath(args.work)
    args.base = args.base and os.path.abspath(args.base)
    os.makedirs(args.work, exist_ok=True)
    planner = args.planner or os.path.join(args.bin, "glmc")
    args.planner_can_compile = subprocess.run(
        [planner, "compile", "--help"], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL).returncode == 0
    args.planner = planner
    stamp = os.path.join(args.base or os.path.join(args.work, "base"),
                         "done")
    if not args.planner_can_compile and not os.path.exists(stamp):
        sys.exit(f"fuzz: {planner} has no `compile`; pass --planner with one")
    if not args.planner_can_compile:  # a host without MLIR, base given
        print(f"fuzz: {planner} has no `compile`: the compile steps of the "
              "pack cases are left out")
    s = Suite(args)
    kinds = args.only or list(SEEDS)
    t0 = time.monotonic()
    base = make_base(s)
    for kind in kinds:
        t = time.monotonic()
        if kind.startswith("pack-"):
            for seed in select(s, kind):
                pack_case(s, base, kind[5:], seed)
        elif kind == "plan":
            for seed in select(s, kind):
                plan_case(s, base, seed)
        elif kind == "tokenizer":
            for seed in select(s, kind):
                tokenizer_case(s, seed)
        elif kind == "template":
            for seed in select(s, kind):
                template_case(s, seed)
        else:
            run_http(s, kind, base)
        print(f"{kind}: {s.counts.get(kind, 0)} cases, "
              f"{time.monotonic() - t:.1f} s", flush=True)
        if kind in s.statuses:
            print("  replies: " + ", ".join(
                f"{k} x{v}" for k, v in sorted(s.statuses[kind].items())))
    total = sum(s.counts.values())
    print(f"fuzz: {total} cases in {time.monotonic() - t0:.1f} s, "
          f"{len(s.failures)} failures")
    for case, argv, why in s.failures:
        print(f"\n== {case}\n$ {argv}\n{why}")
    return 1 if s.failures else 0


if __name__ == "__main__":
    sys.exit(main())
