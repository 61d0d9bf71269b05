// Two kernels of 2:4 semi-structured linear:
// - f32 (CUDA cores): one warp per output row; lanes walk the row's groups (two kept values and a
//   nibble of indices each) of the canonical form, gather the matching x elements of up to kBatch
//   batch rows and accumulate in f32; a warp shuffle reduction finishes each dot product.
// - f16 / bf16 (tensor cores): mma.sp m16n8k32 over the layout of Note [CUDA mma.sp layout],
//   y^T = W x^T with W in the sparse A position, f32 accumulation.
#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sparse_linear.cuh"

namespace tessera::sparse_cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kBatch = 8;

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ inline void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <typename T>
__global__ void linear_kernel(const T* values, const uint8_t* indices, int64_t rows, int64_t cols, const T* x,
                              int64_t batch, const T* bias, T* y, Strides st) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t groups = (cols + 3) / 4, index_row = (groups + 1) / 2;
  const T* v = values + row * 2 * groups;
  const uint8_t* idx = indices + row * index_row;
  for (int64_t b0 = 0; b0 < batch; b0 += kBatch) {
    const int nb = batch - b0 < kBatch ? int(batch - b0) : kBatch;
    float acc[kBatch] = {};
    for (int64_t g = lane; g < groups; g += 32) {
      const unsigned nibble = (idx[g / 2] >> (4 * (g % 2))) & 0xfu;
      const int64_t c0 = 4 * g + (nibble & 3u), c1 = 4 * g + ((nibble >> 2) & 3u);
      const float w0 = load(v, 2 * g), w1 = load(v, 2 * g + 1);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (b >= nb) break;
        const T* xb = x + (b0 + b) * st.x_n;
        if (c0 < cols) acc[b] += w0 * load(xb, c0 * st.x_k);
        if (c1 < cols) acc[b] += w1 * load(xb, c1 * st.x_k);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      float s = acc[b];
      for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
      if (lane == 0 && b < nb) store(y, (b0 + b) * st.y_n + row * st.y_r, s + (bias ? load(bias, row) : 0.f));
    }
  }
}

template <typename T>
cudaError_t launch(const void* values, const uint8_t* indices, int64_t rows, int64_t cols, const void* x,
                   int64_t batch, const void* bias, void* y, cudaStream_t stream, const Strides& st) {
  if (rows == 0 || batch == 0) return cudaSuccess;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  linear_kernel<T><<<unsigned(blocks), 32 * kWarpsPerBlock, 0, stream>>>(
      static_cast<const T*>(values), indices, rows, cols, static_cast<const T*>(x), batch,
      static_cast<const T*>(bias), static_cast<T*>(y), st);
  return cudaGetLastError();
}

Strides strides_or_contiguous(const Strides* st, int64_t rows, int64_t cols) {
  return st ? *st : Strides{cols, 1, rows, 1};
}

// Note [CUDA mma.sp tiles]
// A block owns kMmaRowTiles tiles of 16 rows and NT tiles of 8 batch rows; its kMmaWarps warps
// split the tiles of 32 columns among them (warp w takes w, w + kMmaWarps, ...), so that even a
// small batch puts enough warps in flight to stream the weight, and add their partial sums
// through shared memory at the end. Per tile of 32 columns a lane loads its 16 bytes of values and
// its metadata word of each row tile (coalesced: the layout stores a tile lane after lane) and, for
// each batch tile, the four registers of B = x^T the PTX ISA assigns it (rows 2t, 2t+1, +8, +16,
// +24 of the k slice, column g: two consecutive elements of one row of x each), then issues
// kMmaRowTiles x NT mma.sp. Columns past `cols` and batch rows past `batch` read as zero; rows past
// `rows` are not stored. NT is 1, 2 or 4 by batch, so a small batch does not pay for empty tiles.
constexpr int kMmaWarps = 8;
constexpr int kMmaRowTiles = 2;

template <typename T>
struct MmaOp;
template <>
struct MmaOp<__half> {
  __device__ static void run(float (&d)[4], const uint4& a, const uint32_t (&b)[4], uint32_t meta) {
    asm volatile(
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0x0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(meta));
  }
};
template <>
struct MmaOp<__nv_bfloat16> {
  __device__ static void run(float (&d)[4], const uint4& a, const uint32_t (&b)[4], uint32_t meta) {
    asm volatile(
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0x0;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(meta));
  }
};

