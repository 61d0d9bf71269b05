// Reductions (sum, mean, amax, amin, prod, var, argmax, argmin over any set of dims), softmax /
// log_softmax, layer_norm and rms_norm.
// Reductions accumulate the states of reduce_state.h (Note [CUDA reduction states]): fp32 for the
// 16-bit floats and float32, double for float64, int64 for integers and bool. Softmax computes its
// row statistics in one online pass (running max and rescaled sum, merged across threads) and
// writes in a second; layer_norm uses Welford's algorithm; both in fp32, or double for float64.
#include <cmath>

#include "cuda_common.cuh"
#include "nan_math.h"
#include "reduce_state.h"
#include "softmax_plan.h"

namespace tessera::cuda {

template <> struct ReduceAcc<__half> { using type = float; };
template <> struct ReduceAcc<__nv_bfloat16> { using type = float; };

namespace {

// float for the 16-bit floats and float32, double for float64: the arithmetic type of softmax and
// the norms.
template <typename T> using float_acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <typename T> __device__ __forceinline__ float_acc_t<T> to_acc(T v) { return float_acc_t<T>(to_op(v)); }

__device__ __forceinline__ float acc_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double acc_rsqrt(double x) { return rsqrt(x); }
__device__ __forceinline__ float acc_fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double acc_fma(double a, double b, double c) { return fma(a, b, c); }
__device__ __forceinline__ float acc_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double acc_sqrt(double x) { return sqrt(x); }

// ---------------------------------------------------------------- reductions

template <typename T> __device__ __forceinline__ reduce_acc_t<T> load_reduce(T v) { return reduce_acc_t<T>(v); }
template <> __device__ __forceinline__ float load_reduce<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float load_reduce<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename Acc, ReduceOp kOp>
__device__ __forceinline__ ValueState<Acc, kOp> shfl_xor(const ValueState<Acc, kOp>& s, int o) {
  return {__shfl_xor_sync(0xffffffffu, s.v, o)};
}
template <typename Acc>
__device__ __forceinline__ WelfordState<Acc> shfl_xor(const WelfordState<Acc>& s, int o) {
  return {__shfl_xor_sync(0xffffffffu, s.n, o), __shfl_xor_sync(0xffffffffu, s.mean, o),
          __shfl_xor_sync(0xffffffffu, s.m2, o)};
}
template <typename Acc>
__device__ __forceinline__ LogSumExpState<Acc> shfl_xor(const LogSumExpState<Acc>& s, int o) {
  return {__shfl_xor_sync(0xffffffffu, s.m, o), __shfl_xor_sync(0xffffffffu, s.s, o)};
}
template <typename Acc, bool kMin>
__device__ __forceinline__ ArgState<Acc, kMin> shfl_xor(const ArgState<Acc, kMin>& s, int o) {
  return {__shfl_xor_sync(0xffffffffu, s.v, o), __shfl_xor_sync(0xffffffffu, s.i, o)};
}

template <typename S>
__device__ __forceinline__ S warp_reduce(S s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s.merge(shfl_xor(s, o));
  return s;
}
// The result is valid in thread 0. `smem` holds 32 states; callers sync before reusing it.
template <typename S>
__device__ S block_reduce(S s, S* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  s = warp_reduce(s);
  if (lane == 0) smem[warp] = s;
  __syncthreads();
  const int nwarps = int(blockDim.x + 31) >> 5;
  s = threadIdx.x < unsigned(nwarps) ? smem[lane] : S::identity();
  if (warp == 0) s = warp_reduce(s);
  return s;
}

// An accumulated value stored into the output dtype: integer accumulators wrap into integer
// outputs (int64 sums are exact) and are converted into floating ones; floating accumulators go to
// floating outputs.
template <typename Acc>
__device__ __forceinline__ void store_acc(char* p, int32_t dt, Acc v) {
  if constexpr (std::is_integral_v<Acc>) {
    switch (dt) {
      case kDtBool: *reinterpret_cast<bool*>(p) = v != 0; return;
      case kDtU8: *reinterpret_cast<uint8_t*>(p) = uint8_t(v); return;
      case kDtI8: *reinterpret_cast<int8_t*>(p) = int8_t(v); return;
      case kDtI16: *reinterpret_cast<int16_t*>(p) = int16_t(v); return;
      case kDtI32: *reinterpret_cast<int32_t*>(p) = int32_t(v); return;
      case kDtI64: *reinterpret_cast<int64_t*>(p) = int64_t(v); return;
      default: store_double(p, dt, double(v)); return;
    }
  } else {
    store_double(p, dt, double(v));
  }
}

// What finishing an output needs besides its state: mean's divisor and var's correction.
struct ReduceFinish {
  bool mean = false;
  int64_t count = 1;  // the reduced elements per output
  double correction = 1.0;
};

template <typename Acc, ReduceOp kOp>
__device__ __forceinline__ void store_state(const ValueState<Acc, kOp>& s, const ReduceFinish& f, char* p, int32_t dt) {
  if constexpr (std::is_integral_v<Acc>) store_acc(p, dt, s.v);
  else store_acc(p, dt, f.mean ? s.v / Acc(f.count) : s.v);  // an empty mean is 0 / 0: NaN
}
template <typename Acc>
__device__ __forceinline__ void store_state(const WelfordState<Acc>& s, const ReduceFinish& f, char* p, int32_t dt) {
  store_acc(p, dt, s.variance(f.correction));
}
template <typename Acc>
__device__ __forceinline__ void store_state(const LogSumExpState<Acc>& s, const ReduceFinish&, char* p, int32_t dt) {
  store_acc(p, dt, s.value());
}
template <typename Acc, bool kMin>
__device__ __forceinline__ void store_state(const ArgState<Acc, kMin>& s, const ReduceFinish&, char* p, int32_t dt) {
  store_acc(p, dt, s.i);
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

// Stores the result of split `split` of output `o`: the final value when there is one split, else
// the partial state for the second pass.
template <typename S>
__device__ __forceinline__ void reduce_emit(const S& s, const ReduceFinish& f, int64_t splits, int64_t o, int64_t split,
                                            char* out, int32_t out_dtype, int64_t out_off, S* ws) {
  if (splits == 1) store_state(s, f, out + out_off * dtype_itemsize(out_dtype), out_dtype);
  else ws[o * splits + split] = s;
}

// A block per (output, split): the split's reduced elements are spread over the block's threads.
// blockIdx.y is the split.
template <typename T, typename S>
__global__ void reduce_block_kernel(ReducePlan p, ReduceFinish f, int64_t splits, int64_t chunk, const T* in, char* out,
                                    int32_t out_dtype, S* ws) {
  __shared__ S smem[32];
  const int64_t split = blockIdx.y;
  const int64_t r_begin = split * chunk;
  const int64_t r_end = r_begin + chunk < p.reduce_size ? r_begin + chunk : p.reduce_size;
  for (int64_t o = blockIdx.x; o < p.num_outputs; o += gridDim.x) {
    int64_t in_base, out_off;
    kept_offsets(p, o, in_base, out_off);
    S s = S::identity();
    for (int64_t r = r_begin + threadIdx.x; r < r_end; r += blockDim.x)
      s.add(load_reduce(in[in_base + reduced_offset(p, r)]), r);
    s = block_reduce(s, smem);
    if (threadIdx.x == 0) reduce_emit(s, f, splits, o, split, out, out_dtype, out_off, ws);
    __syncthreads();
  }
}

// A thread per (output, split): neighbouring threads read neighbouring inputs when the reduced
// dims are not the innermost ones. blockIdx.y is the split.
template <typename T, typename S>
__global__ void reduce_thread_kernel(ReducePlan p, ReduceFinish f, int64_t splits, int64_t chunk, const T* in,
                                     char* out, int32_t out_dtype, S* ws) {
  const int64_t split = blockIdx.y;
  const int64_t r_begin = split * chunk;
  const int64_t r_end = r_begin + chunk < p.reduce_size ? r_begin + chunk : p.reduce_size;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < p.num_outputs; o += stride) {
    int64_t in_base, out_off;
    kept_offsets(p, o, in_base, out_off);
    S s = S::identity();
    for (int64_t r = r_begin; r < r_end; ++r) s.add(load_reduce(in[in_base + reduced_offset(p, r)]), r);
    reduce_emit(s, f, splits, o, split, out, out_dtype, out_off, ws);
  }
}

// Second pass: a warp per output merges its splits' partial states.
template <typename S>
__global__ void reduce_finish_kernel(ReducePlan p, ReduceFinish f, int64_t splits, const S* ws, char* out,
                                     int32_t out_dtype) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t o = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; o < p.num_outputs; o += warps) {
    S s = S::identity();
    for (int64_t k = lane; k < splits; k += 32) s.merge(ws[o * splits + k]);
    s = warp_reduce(s);
    if (lane == 0) {
      int64_t in_base, out_off;
      kept_offsets(p, o, in_base, out_off);
      store_state(s, f, out + out_off * dtype_itemsize(out_dtype), out_dtype);
    }
  }
}

