#!/usr/bin/env bash
# The OpenAI-compatible server through the official `openai` client, over the
# scripted fake engine of glm-serve-test (tests/serve/test_openai_server.py).
set -euo pipefail
ROOT=${GLM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
export GLM_TEST_TMP=${GLM_TEST_TMP:-$(mktemp -d)}
mkdir -p "$GLM_TEST_TMP"
cd "$ROOT/tests/serve"
exec timeout 600 python3 -m pytest -q -p no:cacheprovider test_openai_server.py
