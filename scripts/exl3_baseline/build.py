#!/usr/bin/env python3
"""Builds exllamav3's batch-1 MoE kernels as small torch extensions.

exllamav3's wheel (py3-none-any) JIT-builds its whole CUDA extension (~190
translation units) on first import, more than one device call allows. The
baseline needs only its batch-1 MoE entry points, so this script compiles the
wheel's own sources for those (unchanged, with exllamav3's own nvcc flags from
its util/cuda_flags.py) plus our small binding files into:

  exl3_coop.so   exl3_moe_coop: the path BlockSparseMLP takes at batch 1
                 (BC_BlockSparseMLP.run_bszN: two launches per expert set)
  exl3_mgemm.so  exl3_mgemm (+ silu_mul): the older three multi-matrix launches
                 (optional, --mgemm; about 50 more units)

Usage:
  build.py [--wheel PATH] [--out DIR] [--mgemm] [--jobs N]
The wheel defaults to the newest exllamav3-*.whl in DIR or .whl/. Each module
lands in DIR as NAME.so; one already there is reused (delete it to rebuild).
TORCH_CUDA_ARCH_LIST defaults to 9.0 (the H200). Needs torch, nvcc and ninja.
"""

import argparse
import glob
import importlib.util
import os
import shutil
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Translation units per module, relative to exllamav3/exllamav3_ext. The
# closure was found from the undefined symbols of each object.
MODULES = {
    "exl3_coop": {
        "bind": "bind_coop.cpp",
        "sources": [
            "quant/exl3_moe_coop.cu",
            "quant/exl3_devctx.cu",
            "quant/comp_units/exl3_moe_coop_inst_*.cu",
        ],
    },
    "exl3_mgemm": {
        "bind": "bind_mgemm.cpp",
        "sources": [
            "quant/exl3_gemm.cu",
            "quant/exl3_kernel_map.cu",
            "quant/exl3_devctx.cu",
            "quant/exl3_gemv.cu",
            "quant/exl3_gemv_int8.cu",
            "quant/coop_autotune.cu",
            "graph.cu",
            "cuda_drv.cpp",
            "activation.cu",
            "quant/comp_units/exl3_comp_unit_*.cu",
            "quant/comp_units/exl3_gemv_half_inst.cu",
            "quant/comp_units/exl3_gemv_int8_inst_*.cu",
        ],
    },
}


def findWheel(out):
    cands = []
    for d in (out, os.path.join(ROOT, ".whl")):
        cands += glob.glob(os.path.join(d, "exllamav3-*.whl"))
    if not cands:
        return None
    return sorted(cands)[-1]


def extract(wheel, out):
    """Unpacks the wheel's extension sources and flag helper once."""
    tag = os.path.basename(wheel)[: -len(".whl")]
    dst = os.path.join(out, "src-" + tag)
    stamp = os.path.join(dst, ".done")
    if not os.path.exists(stamp):
        shutil.rmtree(dst, ignore_errors=True)
        with zipfile.ZipFile(wheel) as z:
            for n in z.namelist():
                if n.startswith("exllamav3/exllamav3_ext/") or \
                        n == "exllamav3/util/cuda_flags.py":
                    z.extract(n, dst)
        open(stamp, "w").close()
    return os.path.join(dst, "exllamav3")


def theirFlags(pkg, cudaHome):
    """exllamav3's own nvcc flags (util/cuda_flags.py, stdlib only)."""
    path = os.path.join(pkg, "util", "cuda_flags.py")
    spec = importlib.util.spec_from_file_location("exl3_cuda_flags", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cuda_cflags(cuda_home=cudaHome, debug=False, hip=False)


def build(name, pkg, out, log):
    import torch.utils.cpp_extension as cpp

    so = os.path.join(out, name + ".so")
    if os.path.exists(so):
        print(f"{name}: cached {so}", file=log, flush=True)
        return so
    extDir = os.path.join(pkg, "exllamav3_ext")
    spec = MODULES[name]
    sources = [os.path.join(HERE, spec["bind"])]
    for pat in spec["sources"]:
        hits = sorted(glob.glob(os.path.join(extDir, pat)))
        if not hits:
            raise SystemExit(f"{name}: no source matches {pat} in {extDir}; "
                             "is the wheel exllamav3 1.6.x?")
        sources += [h for h in hits if h not in sources]
    bdir = os.path.join(out, "build-" + name)
    os.makedirs(bdir, exist_ok=True)
    t0 = time.time()
    print(f"{name}: compiling {len(sources)} units "
          f"(arch {os.environ['TORCH_CUDA_ARCH_LIST']}, "
          f"{os.environ['MAX_JOBS']} jobs)", file=log, flush=True)
    cpp.load(name=name, sources=sources, extra_include_paths=[extDir],
             extra_cflags=["-Ofast"],
             extra_cuda_cflags=theirFlags(pkg, cpp.CUDA_HOME),
             build_directory=bdir, verbose=False)
    built = os.path.join(bdir, name + ".so")
    shutil.copyfile(built, so + ".tmp")
    os.replace(so + ".tmp", so)
    mib = os.path.getsize(so) / 2**20
    print(f"{name}: built in {time.time() - t0:.0f} s, {mib:.1f} MiB -> {so}",
          file=log, flush=True)
    return so


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wheel")
    ap.add_argument("--out", default=os.path.join(ROOT, ".exl3-build"))
    ap.add_argument("--mgemm", action="store_true",
                    help="also build the three-launch exl3_mgemm module")
    ap.add_argument("--only", choices=sorted(MODULES),
                    help="build just this module")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    os.environ.setdefault("MAX_JOBS", str(a.jobs))
    names = [a.only] if a.only else \
        (["exl3_coop", "exl3_mgemm"] if a.mgemm else ["exl3_coop"])
    if all(os.path.exists(os.path.join(a.out, n + ".so")) for n in names):
        for n in names:
            print(f"{n}: cached {os.path.join(a.out, n + '.so')}")
        return 0
    wheel = a.wheel or findWheel(a.out)
    if not wheel:
        raise SystemExit("no exllamav3-*.whl in " + a.out + " or .whl/: "
                         "pip download exllamav3==1.6.5 --no-deps there")
    pkg = extract(wheel, a.out)
    for n in names:
        build(n, pkg, a.out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