template <typename T, typename S>
cudaError_t run_reduce(const ReducePlan& p, const ReduceLaunch& how, const ReduceFinish& f, const void* in, void* out,
                       int32_t out_dtype, void* workspace, cudaStream_t stream) {
  static_assert(sizeof(S) <= kReduceStateBytes);
  if (p.num_outputs == 0) return cudaSuccess;
  if (how.splits < 1 || how.splits > 65535 || (how.splits > 1 && !workspace)) return cudaErrorInvalidValue;
  const T* x = static_cast<const T*>(in);
  char* o = static_cast<char*>(out);
  S* ws = static_cast<S*>(workspace);
  if (how.block_per_output) {
    const int64_t blocks = p.num_outputs < 65535 * 4 ? p.num_outputs : 65535 * 4;
    const dim3 grid{unsigned(blocks), unsigned(how.splits), 1u};
    reduce_block_kernel<T, S><<<grid, unsigned(how.threads), 0, stream>>>(p, f, how.splits, how.chunk, x, o, out_dtype, ws);
  } else {
    const dim3 grid{grid_for(p.num_outputs, how.threads), unsigned(how.splits), 1u};
    reduce_thread_kernel<T, S><<<grid, unsigned(how.threads), 0, stream>>>(p, f, how.splits, how.chunk, x, o, out_dtype, ws);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess || how.splits == 1) return e;
  reduce_finish_kernel<S><<<grid_for(p.num_outputs * 32), kThreads, 0, stream>>>(p, f, how.splits, ws, o, out_dtype);
  return cudaGetLastError();
}

