// Reductions (sum, mean, amax, amin over any set of dims), softmax / log_softmax, layer_norm and
// rms_norm.
// All accumulate in fp32. Softmax computes its row statistics in one online pass (running max and
// rescaled sum, merged across threads) and writes in a second; layer_norm uses Welford's algorithm.
#include <cmath>

#include "cuda_common.cuh"
#include "nan_math.h"

namespace tessera::cuda {
namespace {

__device__ __forceinline__ float reduce_init(ReduceOp op) {
  return op == ReduceOp::Max ? -INFINITY : (op == ReduceOp::Min ? INFINITY : 0.0f);
}
// Max and min propagate NaN, like PyTorch's amax/amin (Note [NaN in CUDA row maxima]).
__device__ __forceinline__ float reduce_combine(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::Max: return nan_max(a, b);
    case ReduceOp::Min: return nan_min(a, b);
    default: return a + b;
  }
}
__device__ __forceinline__ float warp_reduce(ReduceOp op, float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = reduce_combine(op, v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// The result is valid in thread 0. `smem` holds 32 floats; callers sync before reusing it.
__device__ float block_reduce(ReduceOp op, float v, float* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_reduce(op, v);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  const int nwarps = int(blockDim.x + 31) >> 5;
  v = threadIdx.x < unsigned(nwarps) ? smem[lane] : reduce_init(op);
  if (warp == 0) v = warp_reduce(op, v);
  return v;
}

__device__ __forceinline__ void kept_offsets(const ReducePlan& p, int64_t o, int64_t& in_off, int64_t& out_off) {
  in_off = 0;
  out_off = 0;
  for (int d = p.kept_ndim - 1; d >= 0; --d) {
    const int64_t c = o % p.kept_sizes[d];
    o /= p.kept_sizes[d];
    in_off += c * p.kept_in_strides[d];
    out_off += c * p.kept_out_strides[d];
  }
}
__device__ __forceinline__ int64_t reduced_offset(const ReducePlan& p, int64_t r) {
  int64_t off = 0;
  for (int d = p.reduced_ndim - 1; d >= 0; --d) {
    off += (r % p.reduced_sizes[d]) * p.reduced_in_strides[d];
    r /= p.reduced_sizes[d];
  }
  return off;
}

__device__ __forceinline__ void reduce_store(ReduceOp op, const ReducePlan& p, float acc, char* out, int32_t out_dtype,
                                             int64_t out_off) {
  const float value = op == ReduceOp::Mean ? acc / float(p.reduce_size) : acc;
  store_double(out + out_off * dtype_itemsize(out_dtype), out_dtype, double(value));
}

// Stores the result of split `split` of output `o`: the final value when there is one split, else
// a partial (sums stay sums: the mean divides in the second pass).
__device__ __forceinline__ void reduce_emit(ReduceOp op, const ReducePlan& p, int64_t splits, int64_t o, int64_t split,
                                            float acc, char* out, int32_t out_dtype, int64_t out_off, float* ws) {
  if (splits == 1) {
    reduce_store(op, p, acc, out, out_dtype, out_off);
  } else {
    ws[o * splits + split] = acc;
  }
}

// A block per (output, split): the split's reduced elements are spread over the block's threads.
// blockIdx.y is the split.
template <typename T>
__global__ void reduce_block_kernel(ReduceOp op, ReducePlan p, int64_t splits, int64_t chunk, const T* in, char* out,
                                    int32_t out_dtype, float* ws) {
  __shared__ float smem[32];
  const int64_t split = blockIdx.y;
  const int64_t r_begin = split * chunk;
  const int64_t r_end = r_begin + chunk < p.reduce_size ? r_begin + chunk : p.reduce_size;
  for (int64_t o = blockIdx.x; o < p.num_outputs; o += gridDim.x) {
    int64_t in_base, out_off;
    kept_offsets(p, o, in_base, out_off);
    float acc = reduce_init(op);
    for (int64_t r = r_begin + threadIdx.x; r < r_end; r += blockDim.x)
      acc = reduce_combine(op, acc, to_float(in[in_base + reduced_offset(p, r)]));
    acc = block_reduce(op, acc, smem);
    if (threadIdx.x == 0) reduce_emit(op, p, splits, o, split, acc, out, out_dtype, out_off, ws);
    __syncthreads();
  }
}

// A thread per (output, split): neighbouring threads read neighbouring inputs when the reduced
// dims are not the innermost ones. blockIdx.y is the split.
template <typename T>
__global__ void reduce_thread_kernel(ReduceOp op, ReducePlan p, int64_t splits, int64_t chunk, const T* in, char* out,
                                     int32_t out_dtype, float* ws) {
  const int64_t split = blockIdx.y;
  const int64_t r_begin = split * chunk;
  const int64_t r_end = r_begin + chunk < p.reduce_size ? r_begin + chunk : p.reduce_size;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < p.num_outputs; o += stride) {
    int64_t in_base, out_off;
    kept_offsets(p, o, in_base, out_off);
    float acc = reduce_init(op);
    for (int64_t r = r_begin; r < r_end; ++r) acc = reduce_combine(op, acc, to_float(in[in_base + reduced_offset(p, r)]));
    reduce_emit(op, p, splits, o, split, acc, out, out_dtype, out_off, ws);
  }
}

// Second pass: a warp per output combines its splits' partials.
__global__ void reduce_finish_kernel(ReduceOp op, ReducePlan p, int64_t splits, const float* ws, char* out,
                                     int32_t out_dtype) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t o = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; o < p.num_outputs; o += warps) {
    float acc = reduce_init(op);
    for (int64_t s = lane; s < splits; s += 32) acc = reduce_combine(op, acc, ws[o * splits + s]);
    acc = warp_reduce(op, acc);
    if (lane == 0) {
      int64_t in_base, out_off;
      kept_offsets(p, o, in_base, out_off);
      reduce_store(op, p, acc, out, out_dtype, out_off);
    }
  }
}

