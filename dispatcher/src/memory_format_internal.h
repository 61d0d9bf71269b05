// Layout tests on sizes and strides, shared by the public memory-format API
// (tessera/memory_format.h), the shape rules that choose an output's layout (conv2d, the pools,
// pointwise ops) and cross-device copies.
#pragma once
#include <cstdint>

#include "tessera/array_ref.h"
#include "tessera/tensor.h"

namespace tessera::detail {

// Dense in channels-last order: 4-D, and the dims taken as C, W, H, N have strides 1, C, C*W,
// C*W*H, size-1 dims skipped (PyTorch's is_channels_last_contiguous). An empty tensor qualifies.
inline bool channels_last_dense(IntArrayRef sizes, IntArrayRef strides) {
  if (sizes.size() != 4 || strides.size() != 4) return false;
  for (size_t d = 0; d < 4; ++d)
    if (sizes[d] == 0) return true;
  int64_t expected = 1;
  for (size_t d : {size_t(1), size_t(3), size_t(2), size_t(0)}) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];  // cannot overflow: the product of a real tensor's sizes fits
  }
  return true;
}

// Channels-last and not row-major contiguous: the tensor's layout says "channels last" and nothing
// else (Note [Channels-last activations] in docs/semantics.md).
inline bool suggests_channels_last(const TensorImpl& t) {
  return !t.is_contiguous() && channels_last_dense(t.sizes(), t.strides());
}

}  // namespace tessera::detail
