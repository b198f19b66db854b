#!/usr/bin/env bash
# Tokenizer and chat-template parity with Hugging Face `tokenizers` and Python
# `jinja2` (pytest, tests/serve/test_*_parity.py) through glm-serve-test.
set -euo pipefail
ROOT=${GLM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
export GLM_TEST_TMP=${GLM_TEST_TMP:-$(mktemp -d)}
mkdir -p "$GLM_TEST_TMP"
cd "$ROOT/tests/serve"
exec timeout 600 python3 -m pytest -q -p no:cacheprovider \
  test_tokenizer_parity.py $(ls test_template_parity.py 2>/dev/null || true)