template <typename T>
cudaError_t reduce_for(ReduceOp op, const ReducePlan& p, const ReduceLaunch& how, const ReduceFinish& f, const void* in,
                       void* out, int32_t out_dtype, void* ws, cudaStream_t stream) {
  using Acc = reduce_acc_t<T>;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return run_reduce<T, ValueState<Acc, ReduceOp::Sum>>(p, how, f, in, out, out_dtype, ws, stream);
    case ReduceOp::Prod: return run_reduce<T, ValueState<Acc, ReduceOp::Prod>>(p, how, f, in, out, out_dtype, ws, stream);
    case ReduceOp::Max: return run_reduce<T, ValueState<Acc, ReduceOp::Max>>(p, how, f, in, out, out_dtype, ws, stream);
    case ReduceOp::Min: return run_reduce<T, ValueState<Acc, ReduceOp::Min>>(p, how, f, in, out, out_dtype, ws, stream);
    case ReduceOp::Var:
      if constexpr (std::is_integral_v<Acc>) return cudaErrorInvalidValue;
      else return run_reduce<T, WelfordState<Acc>>(p, how, f, in, out, out_dtype, ws, stream);
    case ReduceOp::LogSumExp:
      if constexpr (std::is_integral_v<Acc>) return cudaErrorInvalidValue;
      else return run_reduce<T, LogSumExpState<Acc>>(p, how, f, in, out, out_dtype, ws, stream);
    case ReduceOp::ArgMax: return run_reduce<T, ArgState<Acc, false>>(p, how, f, in, out, out_dtype, ws, stream);
    case ReduceOp::ArgMin: return run_reduce<T, ArgState<Acc, true>>(p, how, f, in, out, out_dtype, ws, stream);
  }
  return cudaErrorInvalidValue;
}

// ---------------------------------------------------------------- softmax

// Running (max, sum of exp(x - max)) pairs: BasicSoftmaxStat (nan_math.h), whose max keeps a NaN
// (Note [NaN in CUDA row maxima]; fmaxf dropped it, and a row with a NaN came out finite).
template <typename Acc>
__device__ __forceinline__ void warp_merge(BasicSoftmaxStat<Acc>& st) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Acc m2 = __shfl_xor_sync(0xffffffffu, st.m, o);
    const Acc s2 = __shfl_xor_sync(0xffffffffu, st.s, o);
    st.merge(m2, s2);
  }
}

