// Flash attention (forward) for f16 / bf16, head dims 64 and 128: a tensor-core kernel (the default,
// Note [CUDA flash attention, tensor cores] below) and a CUDA-core kernel (TESSERA_CUDA_FLASH_SIMT=1).
// Note [CUDA flash attention]
// A block owns kRows query rows of one (batch, head) and walks the keys in tiles of kCols: the K and
// V tiles are staged in shared memory (as fp32), each query row keeps its running max, running sum
// and output accumulator in registers (online softmax, all fp32), so the Lq x Lk score matrix is
// never stored. Four adjacent threads share a query row; each owns a quarter of the head dim as
// float4 chunks (chunk k of part p covers columns (4k + p) * 4 .. +3), so the four threads read one
// contiguous 64-byte span of a shared K/V row per step, and their partial dot products are summed
// with two warp shuffles. Causal masking is top-left aligned (key j is visible to query i when
// j <= i), like PyTorch's is_causal; key tiles entirely above the diagonal are skipped. An explicit
// mask is bool (true = attend, applied by adding -inf) or additive. A row whose keys are all masked
// gives 0 @ V like PyTorch (0, or NaN in a column holding a NaN or infinite value), and a NaN score
// makes its row NaN: Note [Fully masked attention rows] in plugins/cpu/nn/attention.cpp, which
// both kernels here follow. Row maxima propagate NaN (nan_max: Note [NaN in CUDA row maxima]; fmaxf
// would drop it, and a row of NaN scores would then look fully masked).
// This kernel's dot products run on the CUDA cores (FMA); the tensor-core kernel shares its semantics.
#include <mma.h>

#include <cmath>

#include "cuda_common.cuh"
#include "nan_math.h"
#include "tensor_iter.h"

namespace tessera::cuda {
namespace {

constexpr int kRows = 64;                 // query rows per block
constexpr int kParts = 4;                 // threads per query row
constexpr int kAttnThreads = kRows * kParts;
constexpr int kCols = 32;                 // keys per tile

__device__ __forceinline__ float mask_value(const void* mask, int32_t dtype, int64_t off) {
  switch (dtype) {
    case kDtBool: return static_cast<const uint8_t*>(mask)[off] ? 0.0f : -INFINITY;
    case kDtF16: return __half2float(static_cast<const __half*>(mask)[off]);
    case kDtBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(mask)[off]);
    default: return static_cast<const float*>(mask)[off];
  }
}

// Two blocks per SM: without the bound nvcc used 147 registers per thread at head dim 128, which
// leaves room for a single 256-thread block per SM.
template <typename T, int kDim>
__global__ void __launch_bounds__(kAttnThreads, 2) flash_attention_kernel(AttentionParams p) {
  constexpr int kChunks = kDim / (4 * kParts);  // float4 chunks per thread
  __shared__ float4 k_tile[kCols][kDim / 4];
  __shared__ float4 v_tile[kCols][kDim / 4];

  const int64_t bh = int64_t(blockIdx.x) / p.q_blocks;
  const int64_t b = bh / p.heads, h = bh % p.heads;
  const int64_t q0 = (int64_t(blockIdx.x) % p.q_blocks) * kRows;
  const int local_row = threadIdx.x / kParts;
  const int part = threadIdx.x % kParts;
  const int64_t row = q0 + local_row;
  const bool row_valid = row < p.len_q;

  const T* q = static_cast<const T*>(p.q) + b * p.q_strides[0] + h * p.q_strides[1];
  const T* k = static_cast<const T*>(p.k) + b * p.k_strides[0] + h * p.k_strides[1];
  const T* v = static_cast<const T*>(p.v) + b * p.v_strides[0] + h * p.v_strides[1];

  float4 q_reg[kChunks], acc[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = (c * kParts + part) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row_valid) {
      const T* qr = q + row * p.q_strides[2] + col;
      x = make_float4(to_float(qr[0]), to_float(qr[1]), to_float(qr[2]), to_float(qr[3]));
    }
    q_reg[c] = x;
    acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m = -INFINITY, l = 0.0f;

  int64_t key_end = p.len_k;
  if (p.causal) {
    const int64_t last_row = q0 + kRows - 1;
    key_end = last_row + 1 < key_end ? last_row + 1 : key_end;
  }
  const char* mask_base = nullptr;
  if (p.mask) {
    mask_base = static_cast<const char*>(p.mask);
  }

  for (int64_t k0 = 0; k0 < key_end; k0 += kCols) {
    // Stage the K and V tiles (fp32) in shared memory.
    for (int idx = threadIdx.x; idx < kCols * (kDim / 4); idx += kAttnThreads) {
      const int r = idx / (kDim / 4), c4 = idx % (kDim / 4);
      const int64_t key = k0 + r;
      float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
      if (key < p.len_k) {
        const T* kr = k + key * p.k_strides[2] + c4 * 4;
        const T* vr = v + key * p.v_strides[2] + c4 * 4;
        kx = make_float4(to_float(kr[0]), to_float(kr[1]), to_float(kr[2]), to_float(kr[3]));
        vx = make_float4(to_float(vr[0]), to_float(vr[1]), to_float(vr[2]), to_float(vr[3]));
      }
      k_tile[r][c4] = kx;
      v_tile[r][c4] = vx;
    }
    __syncthreads();

    float s[kCols];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      float partial = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const float4 kk = k_tile[j][c * kParts + part];
        partial += q_reg[c].x * kk.x + q_reg[c].y * kk.y + q_reg[c].z * kk.z + q_reg[c].w * kk.w;
      }
      partial += __shfl_xor_sync(0xffffffffu, partial, 1);
      partial += __shfl_xor_sync(0xffffffffu, partial, 2);
      const int64_t key = k0 + j;
      float score = partial * p.scale;
      if (key >= p.len_k || (p.causal && key > row)) {
        score = -INFINITY;
      } else if (mask_base && row_valid) {
        const int64_t off = b * p.mask_strides[0] + h * p.mask_strides[1] + row * p.mask_strides[2] + key * p.mask_strides[3];
        score += mask_value(mask_base, p.mask_dtype, off);
      }
      s[j] = score;
      tile_max = nan_max(tile_max, score);
    }

