// Integer matmul (Note [Integer nn ops] in plugins/cpu/nn/onednn_ops.cpp): products and sums in
// uint64 (modular, no signed overflow), converted to the integer type at the store, as the CPU.
// cuBLASLt has no integer GEMM of these types; the problem sizes integer matmuls come in are small.
#include "cuda_common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kTile = 16;

// A 16 x 16 output tile per block, the k range walked in 16-wide tiles through shared memory.
template <typename T>
__global__ void integer_matmul_kernel(const T* a, const T* b, T* out, int64_t m, int64_t k, int64_t n) {
  __shared__ uint64_t sa[kTile][kTile], sb[kTile][kTile];
  const int64_t batch = blockIdx.z;
  const int64_t row = int64_t(blockIdx.y) * kTile + threadIdx.y,
                col = int64_t(blockIdx.x) * kTile + threadIdx.x;
  const T* ab = a + batch * m * k;
  const T* bb = b + batch * k * n;
  uint64_t acc = 0;
  for (int64_t k0 = 0; k0 < k; k0 += kTile) {
    const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    sa[threadIdx.y][threadIdx.x] = row < m && ka < k ? uint64_t(int64_t(ab[row * k + ka])) : 0;
    sb[threadIdx.y][threadIdx.x] = kb < k && col < n ? uint64_t(int64_t(bb[kb * n + col])) : 0;
    __syncthreads();
#pragma unroll
    for (int t = 0; t < kTile; ++t) acc += sa[threadIdx.y][t] * sb[t][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) out[batch * m * n + row * n + col] = T(acc);
}

}  // namespace

template <typename T>
cudaError_t launch_typed(const void* a, const void* b, void* out, int64_t batch, int64_t m, int64_t k, int64_t n,
                         cudaStream_t stream) {
  const dim3 block(kTile, kTile), grid(unsigned((n + kTile - 1) / kTile), unsigned((m + kTile - 1) / kTile),
                                       unsigned(batch));
  integer_matmul_kernel<T><<<grid, block, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                       static_cast<T*>(out), m, k, n);
  return cudaGetLastError();
}

cudaError_t launch_integer_matmul(const void* a, const void* b, void* out, int32_t dtype, int64_t batch, int64_t m,
                                  int64_t k, int64_t n, cudaStream_t stream) {
  if (batch * m * n == 0) return cudaSuccess;
  if (batch > 65535 || (m + kTile - 1) / kTile > 65535) return cudaErrorInvalidValue;
  switch (dtype) {
    case kDtU8: return launch_typed<uint8_t>(a, b, out, batch, m, k, n, stream);
    case kDtI8: return launch_typed<int8_t>(a, b, out, batch, m, k, n, stream);
    case kDtI16: return launch_typed<int16_t>(a, b, out, batch, m, k, n, stream);
    case kDtI32: return launch_typed<int32_t>(a, b, out, batch, m, k, n, stream);
    case kDtI64: return launch_typed<int64_t>(a, b, out, batch, m, k, n, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tessera::cuda