template <typename T>
cudaError_t run_reduce(ReduceOp op, const ReducePlan& p, const ReduceLaunch& how, const void* in, void* out,
                       int32_t out_dtype, float* ws, cudaStream_t stream) {
  if (p.num_outputs == 0) return cudaSuccess;
  if (how.splits < 1 || how.splits > 65535 || (how.splits > 1 && !ws)) return cudaErrorInvalidValue;
  const T* x = static_cast<const T*>(in);
  char* o = static_cast<char*>(out);
  if (how.block_per_output) {
    const int64_t blocks = p.num_outputs < 65535 * 4 ? p.num_outputs : 65535 * 4;
    const dim3 grid{unsigned(blocks), unsigned(how.splits), 1u};
    reduce_block_kernel<T><<<grid, unsigned(how.threads), 0, stream>>>(op, p, how.splits, how.chunk, x, o, out_dtype, ws);
  } else {
    const dim3 grid{grid_for(p.num_outputs, how.threads), unsigned(how.splits), 1u};
    reduce_thread_kernel<T><<<grid, unsigned(how.threads), 0, stream>>>(op, p, how.splits, how.chunk, x, o, out_dtype, ws);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess || how.splits == 1) return e;
  reduce_finish_kernel<<<grid_for(p.num_outputs * 32), kThreads, 0, stream>>>(op, p, how.splits, ws, o, out_dtype);
  return cudaGetLastError();
}

// ---------------------------------------------------------------- softmax

// Running (max, sum of exp(x - max)) pairs: SoftmaxStat (nan_math.h), whose max keeps a NaN (Note
// [NaN in CUDA row maxima]; fmaxf dropped it, and a row with a NaN came out finite).
__device__ __forceinline__ void warp_merge(SoftmaxStat& st) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, st.m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, st.s, o);
    st.merge(m2, s2);
  }
}

