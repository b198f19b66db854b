# lit configuration of glmc: every .mlir under tests/lit runs its RUN lines
# with glmc-opt (and glmc) from the build and FileCheck from LLVM 22.
import os

import lit.formats

config.name = "glmc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "Inputs"]
config.test_source_root = config.glm_lit_src
config.test_exec_root = config.glm_lit_obj

path = [config.glm_tools_dir, config.llvm_tools_dir, os.environ.get("PATH", "")]
config.environment["PATH"] = os.pathsep.join(path)
config.substitutions.append(("%glm_src", os.path.dirname(config.glm_lit_src)))
