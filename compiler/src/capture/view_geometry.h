// The geometry of a view a capture meets (private to compiler/src/capture): what Note [Captured
// views] (capture.cpp) reads off a view's sizes, strides and offset to rebuild it from its root.
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::compiler {

// The sizes of a contiguous root of `root_numel` elements as `t` broadcasts it, when t is an expand
// of that root (dims of stride 0 repeat it, the others lay it out as it is); empty otherwise.
std::vector<int64_t> broadcast_base(const Tensor& t, int64_t root_numel);

// A CPU int64 tensor [t.numel()]: the storage position of each element of t, in t's element order
// (the constant index of a view gathered from its flattened root).
Tensor storage_positions(const Tensor& t);

}  // namespace tessera::compiler