// The row statistic of a whole block: merged across each warp, then the warps' in order (every
// thread gets the total).
template <typename Acc>
__device__ BasicSoftmaxStat<Acc> block_merge(BasicSoftmaxStat<Acc> st) {
  __shared__ Acc sm[32], ss[32];
  warp_merge(st);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sm[warp] = st.m;
    ss[warp] = st.s;
  }
  __syncthreads();
  BasicSoftmaxStat<Acc> total;
  const int nwarps = int(blockDim.x) >> 5;
  for (int w = 0; w < nwarps; ++w) total.merge(sm[w], ss[w]);
  return total;
}

template <typename T>
__device__ __forceinline__ T softmax_value(bool log, float_acc_t<T> x, const BasicSoftmaxStat<float_acc_t<T>>& st) {
  return from_op<T>(st.value(log, x));
}

// Note [Register-resident softmax rows] (softmax_plan.h): a warp per row, kPer values per lane
// loaded once, kVec elements per load (1: scalar loads, coalesced across the warp). 4 rows per
// 128-thread block.
template <typename T, int kPer, int kVec>
__global__ void softmax_warp_regs_kernel(bool log, const T* in, T* out, int64_t rows, int64_t n) {
  using Acc = float_acc_t<T>;
  using Vec = AlignedVector<T, kVec>;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const T* x = in + row * n;
  T* y = out + row * n;
  Acc v[kPer];
  BasicSoftmaxStat<Acc> st;
#pragma unroll
  for (int c = 0; c < kPer / kVec; ++c) {
    const int64_t j = softmax_element(c * kVec, lane, 32, kVec);
    if (j < n) {  // n is a multiple of kVec: a vector is wholly in or out
      const Vec a = *reinterpret_cast<const Vec*>(x + j);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        v[c * kVec + e] = to_acc(a.v[e]);
        st.add(v[c * kVec + e]);
      }
    }
  }
  warp_merge(st);
#pragma unroll
  for (int c = 0; c < kPer / kVec; ++c) {
    const int64_t j = softmax_element(c * kVec, lane, 32, kVec);
    if (j < n) {
      Vec a;
#pragma unroll
      for (int e = 0; e < kVec; ++e) a.v[e] = softmax_value<T>(log, v[c * kVec + e], st);
      *reinterpret_cast<Vec*>(y + j) = a;
    }
  }
}

// A 512-thread block per row of up to 512 * kPer elements, each value loaded once.
template <typename T, int kPer>
__global__ void __launch_bounds__(kSoftmaxBlockThreads) softmax_block_regs_kernel(bool log, const T* in, T* out, int64_t n) {
  using Acc = float_acc_t<T>;
  const T* x = in + int64_t(blockIdx.x) * n;
  T* y = out + int64_t(blockIdx.x) * n;
  Acc v[kPer];
  BasicSoftmaxStat<Acc> st;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int64_t j = softmax_element(k, threadIdx.x, kSoftmaxBlockThreads, 1);
    if (j < n) {
      v[k] = to_acc(x[j]);
      st.add(v[k]);
    }
  }
  const BasicSoftmaxStat<Acc> total = block_merge(st);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int64_t j = softmax_element(k, threadIdx.x, kSoftmaxBlockThreads, 1);
    if (j < n) y[j] = softmax_value<T>(log, v[k], total);
  }
}

template <typename T, int kPer>
void launch_softmax_warp_regs(bool log, int vec, const T* in, T* out, int64_t rows, int64_t n, unsigned blocks,
                              cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if constexpr (kPer >= kVec) {
    if (vec == kVec) {
      softmax_warp_regs_kernel<T, kPer, kVec><<<blocks, 128, 0, stream>>>(log, in, out, rows, n);
      return;
    }
  }
  softmax_warp_regs_kernel<T, kPer, 1><<<blocks, 128, 0, stream>>>(log, in, out, rows, n);
}

// One block per row (long rows): statistics, then outputs, reading the row twice.
template <typename T>
__global__ void softmax_block_kernel(bool log, const T* in, T* out, int64_t n) {
  using Acc = float_acc_t<T>;
  const T* x = in + int64_t(blockIdx.x) * n;
  T* y = out + int64_t(blockIdx.x) * n;
  BasicSoftmaxStat<Acc> st;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) st.add(to_acc(x[j]));
  const BasicSoftmaxStat<Acc> total = block_merge(st);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[j] = softmax_value<T>(log, to_acc(x[j]), total);
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
    BasicSoftmaxStat<float_acc_t<T>> st;
    for (int64_t j = 0; j < dim; ++j) st.add(to_acc(x[j * inner]));
    for (int64_t j = 0; j < dim; ++j) y[j * inner] = softmax_value<T>(log, to_acc(x[j * inner]), st);
  }
}

