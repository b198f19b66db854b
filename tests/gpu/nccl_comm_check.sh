#!/usr/bin/env bash
# Quick two-GPU check of runtime/dist's NcclDeviceComm alone: builds glm_dist
# (-DGLM_WITH_CUDA=ON, NCCL) and tests/gpu/nccl_comm_gpu_test.cpp into one
# small binary, without the rest of glm_gpu_tests (which also runs it), and
# runs it. Carry .deps (scripts/vendor-headers) on hosts without -dev
# packages. Log: $OUT/nccl-comm.log (or out/gpu).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${GLM_GPU_BUILD_DIR:-$root/build-gpu}"
out="${OUT:-$root/out/gpu}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L || true
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGLM_WITH_MLIR=OFF -DGLM_WITH_CUDA=ON > "$out/nccl-configure.log" 2>&1 \
  || { tail -30 "$out/nccl-configure.log"; exit 1; }
targets=(glm_dist glm_base)
gtest_inc=()
if [ -d "$root/.deps/googletest" ] && ! [ -f /usr/include/gtest/gtest.h ]; then
  targets+=(gtest_main gtest)
  gtest_inc=(-isystem "$root/.deps/googletest/googletest/include")
fi
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" \
  > "$out/nccl-build.log" 2>&1 || { tail -30 "$out/nccl-build.log"; exit 1; }
libs=()
for l in gtest_main gtest; do
  f=$(find "$build" -name "lib$l.a" | head -1)
  if [ -n "$f" ]; then libs+=("$f"); else libs+=("-l$l"); fi
done
cuda=/usr/local/cuda
nccl_dir=$(dirname "$(find "$cuda/" /usr/lib/x86_64-linux-gnu -name 'libnccl.so*' 2>/dev/null | head -1)")
g++ -O2 -std=c++17 -DGLM_DIST_HAVE_NCCL=1 -I"$root" "${gtest_inc[@]}" \
  -isystem "$cuda/include" "$root/tests/gpu/nccl_comm_gpu_test.cpp" \
  "$build/runtime/dist/libglm_dist.a" "$build/runtime/libglm_base.a" \
  "${libs[@]}" -L"$nccl_dir" -L"$cuda/lib64" -Wl,-rpath,"$nccl_dir" \
  -lnccl -lcudart -lpthread -o "$build/nccl_comm_gpu_test" \
  >> "$out/nccl-build.log" 2>&1 || { tail -30 "$out/nccl-build.log"; exit 1; }
"$build/nccl_comm_gpu_test" --gtest_color=no 2>&1 | tee "$out/nccl-comm.log"