    const float m_new = nan_max(m, tile_max);
    if (m_new != -INFINITY) {
      const float correction = expf(m - m_new);  // 0 when m is -inf
      l *= correction;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        acc[c].x *= correction;
        acc[c].y *= correction;
        acc[c].z *= correction;
        acc[c].w *= correction;
      }
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const float pj = expf(s[j] - m_new);
        l += pj;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const float4 vv = v_tile[j][c * kParts + part];
          acc[c].x += pj * vv.x;
          acc[c].y += pj * vv.y;
          acc[c].z += pj * vv.z;
          acc[c].w += pj * vv.w;
        }
      }
      m = m_new;
    } else {
      // Every key so far masked: P = 0, and O += 0 * V keeps a NaN or infinite value's NaN.
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const float4 vv = v_tile[j][c * kParts + part];
          acc[c].x += 0.0f * vv.x;
          acc[c].y += 0.0f * vv.y;
          acc[c].z += 0.0f * vv.z;
          acc[c].w += 0.0f * vv.w;
        }
      }
    }
    __syncthreads();
  }

  if (!row_valid) return;
  // m == -inf: a fully masked row, O = 0 @ V. Otherwise l >= 1, or NaN.
  const float inv = m == -INFINITY ? 0.0f : 1.0f / l;
  T* o = static_cast<T*>(p.out) + b * p.out_strides[0] + h * p.out_strides[1] + row * p.out_strides[2];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int col = (c * kParts + part) * 4;
    o[col + 0] = from_op<T>(acc[c].x * inv);
    o[col + 1] = from_op<T>(acc[c].y * inv);
    o[col + 2] = from_op<T>(acc[c].z * inv);
    o[col + 3] = from_op<T>(acc[c].w * inv);
  }
}

// ---------------------------------------------------------------- tensor-core variant
// Note [CUDA flash attention, tensor cores]: the same algorithm with the two products on the tensor
// cores (WMMA 16x16x16, fp32 accumulation). A block of 4 warps owns 64 query rows (16 per warp); Q,
// the K and V tiles (32 keys), and per warp its scores S (fp32), probabilities P (the input dtype)
// and output accumulator O (fp32) live in shared memory. Per key tile: S = Q K^T (WMMA), the online
// softmax update on S in fp32 (two lanes per row: running max, rescaled sum, correction factor),
// O *= correction, O += P V (WMMA). Row padding keeps every fragment pointer 32-byte aligned.
constexpr int kWarps = 4;
constexpr int kTcRows = 16 * kWarps;
constexpr int kTcCols = 32;

template <typename T, int kDim>
struct TensorCoreSmem {
  alignas(32) T q[kTcRows][kDim + 8];
  alignas(32) T k[kTcCols][kDim + 8];
  alignas(32) T v[kTcCols][kDim + 8];
  alignas(32) float s[kWarps][16][kTcCols + 4];
  alignas(32) T p[kWarps][16][kTcCols + 8];
  alignas(32) float o[kWarps][16][kDim + 4];
  float m[kTcRows], l[kTcRows];
};

