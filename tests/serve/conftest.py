"""Shared fixtures for the serve tests: where the binaries and test data are.

Binaries come from PATH (ctest puts the build's bin/ there) or GLM_BIN_DIR.
"""
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "serve")


def find_binary(name):
    d = os.environ.get("GLM_BIN_DIR")
    if d and os.path.exists(os.path.join(d, name)):
        return os.path.join(d, name)
    return shutil.which(name)


@pytest.fixture(scope="session")
def serve_test_bin():
    b = find_binary("glm-serve-test")
    if not b:
        pytest.fail("glm-serve-test not found on PATH or in GLM_BIN_DIR")
    return b


@pytest.fixture(scope="session")
def scratch(tmp_path_factory):
    base = os.environ.get("GLM_TEST_TMP")
    if base:
        os.makedirs(base, exist_ok=True)
        return base
    return str(tmp_path_factory.mktemp("serve"))
