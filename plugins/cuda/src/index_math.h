// The index arithmetic of the index_select / embedding / gather kernel (index.cu), written once for the
// device and the host: the kernel calls it per output element, and the host tests
// (tests/cuda/test_launch_planning.cpp, `IndexMath.*`) run it over every element of random shapes
// and strides against naive indexing, so the offsets are checked without a GPU. Plain C++ with
// CUDA's qualifiers when nvcc compiles it.
#pragma once
#include <cstdint>

#include "host_device.h"
#include "launch.h"

namespace tessera::cuda {

// Output element o, row-major over params.sizes: where it is written, where its index is read (the
// caller loads it) and the source offset without the indexed dim's term.
struct IndexedElement {
  int64_t out_offset = 0;    // elements from params.out
  int64_t index_offset = 0;  // elements from params.index
  int64_t src_partial = 0;   // elements from params.src, without the indexed dim's term
};

TESSERA_CUDA_HD IndexedElement indexed_element(const IndexSelectParams& p, int64_t o) {
  IndexedElement e;
  for (int d = p.ndim - 1; d >= 0; --d) {
    const int64_t c = o % p.sizes[d];
    o /= p.sizes[d];
    e.out_offset += c * p.out_strides[d];
    e.index_offset += c * p.index_strides[d];
    if (d != p.dim) e.src_partial += c * p.src_strides[d];
  }
  return e;
}

// An index as the CPU kernel takes it: [-size, size) with a negative one counted from the end.
// False when it is outside that range.
TESSERA_CUDA_HD bool wrap_index(int64_t i, int64_t size, int64_t* wrapped) {
  if (i < -size || i >= size) return false;
  *wrapped = i < 0 ? i + size : i;
  return true;
}

// The 1- or 2-byte element at byte `offset` (0..3) of a little-endian 32-bit word, and the word with
// that element replaced (the rest kept): the compare-and-swap loop of scatter_reduce on sub-word
// elements (Note [scatter_reduce on the GPU], index.cu).
TESSERA_CUDA_HD uint32_t subword_get(uint32_t word, unsigned offset, unsigned bytes) {
  const uint32_t mask = bytes == 2 ? 0xffffu : 0xffu;
  return (word >> (offset * 8u)) & mask;
}
TESSERA_CUDA_HD uint32_t subword_set(uint32_t word, unsigned offset, unsigned bytes, uint32_t value) {
  const uint32_t mask = (bytes == 2 ? 0xffffu : 0xffu) << (offset * 8u);
  return (word & ~mask) | ((value << (offset * 8u)) & mask);
}

}  // namespace tessera::cuda