template <typename T>
__device__ __forceinline__ T softmax_value(bool log, float x, const SoftmaxStat& st) {
  return from_op<T>(st.value(log, x));
}

// One warp per row (rows up to 1024 elements): 4 rows per 128-thread block.
template <typename T>
__global__ void softmax_warp_kernel(bool log, const T* in, T* out, int64_t rows, int64_t n) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* x = in + row * n;
  T* y = out + row * n;
  SoftmaxStat st;
  for (int64_t j = lane; j < n; j += 32) st.add(to_float(x[j]));
  warp_merge(st);
  for (int64_t j = lane; j < n; j += 32) y[j] = softmax_value<T>(log, to_float(x[j]), st);
}

// One block per row (long rows).
template <typename T>
__global__ void softmax_block_kernel(bool log, const T* in, T* out, int64_t n) {
  __shared__ float sm[32], ss[32];
  const T* x = in + int64_t(blockIdx.x) * n;
  T* y = out + int64_t(blockIdx.x) * n;
  SoftmaxStat st;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) st.add(to_float(x[j]));
  warp_merge(st);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sm[warp] = st.m;
    ss[warp] = st.s;
  }
  __syncthreads();
  SoftmaxStat total;
  const int nwarps = int(blockDim.x) >> 5;
  for (int w = 0; w < nwarps; ++w) total.merge(sm[w], ss[w]);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[j] = softmax_value<T>(log, to_float(x[j]), total);
}

// Softmax over a non-innermost dim: one thread per (outer, inner) column.
template <typename T>
__global__ void softmax_column_kernel(bool log, const T* in, T* out, int64_t outer, int64_t dim, int64_t inner) {
  const int64_t columns = outer * inner;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += stride) {
    const int64_t o = c / inner, i = c % inner;
    const T* x = in + o * dim * inner + i;
    T* y = out + o * dim * inner + i;
    SoftmaxStat st;
    for (int64_t j = 0; j < dim; ++j) st.add(to_float(x[j * inner]));
    for (int64_t j = 0; j < dim; ++j) y[j * inner] = softmax_value<T>(log, to_float(x[j * inner]), st);
  }
}

template <typename T>
cudaError_t run_softmax(bool log, const void* in_v, void* out_v, int64_t outer, int64_t dim, int64_t inner,
                        cudaStream_t stream) {
  const T* in = static_cast<const T*>(in_v);
  T* out = static_cast<T*>(out_v);
  if (outer * dim * inner == 0) return cudaSuccess;
  if (inner == 1) {
    if (dim <= 1024) {
      const int64_t blocks = (outer + 3) / 4;
      if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
      softmax_warp_kernel<T><<<unsigned(blocks), 128, 0, stream>>>(log, in, out, outer, dim);
    } else {
      if (outer > 0x7fffffff) return cudaErrorInvalidValue;
      softmax_block_kernel<T><<<unsigned(outer), 512, 0, stream>>>(log, in, out, dim);
    }
  } else {
    softmax_column_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(log, in, out, outer, dim, inner);
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------- layer_norm

struct Welford {
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;
  __device__ __forceinline__ void add(float x) {
    n += 1.0f;
    const float d = x - mean;
    mean += d / n;
    m2 += d * (x - mean);
  }
  __device__ __forceinline__ void merge(float n2, float mean2, float m22) {
    const float total = n + n2;
    if (total == 0.0f) return;
    const float d = mean2 - mean;
    mean += d * (n2 / total);
    m2 += m22 + d * d * (n * n2 / total);
    n = total;
  }
};
__device__ __forceinline__ void warp_merge(Welford& w) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float n2 = __shfl_xor_sync(0xffffffffu, w.n, o);
    const float mean2 = __shfl_xor_sync(0xffffffffu, w.mean, o);
    const float m22 = __shfl_xor_sync(0xffffffffu, w.m2, o);
    w.merge(n2, mean2, m22);
  }
}

