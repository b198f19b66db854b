"""Chat-template parity: glm-serve-test render against Python jinja2 set up
as transformers' apply_chat_template sets it up (sandboxed, trim_blocks,
lstrip_blocks, loop controls, json.dumps tojson, raise_exception)."""
import json
import os
import subprocess

import jinja2
import pytest
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from conftest import DATA, find_binary
from template_cases import cases

TEMPLATES = os.path.join(DATA, "templates")


def reference_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None,
               sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def reference_render(source, ctx):
    try:
        return {"text": reference_env().from_string(source).render(**ctx)}
    except Exception as e:  # the template refused: both must refuse
        return {"error": str(e)}


def ours(bin_, template, contexts, tmp):
    inp = os.path.join(tmp, "cases.json")
    with open(inp, "w") as f:
        json.dump(contexts, f, ensure_ascii=False)
    r = subprocess.run([bin_, "render", template, inp], capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return json.loads(r.stdout)


def check_template(bin_, path, tmp, extra_cases=()):
    source = open(path, encoding="utf-8").read()
    named = list(cases()) + list(extra_cases)
    got = ours(bin_, path, [c for _, c in named], tmp)
    rendered = 0
    for (name, ctx), g in zip(named, got):
        want = reference_render(source, ctx)
        if "error" in want:
            assert "error" in g, f"{name}: jinja2 refused, we rendered"
            continue
        assert "text" in g, f"{name}: {g.get('error')}"
        assert g["text"] == want["text"], f"{name} differs"
        rendered += 1
    assert rendered >= len(named) - 2


@pytest.mark.parametrize("template", sorted(os.listdir(TEMPLATES)))
def test_committed_templates(serve_test_bin, tmp_path, template):
    check_template(serve_test_bin, os.path.join(TEMPLATES, template),
                   str(tmp_path))


def test_glm_style_markers(serve_test_bin, tmp_path):
    # The GLM conventions the server relies on.
    path = os.path.join(TEMPLATES, "glm_style.jinja")
    ctx = dict(cases())
    got = ours(serve_test_bin, path,
               [ctx["basic"], ctx["thinking_off"], ctx["tool_round_trip"]],
               str(tmp_path))
    assert got[0]["text"].startswith("[gMASK]<sop><|system|>")
    assert got[0]["text"].endswith("<|assistant|><think>")
    assert got[1]["text"].endswith("<|assistant|></think>")
    t = got[2]["text"]
    assert ("<tool_call>get_weather<arg_key>city</arg_key>"
            "<arg_value>Paris</arg_value>") in t
    assert "<arg_value>2</arg_value>" in t
    assert "<|observation|><tool_response>" in t


def test_tiny_pack_template(serve_test_bin, tmp_path):
    glmc = find_binary("glmc")
    if not glmc:
        pytest.skip("glmc is not built")
    out = tmp_path / "tiny"
    r = subprocess.run([glmc, "synth", "--preset", "tiny", "--layout", "hf",
                        "--index-only", "-o", str(out)],
                       capture_output=True, timeout=300)
    tpl = out / "chat_template.jinja"
    if r.returncode != 0 or not tpl.exists():
        pytest.skip("glmc synth did not write chat_template.jinja")
    check_template(serve_test_bin, str(tpl), str(tmp_path))
