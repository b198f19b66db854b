#!/usr/bin/env python3
"""Builds tests/data/serve/glm_style_tokenizer.json: a small byte-level BPE
tokenizer shaped like GLM-4/5's (GLM-4 split regex + ByteLevel without its own
regex, ByteLevel decoder, GLM special tokens and the tool-call markup tokens as
added tokens), trained with Hugging Face `tokenizers` on the test corpus.

Run from the repository root: python3 tests/serve/make_glm_tokenizer.py
The output is committed; the parity tests only read it.

  --vocab-size N -o FILE   a larger tokenizer of the same shape (e.g. 151000,
                           GLM's size, for glm-serve-test bench-grammar), its
                           merges learned from generated words as well
"""
import argparse
import json
import os
import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models
from tokenizers import pre_tokenizers, trainers

# The GLM-4 family split rule (the Llama-3 rule with case-insensitive
# contractions and up-to-3-digit numbers).
GLM_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
             r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIAL = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
           "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
           "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
           "<|end_of_video|>"]
MARKUP = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
          "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>",
          "</tool_response>"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab-size", type=int, default=3000)
    ap.add_argument("-o", dest="out")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    data = os.path.join(root, "tests", "data", "serve")
    corpus = json.load(open(os.path.join(data, "tokenizer_corpus.json")))
    # Training text: the corpus plus varied prose and code so merges span
    # letters, digits, punctuation runs and indentation.
    text = list(corpus) * 3
    words = ("the quick brown fox jumps over the lazy dog while tokens merge "
             "into larger units of text and code").split()
    for i in range(400):
        text.append(" ".join(words[(i * 7 + k) % len(words)]
                             for k in range(12)) + f" {i * 37} ")
        text.append(f"    def f{i}(x):\n        return x * {i} + {i % 7}\n")
    if args.vocab_size > 3000:
        # Enough distinct words (with JSON-ish punctuation and digits) for
        # the trainer to find that many merges.
        rng = random.Random(1)
        letters = "etaoinshrdlcumwfgypbvkjxqz"
        for _ in range(args.vocab_size * 4):
            w = "".join(rng.choice(letters[:rng.randint(6, 26)])
                        for _ in range(rng.randint(2, 12)))
            text.append(f' {w} "{w}": {rng.randint(0, 99999)},' * 2)
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GLM_SPLIT), behavior="isolated",
                             invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab_size, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text, trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in SPECIAL])
    tok.add_tokens([AddedToken(s, special=False, normalized=True)
                    for s in MARKUP])
    out = args.out or os.path.join(data, "glm_style_tokenizer.json")
    tok.save(out)
    print("wrote", out, "vocab", tok.get_vocab_size())


if __name__ == "__main__":
    main()
