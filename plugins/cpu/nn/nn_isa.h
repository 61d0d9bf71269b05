// Row kernels of the nn ops, compiled once per ISA level (Note [CPU ISA selection] in ../src/isa.h).
//
// Note [nn ISA kernels]
// nn_isa_kernels.inc is compiled three times (nn_isa_default.cpp, nn_isa_avx2.cpp,
// nn_isa_avx512.cpp), each under its own `#pragma GCC target` and in its own namespace, and fills
// one NnIsaTable. The translation units include no STL header, so no inline function compiled for
// AVX-512 can be merged by the linker into a caller running at a lower level. nn_isa() returns the
// table of tessera::cpu::capability(). Every function works on contiguous f32 rows (the compute
// type of every floating dtype but f64) and is safe to call from several threads at once.
#pragma once
#include <cstdint>

namespace tessera::cpu::nn {

// Geometry of one 2-D pooling plane (floor mode).
struct PoolGeometry {
  int64_t h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
};

struct NnIsaTable {
  const char* name;
  // y = softmax(x) / log_softmax(x) over n contiguous elements (y may alias x).
  void (*softmax_row)(const float* x, float* y, int64_t n);
  void (*log_softmax_row)(const float* x, float* y, int64_t n);
  // y = (x - mean) * rstd * w + b; w, b may be null.
  void (*layer_norm_row)(const float* x, float* y, int64_t n, const float* w, const float* b, float eps);
  // y = x * rsqrt(mean(x^2) + eps) * w; w may be null.
  void (*rms_norm_row)(const float* x, float* y, int64_t n, const float* w, float eps);
  // C[M,N] (+)= A[M,K] * B[K,N], all row-major f32 with leading dimensions; accumulate=0 overwrites.
  void (*gemm_f32)(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float* c, int64_t ldc, int accumulate);
  // One 32-column panel of a transposed matrix: dst[c * 32 + r] = src[r * lds + c] for r < rows
  // (rows <= 32) and c < cols; dst[c * 32 + r] = 0 for rows <= r < 32.
  void (*pack_panel_f32)(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst);
  // Max of x[0..n) (-inf when n == 0).
  float (*row_max)(const float* x, int64_t n);
  // x[i] = exp(x[i] - m) in place; returns the sum.
  float (*exp_sub_sum)(float* x, int64_t n, float m);
  // x[i] *= s.
  void (*scale_row)(float* x, int64_t n, float s);
  // One online-softmax step of flash attention (Note [Flash attention on the CPU] in attention.cpp)
  // over the scores s[m][n] (row stride lds), in place. Per row r: m' = max(mrow[r], max of the row)
  // (NaN-propagating, Note [NaN in row maxima]); the row becomes exp(s - m') (exactly 0 where
  // s - m' < -87.3, never a denormal); alpha[r] = exp(mrow[r] - m'); lrow[r] = lrow[r] * alpha[r] +
  // sum of the row; mrow[r] = m'. A row whose m' is still -inf (every key so far masked out) becomes
  // 0 with alpha[r] = 1 and mrow[r], lrow[r] unchanged.
  void (*flash_softmax_rows)(float* s, int64_t lds, int64_t m, int64_t n, float* mrow, float* lrow, float* alpha);
  // One [h, w] -> [oh, ow] plane of max pooling (NaN propagates) or average pooling (zero padding
  // counted in the divisor, PyTorch's count_include_pad=True), in f32.
  void (*pool_plane_f32)(const float* in, float* out, const PoolGeometry* g, int is_max);
  // Conversions between the 16-bit floating types and f32 (round to nearest even).
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  void (*f32_to_bf16)(const float* src, uint16_t* dst, int64_t n);
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);
};

const NnIsaTable& nn_isa_default();
const NnIsaTable& nn_isa_avx2();
const NnIsaTable& nn_isa_avx512();
// The table of the level the plugin runs at (tessera::cpu::capability()).
const NnIsaTable& nn_isa();

}  // namespace tessera::cpu::nn