template <typename T>
cudaError_t run_softmax(bool log, const void* in_v, void* out_v, int64_t outer, int64_t dim, int64_t inner,
                        cudaStream_t stream) {
  const T* in = static_cast<const T*>(in_v);
  T* out = static_cast<T*>(out_v);
  if (outer * dim * inner == 0) return cudaSuccess;
  const bool aligned16 = reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const SoftmaxLaunchPlan plan = plan_softmax(dim, inner, int(sizeof(T)), aligned16);
  switch (plan.kind) {
    case SoftmaxKind::WarpRegisters: {
      const int64_t blocks = (outer + 3) / 4;
      if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
      const unsigned b = unsigned(blocks);
      switch (plan.per_thread) {
        case 1: launch_softmax_warp_regs<T, 1>(log, plan.vec, in, out, outer, dim, b, stream); break;
        case 2: launch_softmax_warp_regs<T, 2>(log, plan.vec, in, out, outer, dim, b, stream); break;
        case 4: launch_softmax_warp_regs<T, 4>(log, plan.vec, in, out, outer, dim, b, stream); break;
        case 8: launch_softmax_warp_regs<T, 8>(log, plan.vec, in, out, outer, dim, b, stream); break;
        case 16: launch_softmax_warp_regs<T, 16>(log, plan.vec, in, out, outer, dim, b, stream); break;
        default: launch_softmax_warp_regs<T, 32>(log, plan.vec, in, out, outer, dim, b, stream); break;
      }
      break;
    }
    case SoftmaxKind::BlockRegisters:
      if (outer > 0x7fffffff) return cudaErrorInvalidValue;
      switch (plan.per_thread) {
        case 1:
        case 2:
        case 4: softmax_block_regs_kernel<T, 4><<<unsigned(outer), kSoftmaxBlockThreads, 0, stream>>>(log, in, out, dim); break;
        case 8: softmax_block_regs_kernel<T, 8><<<unsigned(outer), kSoftmaxBlockThreads, 0, stream>>>(log, in, out, dim); break;
        default: softmax_block_regs_kernel<T, 16><<<unsigned(outer), kSoftmaxBlockThreads, 0, stream>>>(log, in, out, dim); break;
      }
      break;
    case SoftmaxKind::BlockTwoPass:
      if (outer > 0x7fffffff) return cudaErrorInvalidValue;
      softmax_block_kernel<T><<<unsigned(outer), kSoftmaxBlockThreads, 0, stream>>>(log, in, out, dim);
      break;
    case SoftmaxKind::Column:
      softmax_column_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(log, in, out, outer, dim, inner);
      break;
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------- layer_norm

// Welford statistics per row (WelfordState, reduce_state.h), merged across the warp and then the
// block's warps in order.
template <typename T>
__global__ void layer_norm_kernel(const T* in, const T* weight, const T* bias, T* out, int64_t n, float_acc_t<T> eps) {
  using Acc = float_acc_t<T>;
  __shared__ WelfordState<Acc> partial[32];
  const T* x = in + int64_t(blockIdx.x) * n;
  T* y = out + int64_t(blockIdx.x) * n;
  WelfordState<Acc> w = WelfordState<Acc>::identity();
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) w.add(to_acc(x[j]), j);
  w = warp_reduce(w);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = w;
  __syncthreads();
  WelfordState<Acc> total = WelfordState<Acc>::identity();
  const int nwarps = int(blockDim.x) >> 5;
  for (int i = 0; i < nwarps; ++i) total.merge(partial[i]);
  const Acc rstd = acc_rsqrt(total.variance(0.0) + eps);  // the biased variance
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    Acc v = (to_acc(x[j]) - total.mean) * rstd;
    if (weight) v *= to_acc(weight[j]);
    if (bias) v += to_acc(bias[j]);
    y[j] = from_op<T>(v);
  }
}

