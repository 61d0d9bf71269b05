// The CPU layout of a 2:4 semi-structured weight and the CPU linear kernels over it.
//
// Note [CPU 2:4 layout]
// A weight W of shape (n, k), 2:4 along k, is kept as exactly two values per group of four (a
// group with fewer non-zeros keeps zeros at its first free positions), in position order, rows of
// kp / 2 values where kp = k rounded up to 64 (padding groups hold zeros), plus one bit per dense
// position (kp bits per row, exactly two set per group). Rows are padded to a multiple of 4 and
// interleaved in blocks of 4: slice s (32 bytes of values) of the block's rows 0..3 lie next to
// each other, and so do their 64-bit mask words, so a kernel walking 4 rows reads two sequential
// streams. Every 16 positions thus own 8 consecutive values and 16 mask bits (f32), every 32
// positions 16 values and 32 bits (bf16), so the kernels rebuild a
// dense vector of W with one expand (vexpandps / vpexpandw, or a permute from a table on AVX2)
// and multiply it with dense rows of x: the weight traffic, which is what bounds a linear layer at
// batch 1..32, is kp/2 values + kp/8 bytes per row instead of k values. The mask holds the same
// bits as the canonical 2-bit indices, so building this layout is a linear pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace tessera::sparse_cpu {

enum class ElementType { F32, BF16, I8 };
enum class Isa { Scalar, AVX2, AVX512 };

size_t element_size(ElementType t);
const char* isa_name(Isa isa);

// The ISA the kernels run at: the best the CPU and the OS support, lowered by
// TESSERA_CPU_CAPABILITY=default|avx2|avx512 (read once). Thread-safe.
Isa detected_isa();
// `requested` is a TESSERA_CPU_CAPABILITY value ("" for none); false with *error for an unknown
// value or a level the CPU lacks.
bool select_isa(const std::string& requested, Isa* out, std::string* error);

// One block from aligned_alloc: this header, then the values, then the mask; released with
// std::free (so that the runtime can free a layout cached on a tensor after this library is gone).
struct CpuLayout {
  ElementType type = ElementType::F32;
  static constexpr int64_t kBlockRows = 4;
  static constexpr int64_t kSliceBytes = 32;
  int64_t n = 0, k = 0, kp = 0;  // rows, dense columns, columns padded to 64
  int64_t np = 0;                // rows padded to kBlockRows
  uint8_t* values = nullptr;   // np x kp/2 elements, interleaved, 64-byte aligned
  uint64_t* mask = nullptr;    // np x kp/64 words, interleaved
  int64_t row_bytes() const { return kp / 2 * int64_t(element_size(type)); }
  // The values of the 4-row block holding row r: slice s of row r + i at (s * 4 + i) * 32.
  const uint8_t* block_values(int64_t r) const { return values + (r / kBlockRows) * kBlockRows * row_bytes(); }
  // Mask word j of row r + i at j * 4 + i.
  const uint64_t* block_mask(int64_t r) const { return mask + (r / kBlockRows) * kBlockRows * (kp / 64); }
  // Address of compressed value v of row r.
  const uint8_t* value_at(int64_t r, int64_t v) const {
    const int64_t byte = v * int64_t(element_size(type));
    return block_values(r) + ((byte / kSliceBytes) * kBlockRows + r % kBlockRows) * kSliceBytes + byte % kSliceBytes;
  }
  uint64_t mask_word(int64_t r, int64_t j) const { return block_mask(r)[j * kBlockRows + r % kBlockRows]; }
  size_t bytes() const;  // values + mask
};

// Writes dense row r (k elements of the weight's type) into `row`.
using RowSource = std::function<void(int64_t r, void* row)>;

// Builds the layout of an (n, k) weight given row by row (f32 as float, bf16 as its 16-bit
// pattern, i8). Returns null with *error naming the first row and group (of four, along k) with
// more than two non-zeros (-0.0 counts as zero, NaN as non-zero), or for sizes that overflow.
// The caller frees the result with std::free.
CpuLayout* build_layout(const RowSource& rows, ElementType type, int64_t n, int64_t k, std::string* error);
// The same from a dense row-major (n, k) weight.
CpuLayout* build_layout(const void* dense, ElementType type, int64_t n, int64_t k, std::string* error);

// y (batch, n) = x (batch, k) * W^T (+ bias (n)), all row-major contiguous. f32: x, bias, y float.
// bf16: x, bias, y bf16, accumulated in f32, y rounded to nearest even. Runs on OpenMP threads.
void linear_f32(const float* x, int64_t batch, const CpuLayout& w, const float* bias, float* y, Isa isa);
void linear_bf16(const uint16_t* x, int64_t batch, const CpuLayout& w, const uint16_t* bias, uint16_t* y, Isa isa);
// int8: x, bias, y int8; exact, wrapping around in int8 like the dense integer linear (products
// and sums modulo 2^32, the result modulo 2^8). The AVX-512 level uses VNNI (vpdpbusd on x + 128,
// corrected by 128 * the sum of the weights), the AVX2 level vpmaddwd on int16-widened values.
void linear_i8(const int8_t* x, int64_t batch, const CpuLayout& w, const int8_t* bias, int8_t* y, Isa isa);

}  // namespace tessera::sparse_cpu
