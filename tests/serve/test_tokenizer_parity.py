"""Tokenizer parity: glm-serve-test's encode/decode against Hugging Face
`tokenizers` on the multilingual + code + emoji corpus, for several
tokenizer.json variants (GLM-style, ignore_merges, GPT-2 ByteLevel regex,
GPT-4o-style split rule) and the tiny pack's tokenizer when glmc can make it.
"""
import json
import os
import shutil
import subprocess

import pytest
from tokenizers import Tokenizer

from conftest import DATA, find_binary

CORPUS = json.load(open(os.path.join(DATA, "tokenizer_corpus.json")))
GLM = os.path.join(DATA, "glm_style_tokenizer.json")

O200K_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*"
    r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
    r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def variant(name):
    j = json.load(open(GLM))
    if name == "ignore_merges":
        j["model"]["ignore_merges"] = True
    elif name == "gpt2_bytelevel":
        j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True,
                              "trim_offsets": True, "use_regex": True}
    elif name == "o200k_split":
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {
            "Regex": O200K_SPLIT}
    elif name == "merges_as_strings":
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    return j


def run_ours(bin_, tok_path, texts, tmp):
    inp = os.path.join(tmp, "in.json")
    with open(inp, "w") as f:
        json.dump(texts, f, ensure_ascii=False)
    out = subprocess.run([bin_, "tokenize", tok_path, inp], check=True,
                         capture_output=True, timeout=120)
    return json.loads(out.stdout)


def texts():
    # The corpus, each line alone and all of it joined (long inputs too).
    return CORPUS + ["\n".join(CORPUS), "".join(CORPUS) * 3]


def compare(bin_, tok_path, tmp):
    ref = Tokenizer.from_file(tok_path)
    ours = run_ours(bin_, tok_path, texts(), tmp)
    assert len(ours) == len(texts())
    for text, got in zip(texts(), ours):
        want = ref.encode(text, add_special_tokens=False).ids
        assert got["ids"] == want, f"encode differs on {text[:60]!r}"
        assert got["decoded"] == ref.decode(want, skip_special_tokens=False)
        assert got["decoded_skip"] == ref.decode(want,
                                                 skip_special_tokens=True)


@pytest.mark.parametrize("name", ["glm", "ignore_merges", "gpt2_bytelevel",
                                  "o200k_split", "merges_as_strings"])
def test_parity_variants(serve_test_bin, tmp_path, name):
    path = GLM
    if name != "glm":
        path = str(tmp_path / f"{name}.json")
        with open(path, "w") as f:
            json.dump(variant(name), f, ensure_ascii=False)
    compare(serve_test_bin, path, str(tmp_path))


def test_glm_special_tokens_are_single_ids(serve_test_bin, tmp_path):
    ref = Tokenizer.from_file(GLM)
    text = "[gMASK]<sop><|user|>hi<|assistant|><think>x</think>"
    ours = run_ours(serve_test_bin, GLM, [text], str(tmp_path))[0]["ids"]
    for s in ["[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<think>"]:
        assert ref.token_to_id(s) in ours


def test_decode_of_split_utf8(serve_test_bin, tmp_path):
    # Ids whose bytes cut a character in half decode to U+FFFD like the
    # reference does.
    ref = Tokenizer.from_file(GLM)
    ids = ref.encode("a😀b€", add_special_tokens=False).ids
    cases = [ids[:k] for k in range(1, len(ids) + 1)]
    cases += [ids[1:2], ids[::-1], [ids[0], 99999, ids[-1]]]
    ours = run_ours(serve_test_bin, GLM, [{"ids": c} for c in cases],
                    str(tmp_path))
    assert len(ids) > 3  # the emoji is split over several byte tokens
    for c, got in zip(cases, ours):
        assert got["decoded"] == ref.decode(c, skip_special_tokens=False)


def test_tiny_pack_tokenizer(serve_test_bin, tmp_path):
    glmc = find_binary("glmc")
    if not glmc:
        pytest.skip("glmc is not built")
    out = tmp_path / "tiny"
    r = subprocess.run([glmc, "synth", "--preset", "tiny", "--layout", "hf",
                        "--index-only", "-o", str(out)],
                       capture_output=True, timeout=300)
    tok = out / "tokenizer.json"
    if r.returncode != 0 or not tok.exists():
        pytest.skip("glmc synth did not write a tokenizer.json: "
                    + r.stderr.decode(errors="replace")[-300:])
    compare(serve_test_bin, str(tok), str(tmp_path))
