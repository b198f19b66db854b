#!/usr/bin/env bash
# Deployment flags (--api-key, --allowed-origins, --served-model-name,
# generation_config.json defaults, access log) and OpenAI fields (sampling,
# logprobs, refused unsupported fields) through the `openai` client over the
# fake engine of glm-serve-test (tests/serve/test_openai_deploy.py).
set -euo pipefail
ROOT=${GLM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
export GLM_TEST_TMP=${GLM_TEST_TMP:-$(mktemp -d)}
mkdir -p "$GLM_TEST_TMP"
cd "$ROOT/tests/serve"
exec timeout 600 python3 -m pytest -q -p no:cacheprovider test_openai_deploy.py
