#!/usr/bin/env bash
# scripts/exl3_baseline/run.sh: builds (or reuses) exllamav3's batch-1 MoE
# kernels as torch extensions and times them on GLM-5.3 shapes next to our
# glm-engine bench table. For the GPU host; called by scripts/gpu when the
# wheel or the built modules are there.
#   scripts/exl3_baseline/run.sh OUTDIR [OURS_BENCH_TABLE]
# Needs: .exl3-build/exl3_coop.so (built earlier and carried) or an
# exllamav3-*.whl in .exl3-build/ or .whl/ (then it compiles, ~2 min on 16
# cores). Environment: GLM_EXL3_DIR (default .exl3-build), GLM_EXL3_MGEMM=1
# also builds/times the older three-launch exl3_mgemm path,
# GLM_EXL3_BUILD_TIMEOUT (s per module, default 420).
# Writes OUTDIR/exl3-build.log, exl3-bench.log, exl3-table.txt; prints the
# table. Exit 0 when the table was made and its sanity checks passed.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/scripts/exl3_baseline"
out="${1:?usage: run.sh OUTDIR [OURS_BENCH_TABLE]}"
ours="${2:-}"
dir="${GLM_EXL3_DIR:-$root/.exl3-build}"
tmo="${GLM_EXL3_BUILD_TIMEOUT:-420}"
mkdir -p "$out" "$dir"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout "$tmo" python3 "$here/build.py" --out "$dir" --only exl3_coop \
  >>"$out/exl3-build.log" 2>&1 \
  || { echo "exl3: exl3_coop build failed, see exl3-build.log"
       grep -m10 -B2 -A6 "error" "$out/exl3-build.log"; exit 1; }
if [ "${GLM_EXL3_MGEMM:-0}" = 1 ]; then
  timeout "$tmo" python3 "$here/build.py" --out "$dir" --only exl3_mgemm \
    >>"$out/exl3-build.log" 2>&1 \
    || echo "exl3: exl3_mgemm build failed or timed out (see exl3-build.log); timing coop only"
fi
echo "exl3 build: $(( $(date +%s) - t0 )) s"
args=(--ext-dir "$dir" --table "$out/exl3-table.txt")
[ -n "$ours" ] && [ -f "$ours" ] && args+=(--ours "$ours")
python3 "$here/bench.py" "${args[@]}" >"$out/exl3-bench.log" 2>&1
rc=$?
echo "exl3 bench: $(( $(date +%s) - t0 )) s (rc $rc)"
[ -f "$out/exl3-table.txt" ] || { tail -30 "$out/exl3-bench.log"; exit 1; }
exit $rc