// Elements k and k + 1 of x row n (k even), zero past the batch or the columns.
template <typename T>
__device__ inline uint32_t load_pair(const T* x, int64_t batch, int64_t cols, const Strides& st, bool aligned,
                                     int64_t n, int64_t k) {
  if (n >= batch) return 0;
  const uint16_t* row = reinterpret_cast<const uint16_t*>(x) + n * st.x_n;
  if (aligned) return k < cols ? __ldg(reinterpret_cast<const uint32_t*>(row + k)) : 0u;
  const uint32_t lo = k < cols ? __ldg(row + k * st.x_k) : 0u, hi = k + 1 < cols ? __ldg(row + (k + 1) * st.x_k) : 0u;
  return lo | hi << 16;
}

template <typename T, int NT>
__global__ void __launch_bounds__(32 * kMmaWarps)
    mma_linear_kernel(const uint4* values, const uint32_t* meta, int64_t row_tiles, int64_t col_tiles, int64_t rows,
                      int64_t cols, const T* x, int64_t batch, Strides st, bool aligned, const T* bias, T* y) {
  constexpr int kAcc = kMmaRowTiles * NT * 4;
  __shared__ float partial[kMmaWarps - 1][kAcc][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n0 = int64_t(blockIdx.x) * NT * 8;
  // Row blocks past the grid's y limit (65535) are taken by the same blocks in turn.
  for (int64_t rt0 = int64_t(blockIdx.y) * kMmaRowTiles; rt0 < row_tiles; rt0 += int64_t(gridDim.y) * kMmaRowTiles) {
    float acc[kMmaRowTiles][NT][4] = {};
    for (int64_t ct = warp; ct < col_tiles; ct += kMmaWarps) {
      const int64_t k0 = ct * kMmaTileCols + 2 * t;
      uint32_t b[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) b[nt][i] = load_pair(x, batch, cols, st, aligned, n0 + nt * 8 + g, k0 + 8 * i);
#pragma unroll
      for (int mt = 0; mt < kMmaRowTiles; ++mt) {
        const int64_t rt = rt0 + mt;
        if (rt >= row_tiles) break;  // uniform over the block
        const int64_t tile = rt * col_tiles + ct;
        const uint4 a = __ldg(values + tile * 32 + lane);
        const uint32_t m = __ldg(meta + tile * kMmaTileMetaWords + 2 * g + (t & 1));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) MmaOp<T>::run(acc[mt][nt], a, b[nt], m);
      }
    }
    if (warp > 0) {
#pragma unroll
      for (int mt = 0; mt < kMmaRowTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) partial[warp - 1][(mt * NT + nt) * 4 + i][lane] = acc[mt][nt][i];
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
      for (int mt = 0; mt < kMmaRowTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float sum = acc[mt][nt][i];
#pragma unroll
            for (int w = 0; w < kMmaWarps - 1; ++w) sum += partial[w][(mt * NT + nt) * 4 + i][lane];
            const int64_t row = (rt0 + mt) * kMmaTileRows + g + 8 * (i / 2), n = n0 + nt * 8 + 2 * t + i % 2;
            if (row < rows && n < batch)
              store(y, n * st.y_n + row * st.y_r, sum + (bias ? load(bias, row) : 0.f));
          }
    }
    __syncthreads();  // `partial` is free for the next row block
  }
}

