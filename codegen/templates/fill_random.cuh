// fill_random.cuh - synthetic weights: word i of n 32-bit words is a
// splitmix64 hash of (seed, i), AND mask (the mask keeps e.g. fp16 pairs
// finite and small).
#pragma once

#define GLM_FILL_RANDOM_PARAMS                                                 \
  unsigned *p, long long n, unsigned long long seed, unsigned mask
#define GLM_FILL_RANDOM_ARGS p, n, seed, mask

namespace glm {

/// Grid-stride: any grid.
template <int THREADS>
__device__ __forceinline__ void fillRandom(GLM_FILL_RANDOM_PARAMS) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: warps");
  for (long long i = blockIdx.x * (long long)THREADS + threadIdx.x; i < n;
       i += (long long)gridDim.x * THREADS) {
    unsigned long long z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = (unsigned)z & mask;
  }
}

} // namespace glm
