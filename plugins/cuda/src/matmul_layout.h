// Host-side layout decisions of the cuBLASLt matmul (ops.cpp): which strided matrices cuBLASLt can
// read as they are, how size-1 dims are normalised, and the pointer alignment it is told about.
// Pure C++ (no CUDA calls): the unit tests exercise it without a GPU.
#pragma once
#include <algorithm>
#include <cstdint>

namespace tessera::cuda {

// A row-major matrix operand of a (possibly batched) matmul: element (r, c) of batch i at
// data + i * batch_stride + r * row_stride + c * col_stride.
struct MatrixOperand {
  void* data = nullptr;
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 0, batch_stride = 0;
};

// A usable cuBLASLt layout: unit stride along one of the two dims, leading dimension >= extent.
// A zero (broadcast) or negative stride along a dim of size > 1 is never usable: cuBLASLt would
// read distinct elements where the tensor has one.
inline bool lt_layout_ok(const MatrixOperand& x) {
  if (x.rows < 0 || x.cols < 0) return false;
  if (x.col_stride == 1 && (x.rows == 1 || x.row_stride >= std::max<int64_t>(x.cols, 1))) return true;
  if (x.row_stride == 1 && (x.cols == 1 || x.col_stride >= std::max<int64_t>(x.rows, 1))) return true;
  return false;
}

// Normalises the strides of size-1 dims (which address nothing) so that lt_layout_ok accepts
// dense operands. The stride of a dim of size > 1 is never changed: a broadcast (stride-0) row or
// column stays stride 0 and is rejected by lt_layout_ok, so the caller makes the operand
// contiguous instead of letting cuBLASLt read past a one-element buffer.
inline void fix_degenerate(MatrixOperand& x) {
  if (x.rows == 1 && x.cols == 1) {
    x.col_stride = 1;
    x.row_stride = 1;
    return;
  }
  if (x.rows == 1) {  // a row vector: only the column stride addresses memory
    if (x.col_stride == 1) x.row_stride = x.cols;
    else x.row_stride = 1;  // column-major view with leading dimension col_stride (>= 1 checked later)
    return;
  }
  if (x.cols == 1) {  // a column vector: only the row stride addresses memory
    if (x.row_stride == 1) x.col_stride = x.rows;
    else x.col_stride = 1;
  }
}

// The alignment of `p` that cuBLASLt is told (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES): the
// largest power of two up to 16 that divides the address. Note [cuBLASLt alignment]: without
// it cuBLASLt assumes 16-byte aligned operands and may pick a kernel with 128-bit accesses, which
// faults with "misaligned address" on an offset view and poisons the context.
inline uint32_t lt_alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  for (uint32_t a = 16; a > 1; a >>= 1)
    if (v % a == 0) return a;
  return 1;
}

// A bias pointer below 16-byte alignment is copied to a fresh (aligned) buffer before the matmul:
// cuBLASLt has no alignment preference for the bias epilogue.
inline bool lt_bias_needs_copy(const void* bias) { return bias && lt_alignment(bias) < 16; }

}  // namespace tessera::cuda