template <typename T, int NT>
cudaError_t launch_mma(const void* layout, const MmaLayout& plan, const void* x, int64_t batch, const void* bias,
                       void* y, cudaStream_t stream, const Strides& st) {
  const int64_t row_blocks = (plan.row_tiles + kMmaRowTiles - 1) / kMmaRowTiles;
  const int64_t batch_blocks = (batch + NT * 8 - 1) / (NT * 8);
  if (batch_blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const auto* base = static_cast<const uint8_t*>(layout);
  // Two consecutive columns in one 32-bit load: unit column stride, even row stride, aligned base.
  const bool aligned = st.x_k == 1 && plan.cols % 2 == 0 && st.x_n % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 4 == 0;
  const dim3 grid(unsigned(batch_blocks), unsigned(std::min<int64_t>(row_blocks, 65535)));
  mma_linear_kernel<T, NT><<<grid, 32 * kMmaWarps, 0, stream>>>(
      reinterpret_cast<const uint4*>(base + plan.values_offset),
      reinterpret_cast<const uint32_t*>(base + plan.meta_offset), plan.row_tiles, plan.col_tiles, plan.rows,
      plan.cols, static_cast<const T*>(x), batch, st, aligned, static_cast<const T*>(bias), static_cast<T*>(y));
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_mma(const void* layout, const MmaLayout& plan, const void* x, int64_t batch, const void* bias,
                       void* y, cudaStream_t stream, const Strides& st) {
  if (plan.rows == 0 || batch == 0) return cudaSuccess;
  if (batch <= 8) return launch_mma<T, 1>(layout, plan, x, batch, bias, y, stream, st);
  if (batch <= 16) return launch_mma<T, 2>(layout, plan, x, batch, bias, y, stream, st);
  return launch_mma<T, 4>(layout, plan, x, batch, bias, y, stream, st);
}

// One thread per value slot of a tile: 256 threads a tile, tiles along x (and y past 2^31 - 1).
__global__ void expand_kernel(const uint16_t* values, const uint32_t* meta, int64_t tiles, int64_t col_tiles,
                              int64_t rows, int64_t cols, uint16_t* dense) {
  for (int64_t tile = blockIdx.x + int64_t(blockIdx.y) * gridDim.x; tile < tiles;
       tile += int64_t(gridDim.x) * gridDim.y) {
    const int slot = threadIdx.x;
    const MmaSlot at =
        mma_slot_position(tile / col_tiles, tile % col_tiles, slot, meta + tile * kMmaTileMetaWords);
    if (at.row < rows && at.col < cols) dense[at.row * cols + at.col] = values[tile * 256 + slot];
  }
}

}  // namespace

cudaError_t expand_mma_layout(const void* layout, const MmaLayout& plan, void* dense, cudaStream_t stream) {
  const int64_t tiles = plan.row_tiles * plan.col_tiles;
  if (plan.rows == 0 || plan.cols == 0) return cudaSuccess;
  cudaError_t err = cudaMemsetAsync(dense, 0, size_t(plan.rows) * size_t(plan.cols) * 2, stream);
  if (err != cudaSuccess) return err;
  const auto* base = static_cast<const uint8_t*>(layout);
  const dim3 grid(unsigned(std::min<int64_t>(tiles, 65535)),
                  unsigned(std::min<int64_t>((tiles + 65534) / 65535, 65535)));
  expand_kernel<<<grid, 256, 0, stream>>>(reinterpret_cast<const uint16_t*>(base + plan.values_offset),
                                          reinterpret_cast<const uint32_t*>(base + plan.meta_offset), tiles,
                                          plan.col_tiles, plan.rows, plan.cols,
                                          static_cast<uint16_t*>(dense));
  return cudaGetLastError();
}

cudaError_t linear_mma(DType dtype, const void* layout, const MmaLayout& plan, const void* x, int64_t batch,
                       const void* bias, void* y, cudaStream_t stream, const Strides* strides) {
  const Strides st = strides_or_contiguous(strides, plan.rows, plan.cols);
  switch (dtype) {
    case DType::F16: return launch_mma<__half>(layout, plan, x, batch, bias, y, stream, st);
    case DType::BF16: return launch_mma<__nv_bfloat16>(layout, plan, x, batch, bias, y, stream, st);
    case DType::F32: break;
  }
  return cudaErrorInvalidValue;
}

cudaError_t linear(DType dtype, const void* values, const uint8_t* indices, int64_t rows, int64_t cols,
                   const void* x, int64_t batch, const void* bias, void* y, cudaStream_t stream, const Strides* strides) {
  const Strides st = strides_or_contiguous(strides, rows, cols);
  switch (dtype) {
    case DType::F32: return launch<float>(values, indices, rows, cols, x, batch, bias, y, stream, st);
    case DType::F16: return launch<__half>(values, indices, rows, cols, x, batch, bias, y, stream, st);
    case DType::BF16: return launch<__nv_bfloat16>(values, indices, rows, cols, x, batch, bias, y, stream, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tessera::sparse_cuda