template <typename T, int kDim>
__global__ void __launch_bounds__(kWarps * 32) flash_attention_tc_kernel(AttentionParams p) {
  using namespace nvcuda;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<TensorCoreSmem<T, kDim>*>(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t bh = int64_t(blockIdx.x) / p.q_blocks;
  const int64_t b = bh / p.heads, h = bh % p.heads;
  const int64_t q0 = (int64_t(blockIdx.x) % p.q_blocks) * kTcRows;
  const T* q = static_cast<const T*>(p.q) + b * p.q_strides[0] + h * p.q_strides[1];
  const T* k = static_cast<const T*>(p.k) + b * p.k_strides[0] + h * p.k_strides[1];
  const T* v = static_cast<const T*>(p.v) + b * p.v_strides[0] + h * p.v_strides[1];
  const T zero = from_op<T>(0.0f);

  for (int idx = tid; idx < kTcRows * kDim; idx += kWarps * 32) {
    const int r = idx / kDim, c = idx % kDim;
    const int64_t row = q0 + r;
    sm.q[r][c] = row < p.len_q ? q[row * p.q_strides[2] + c] : zero;
  }
  for (int idx = tid; idx < kWarps * 16 * (kDim + 4); idx += kWarps * 32) (&sm.o[0][0][0])[idx] = 0.0f;
  if (tid < kTcRows) {
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.0f;
  }

  int64_t key_end = p.len_k;
  if (p.causal) key_end = q0 + kTcRows < key_end ? q0 + kTcRows : key_end;

  const int r = lane >> 1;              // this lane's row within the warp's 16
  const int half_col = (lane & 1) * 16;  // its half of the 32 key columns
  const int local_row = warp * 16 + r;
  const int64_t row = q0 + local_row;

  for (int64_t k0 = 0; k0 < key_end; k0 += kTcCols) {
    __syncthreads();  // the previous tile is no longer read (and Q/O/m/l are initialised)
    for (int idx = tid; idx < kTcCols * kDim; idx += kWarps * 32) {
      const int kr = idx / kDim, c = idx % kDim;
      const int64_t key = k0 + kr;
      sm.k[kr][c] = key < p.len_k ? k[key * p.k_strides[2] + c] : zero;
      sm.v[kr][c] = key < p.len_k ? v[key * p.v_strides[2] + c] : zero;
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows.
    for (int j = 0; j < kTcCols / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int c = 0; c < kDim / 16; ++c) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, &sm.q[warp * 16][c * 16], kDim + 8);
        wmma::load_matrix_sync(fb, &sm.k[j * 16][c * 16], kDim + 8);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(&sm.s[warp][0][j * 16], acc, kTcCols + 4, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax update of this lane's 16 scores of row `row`. Lane (r, half) visits its 16
    // columns rotated by r / 4: rows are 36 floats apart (4 banks), so without the rotation lanes
    // r, r + 4 (other half), r + 8, ... hit the same bank (a 4-way conflict).
    const int rot = r >> 2;
    float sc[16];
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int c = (i + rot) & 15;
      const int64_t key = k0 + half_col + c;
      float x = sm.s[warp][r][half_col + c] * p.scale;
      if (key >= p.len_k || (p.causal && key > row)) {
        x = -INFINITY;
      } else if (p.mask && row < p.len_q) {
        const int64_t off = b * p.mask_strides[0] + h * p.mask_strides[1] + row * p.mask_strides[2] + key * p.mask_strides[3];
        x += mask_value(p.mask, p.mask_dtype, off);
      }
      sc[i] = x;
      tile_max = nan_max(tile_max, x);
    }
    tile_max = nan_max(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_old = sm.m[local_row];
    const float m_new = nan_max(m_old, tile_max);
    const bool live = m_new != -INFINITY;
    const float correction = live ? expf(m_old - m_new) : 1.0f;
    float psum = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const float pc = live ? expf(sc[i] - m_new) : 0.0f;
      psum += pc;
      sm.p[warp][r][half_col + ((i + rot) & 15)] = from_op<T>(pc);
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    __syncwarp();  // both lanes of the row have read m_old
    if ((lane & 1) == 0) {
      sm.l[local_row] = sm.l[local_row] * correction + psum;
      if (live) sm.m[local_row] = m_new;
    }
    // O *= correction, a row at a time across the warp (consecutive lanes, consecutive banks).
    for (int rr = 0; rr < 16; ++rr) {
      const float cr = __shfl_sync(0xffffffffu, correction, 2 * rr);
      for (int d = lane; d < kDim; d += 32) sm.o[warp][rr][d] *= cr;
    }
    __syncwarp();

    // O += P V.
    for (int n = 0; n < kDim / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, &sm.o[warp][0][n * 16], kDim + 4, wmma::mem_row_major);
      for (int kk = 0; kk < kTcCols / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, &sm.p[warp][0][kk * 16], kTcCols + 8);
        wmma::load_matrix_sync(fb, &sm.v[kk * 16][n * 16], kDim + 8);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(&sm.o[warp][0][n * 16], acc, kDim + 4, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncthreads();

  // A row at a time across the warp: conflict-free shared reads and coalesced global writes.
  for (int rr = 0; rr < 16; ++rr) {
    const int64_t out_row = q0 + warp * 16 + rr;
    if (out_row >= p.len_q) break;
    // m == -inf: a fully masked row, O = 0 @ V (P was 0). Otherwise l >= 1, or NaN.
    const float inv = sm.m[warp * 16 + rr] == -INFINITY ? 0.0f : 1.0f / sm.l[warp * 16 + rr];
    T* o = static_cast<T*>(p.out) + b * p.out_strides[0] + h * p.out_strides[1] + out_row * p.out_strides[2];
    for (int d = lane; d < kDim; d += 32) o[d] = from_op<T>(sm.o[warp][rr][d] * inv);
  }
}

template <typename T, int kDim>
cudaError_t launch_tc(const AttentionParams& p, unsigned grid, cudaStream_t stream) {
  const size_t bytes = sizeof(TensorCoreSmem<T, kDim>);
  if (cudaError_t e = cudaFuncSetAttribute(flash_attention_tc_kernel<T, kDim>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
      e != cudaSuccess)
    return e;
  flash_attention_tc_kernel<T, kDim><<<grid, kWarps * 32, bytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t run_attention(const AttentionParams& p, cudaStream_t stream) {
  int64_t q_blocks = 0;
  uint32_t grid = 0;
  if (!plan_attention_grid(p.batch * p.heads, p.len_q, attention_rows_per_block(p.tensor_cores), &q_blocks, &grid) ||
      q_blocks != p.q_blocks || p.len_k <= 0)
    return cudaErrorInvalidValue;  // the host checks these before anything is queued
  if (grid == 0) return cudaSuccess;
  if (p.tensor_cores) return p.head_dim == 64 ? launch_tc<T, 64>(p, grid, stream) : launch_tc<T, 128>(p, grid, stream);
  if (p.head_dim == 64) {
    flash_attention_kernel<T, 64><<<grid, kAttnThreads, 0, stream>>>(p);
  } else {
    flash_attention_kernel<T, 128><<<grid, kAttnThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

// ---------------------------------------------------------------- every other case
// Note [CUDA attention, a warp per query row]
// float32, float64 (in double), and float16 / bfloat16 head dims the flash kernels do not take: a
// warp owns one query row; lane l holds the query's and the output accumulator's columns l, l + 32,
// ... (up to kRowChunks * 32 of each, so E and Ev <= 256), and the keys are visited one at a time:
// the dot product is summed across the warp by five xor shuffles, then the same online softmax as
// the flash kernels (Note [CUDA flash attention]: nan_max row maxima, 0 @ V for a fully masked row,
// NaN for a NaN or +inf score), in Acc = float, or double for float64. Batch and head dims may
// broadcast (stride 0). A coverage kernel: every key costs five shuffles and an exp per row, with no
// tiling or tensor cores.
constexpr int kRowChunks = 8;
constexpr int kRowWarps = 4;

template <typename Acc>
__device__ __forceinline__ Acc mask_value_acc(const void* mask, int32_t dtype, int64_t off) {
  if (dtype == kDtF64) return Acc(static_cast<const double*>(mask)[off]);
  return Acc(mask_value(mask, dtype, off));
}

template <typename T>
__global__ void attention_row_kernel(AttentionParams p) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int lane = threadIdx.x & 31;
  const int64_t rows = p.batch * p.heads * p.len_q;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  const Acc scale = Acc(p.scale_exact);
  for (int64_t w = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); w < rows; w += warps) {
    const int64_t row = w % p.len_q, bh = w / p.len_q;
    const int64_t b = bh / p.heads, h = bh % p.heads;
    const T* q = static_cast<const T*>(p.q) + b * p.q_strides[0] + h * p.q_strides[1] + row * p.q_strides[2];
    const T* k = static_cast<const T*>(p.k) + b * p.k_strides[0] + h * p.k_strides[1];
    const T* v = static_cast<const T*>(p.v) + b * p.v_strides[0] + h * p.v_strides[1];
    Acc qr[kRowChunks], acc[kRowChunks];
#pragma unroll
    for (int c = 0; c < kRowChunks; ++c) {
      const int64_t d = c * 32 + lane;
      qr[c] = d < p.head_dim ? Acc(to_op(q[d])) : Acc(0);
      acc[c] = Acc(0);
    }
    Acc m = Acc(-INFINITY), l = Acc(0);
    const int64_t key_end = p.causal ? (row + 1 < p.len_k ? row + 1 : p.len_k) : p.len_k;
    for (int64_t j = 0; j < key_end; ++j) {
      const T* kj = k + j * p.k_strides[2];
      const T* vj = v + j * p.v_strides[2];
      Acc dot = Acc(0);
#pragma unroll
      for (int c = 0; c < kRowChunks; ++c) {
        const int64_t d = c * 32 + lane;
        if (d < p.head_dim) dot += qr[c] * Acc(to_op(kj[d]));
      }
      dot = warp_sum(dot);
      Acc score = dot * scale;
      if (p.mask)
        score += mask_value_acc<Acc>(p.mask, p.mask_dtype,
                                     b * p.mask_strides[0] + h * p.mask_strides[1] + row * p.mask_strides[2] +
                                         j * p.mask_strides[3]);
      const Acc m_new = nan_max(m, score);
      if (m_new == Acc(-INFINITY)) {
        // Every key so far masked: P = 0, and O += 0 * V keeps a NaN or infinite value's NaN.
#pragma unroll
        for (int c = 0; c < kRowChunks; ++c) {
          const int64_t d = c * 32 + lane;
          if (d < p.value_dim) acc[c] += Acc(0) * Acc(to_op(vj[d]));
        }
        continue;
      }
      const Acc correction = acc_exp(m - m_new), pj = acc_exp(score - m_new);
      l = l * correction + pj;
#pragma unroll
      for (int c = 0; c < kRowChunks; ++c) {
        const int64_t d = c * 32 + lane;
        if (d < p.value_dim) acc[c] = acc[c] * correction + pj * Acc(to_op(vj[d]));
      }
      m = m_new;
    }
    const Acc inv = m == Acc(-INFINITY) ? Acc(0) : Acc(1) / l;
    T* o = static_cast<T*>(p.out) + b * p.out_strides[0] + h * p.out_strides[1] + row * p.out_strides[2];
#pragma unroll
    for (int c = 0; c < kRowChunks; ++c) {
      const int64_t d = c * 32 + lane;
      if (d < p.value_dim) o[d] = from_op<T>(opmath_t<T>(acc[c] * inv));
    }
  }
}

template <typename T>
cudaError_t run_attention_rows(const AttentionParams& p, cudaStream_t stream) {
  const int64_t rows = p.batch * p.heads * p.len_q;
  if (rows == 0) return cudaSuccess;
  int64_t blocks = (rows + kRowWarps - 1) / kRowWarps;
  if (blocks > 65535 * 64) blocks = 65535 * 64;
  attention_row_kernel<T><<<unsigned(blocks), kRowWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

bool attention_rows_supported(int32_t dtype, int64_t head_dim, int64_t value_dim) {
  return dtype >= kDtF16 && dtype <= kDtF64 && head_dim <= 32 * kRowChunks && value_dim <= 32 * kRowChunks;
}

cudaError_t launch_attention_rows(const AttentionParams& p, cudaStream_t stream) {
  if (!attention_rows_supported(p.dtype, p.head_dim, p.value_dim) || p.len_k <= 0) return cudaErrorInvalidValue;
  switch (p.dtype) {
    case kDtF16: return run_attention_rows<__half>(p, stream);
    case kDtBF16: return run_attention_rows<__nv_bfloat16>(p, stream);
    case kDtF32: return run_attention_rows<float>(p, stream);
    default: return run_attention_rows<double>(p, stream);
  }
}

int attention_rows_per_block(bool tensor_cores) { return tensor_cores ? kTcRows : kRows; }

bool attention_supported(int32_t dtype, int64_t head_dim) {
  return (dtype == kDtF16 || dtype == kDtBF16) && (head_dim == 64 || head_dim == 128);
}

cudaError_t launch_attention(const AttentionParams& p, cudaStream_t stream) {
  if (!attention_supported(p.dtype, p.head_dim)) return cudaErrorInvalidValue;
  if (p.dtype == kDtF16) return run_attention<__half>(p, stream);
  return run_attention<__nv_bfloat16>(p, stream);
}

}  // namespace tessera::cuda
