// max_pool2d and avg_pool2d: one thread per output element, reading the window through the
// input's strides (so NCHW and channels-last inputs are pooled where they lie). The taps are
// visited row by row as in the CPU kernels (Note [Pooling loop order]), so sums add in the same
// order; see PoolParams in launch.h for the rules.
#include <cmath>
#include <limits>

#include "cuda_common.cuh"

namespace tessera::cuda {
namespace {

template <typename T> struct PoolAcc { using type = opmath_t<T>; };  // float for 16-bit floats
template <> struct PoolAcc<int8_t> { using type = int64_t; };
template <> struct PoolAcc<uint8_t> { using type = int64_t; };
template <> struct PoolAcc<int16_t> { using type = int64_t; };
template <> struct PoolAcc<int32_t> { using type = int64_t; };

template <typename T>
__global__ void pool2d_kernel(PoolParams p, int64_t total) {
  using Acc = typename PoolAcc<T>::type;
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += stride) {
    int64_t r = o, n, c, oh, ow;
    if (p.channels_inner) {  // [N, OH, OW, C] order: neighbouring threads, neighbouring channels
      c = r % p.c;
      r /= p.c;
      ow = r % p.ow;
      r /= p.ow;
      oh = r % p.oh;
      n = r / p.oh;
    } else {
      ow = r % p.ow;
      r /= p.ow;
      oh = r % p.oh;
      r /= p.oh;
      c = r % p.c;
      n = r / p.c;
    }
    const T* plane = in + n * p.in_strides[0] + c * p.in_strides[1];
    Acc acc;
    if (p.is_max) {
      if constexpr (std::is_floating_point_v<Acc>) acc = Acc(-INFINITY);
      else acc = Acc(std::numeric_limits<T>::lowest());
    } else {
      acc = Acc(0);
    }
    for (int64_t i = 0; i < p.kh; ++i) {
      const int64_t ih = oh * p.sh - p.ph + i * p.dh;
      if (ih < 0 || ih >= p.h) continue;
      for (int64_t j = 0; j < p.kw; ++j) {
        const int64_t iw = ow * p.sw - p.pw + j * p.dw;
        if (iw < 0 || iw >= p.w) continue;
        const Acc v = Acc(to_op(plane[ih * p.in_strides[2] + iw * p.in_strides[3]]));
        if (p.is_max) {
          if (v > acc || v != v) acc = v;  // a NaN wins, as on the CPU
        } else if constexpr (std::is_integral_v<Acc>) {
          acc = Acc(uint64_t(acc) + uint64_t(v));
        } else {
          acc += v;
        }
      }
    }
    if (!p.is_max) {
      if constexpr (std::is_integral_v<Acc>) acc /= Acc(p.kh * p.kw);
      else acc *= Acc(1) / Acc(p.kh * p.kw);
    }
    out[n * p.out_strides[0] + c * p.out_strides[1] + oh * p.out_strides[2] + ow * p.out_strides[3]] =
        from_op<T>(opmath_t<T>(acc));
  }
}

}  // namespace

cudaError_t launch_pool2d(const PoolParams& p, cudaStream_t stream) {
  const int64_t total = p.n * p.c * p.oh * p.ow;
  if (total == 0) return cudaSuccess;
  if (!p.is_max && !(p.dtype >= kDtF16 || p.dtype == kDtI64)) return cudaErrorInvalidValue;
  TESSERA_CUDA_DISPATCH_ALL(p.dtype, {
    pool2d_kernel<scalar_t><<<grid_for(total), kThreads, 0, stream>>>(p, total);
    return cudaGetLastError();
  })
  return cudaErrorInvalidValue;
}

}  // namespace tessera::cuda