// rms_norm: y = x / sqrt(mean(x^2) + eps) * weight per row, the sum of squares in fp32 (double
// for float64; a NaN anywhere in the row makes the row NaN through the sum), as the CPU kernel
// computes it.
template <typename T>
__global__ void rms_norm_kernel(const T* in, const T* weight, T* out, int64_t n, float_acc_t<T> eps) {
  using Acc = float_acc_t<T>;
  __shared__ Acc partial[32];
  const T* x = in + int64_t(blockIdx.x) * n;
  T* y = out + int64_t(blockIdx.x) * n;
  Acc q = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Acc v = to_acc(x[j]);
    q = acc_fma(v, v, q);
  }
  q = warp_sum(q);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = q;
  __syncthreads();
  Acc total = 0;
  const int nwarps = int(blockDim.x) >> 5;
  for (int i = 0; i < nwarps; ++i) total += partial[i];
  const Acc r = Acc(1) / acc_sqrt(total / Acc(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    Acc v = to_acc(x[j]) * r;
    if (weight) v *= to_acc(weight[j]);
    y[j] = from_op<T>(v);
  }
}

// ---------------------------------------------------------------- cumsum

template <typename T>
__global__ void cumsum_kernel(const T* in, T* out, int64_t outer, int64_t n, int64_t inner) {
  using Acc = reduce_acc_t<T>;
  const int64_t lines = outer * inner;
  const int64_t grid = int64_t(gridDim.x) * blockDim.x;
  for (int64_t line = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; line < lines; line += grid) {
    const int64_t base = (line / inner) * n * inner + line % inner;
    Acc run = Acc(0);
    for (int64_t j = 0; j < n; ++j) {
      const Acc v = load_reduce(in[base + j * inner]);
      if constexpr (std::is_integral_v<Acc>) run = Acc(uint64_t(run) + uint64_t(v));
      else run += v;
      out[base + j * inner] = from_op<T>(opmath_t<T>(run));
    }
  }
}

}  // namespace

cudaError_t launch_cumsum(const void* in, void* out, int32_t dtype, int64_t outer, int64_t n, int64_t inner,
                          cudaStream_t stream) {
  if (outer * n * inner == 0) return cudaSuccess;
  TESSERA_CUDA_DISPATCH_ALL(dtype, {
    cumsum_kernel<scalar_t><<<grid_for(outer * inner), kThreads, 0, stream>>>(static_cast<const scalar_t*>(in),
                                                                              static_cast<scalar_t*>(out), outer, n, inner);
    return cudaGetLastError();
  })
  return cudaErrorInvalidValue;
}

cudaError_t launch_reduce(ReduceOp op, const ReducePlan& plan, const ReduceLaunch& how, const void* in,
                          int32_t in_dtype, void* out, int32_t out_dtype, double correction, void* workspace,
                          cudaStream_t stream) {
  ReduceFinish f;
  f.mean = op == ReduceOp::Mean;
  f.count = plan.reduce_size;
  f.correction = correction;
  if (in_dtype == kDtBool) return reduce_for<bool>(op, plan, how, f, in, out, out_dtype, workspace, stream);
  TESSERA_CUDA_DISPATCH_ALL(in_dtype,
                            return reduce_for<scalar_t>(op, plan, how, f, in, out, out_dtype, workspace, stream))
  return cudaErrorInvalidValue;
}

cudaError_t launch_softmax(bool log, const void* in, void* out, int32_t dtype, int64_t outer, int64_t dim,
                           int64_t inner, cudaStream_t stream) {
  TESSERA_CUDA_DISPATCH_FLOAT_AND_F64(dtype, return run_softmax<scalar_t>(log, in, out, outer, dim, inner, stream))
  return cudaErrorInvalidValue;
}

cudaError_t launch_layer_norm(const void* in, const void* weight, const void* bias, void* out, int32_t dtype,
                              int64_t rows, int64_t n, double eps, bool rms, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  const int threads = n >= 4096 ? 512 : (n >= 512 ? 256 : 64);
  TESSERA_CUDA_DISPATCH_FLOAT_AND_F64(dtype, {
    using Acc = float_acc_t<scalar_t>;
    if (rms)
      rms_norm_kernel<scalar_t><<<unsigned(rows), threads, 0, stream>>>(
          static_cast<const scalar_t*>(in), static_cast<const scalar_t*>(weight), static_cast<scalar_t*>(out), n,
          Acc(eps));
    else
      layer_norm_kernel<scalar_t><<<unsigned(rows), threads, 0, stream>>>(
          static_cast<const scalar_t*>(in), static_cast<const scalar_t*>(weight), static_cast<const scalar_t*>(bias),
          static_cast<scalar_t*>(out), n, Acc(eps));
    return cudaGetLastError();
  })
  return cudaErrorInvalidValue;
}

}  // namespace tessera::cuda