template <typename T>
__global__ void layer_norm_kernel(const T* in, const T* weight, const T* bias, T* out, int64_t n, float eps) {
  __shared__ float sn[32], smean[32], sm2[32];
  const T* x = in + int64_t(blockIdx.x) * n;
  T* y = out + int64_t(blockIdx.x) * n;
  Welford w;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) w.add(to_float(x[j]));
  warp_merge(w);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sn[warp] = w.n;
    smean[warp] = w.mean;
    sm2[warp] = w.m2;
  }
  __syncthreads();
  Welford total;
  const int nwarps = int(blockDim.x) >> 5;
  for (int i = 0; i < nwarps; ++i) total.merge(sn[i], smean[i], sm2[i]);
  const float rstd = rsqrtf(total.m2 / float(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float v = (to_float(x[j]) - total.mean) * rstd;
    if (weight) v *= to_float(weight[j]);
    if (bias) v += to_float(bias[j]);
    y[j] = from_op<T>(v);
  }
}

// rms_norm: y = x / sqrt(mean(x^2) + eps) * weight per row, the sum of squares in fp32 (a NaN
// anywhere in the row makes the row NaN through the sum), as the CPU kernel computes it.
template <typename T>
__global__ void rms_norm_kernel(const T* in, const T* weight, T* out, int64_t n, float eps) {
  __shared__ float partial[32];
  const T* x = in + int64_t(blockIdx.x) * n;
  T* y = out + int64_t(blockIdx.x) * n;
  float q = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float v = to_float(x[j]);
    q = fmaf(v, v, q);
  }
  q = warp_sum(q);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = q;
  __syncthreads();
  float total = 0.0f;
  const int nwarps = int(blockDim.x) >> 5;
  for (int i = 0; i < nwarps; ++i) total += partial[i];
  const float r = 1.0f / sqrtf(total / float(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float v = to_float(x[j]) * r;
    if (weight) v *= to_float(weight[j]);
    y[j] = from_op<T>(v);
  }
}

}  // namespace

cudaError_t launch_reduce(ReduceOp op, const ReducePlan& plan, const ReduceLaunch& how, const void* in,
                          int32_t in_dtype, void* out, int32_t out_dtype, float* workspace, cudaStream_t stream) {
  TESSERA_CUDA_DISPATCH_FLOATING(in_dtype, return run_reduce<scalar_t>(op, plan, how, in, out, out_dtype, workspace, stream))
  return cudaErrorInvalidValue;
}

cudaError_t launch_softmax(bool log, const void* in, void* out, int32_t dtype, int64_t outer, int64_t dim,
                           int64_t inner, cudaStream_t stream) {
  TESSERA_CUDA_DISPATCH_FLOATING(dtype, return run_softmax<scalar_t>(log, in, out, outer, dim, inner, stream))
  return cudaErrorInvalidValue;
}

cudaError_t launch_layer_norm(const void* in, const void* weight, const void* bias, void* out, int32_t dtype,
                              int64_t rows, int64_t n, double eps, bool rms, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  const int threads = n >= 4096 ? 512 : (n >= 512 ? 256 : 64);
  TESSERA_CUDA_DISPATCH_FLOATING(dtype, {
    if (rms)
      rms_norm_kernel<scalar_t><<<unsigned(rows), threads, 0, stream>>>(
          static_cast<const scalar_t*>(in), static_cast<const scalar_t*>(weight), static_cast<scalar_t*>(out), n,
          float(eps));
    else
      layer_norm_kernel<scalar_t><<<unsigned(rows), threads, 0, stream>>>(
          static_cast<const scalar_t*>(in), static_cast<const scalar_t*>(weight), static_cast<const scalar_t*>(bias),
          static_cast<scalar_t*>(out), n, float(eps));
    return cudaGetLastError();
  })
  return cudaErrorInvalidValue;
}

}  // namespace tessera::cuda
