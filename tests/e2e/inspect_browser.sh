#!/usr/bin/env bash
# glmc inspect --format html in headless Chromium (inspect_browser.py): the
# rendered DOM, its geometry and two screenshots, left in $GLM_ARTIFACTS
# (build/artifacts/inspect_browser/ under ctest). A machine without the
# browser fails naming scripts/setup; GLM_SKIP_BROWSER=1 skips (exit 77).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
T=${GLM_TEST_TMP:-$(mktemp -d)}
if ! glmc compile --help >/dev/null 2>&1; then
  echo "glmc was built without MLIR (GLM_WITH_MLIR=OFF): inspect_browser skipped"
  exit 0
fi
exec python3 "$here/inspect_browser.py" "$T" "${GLM_ARTIFACTS:-$T/artifacts}"
