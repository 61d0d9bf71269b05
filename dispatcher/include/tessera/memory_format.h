// Memory formats: the order in which a 4-D (N, C, H, W) tensor's elements lie in memory, as in
// PyTorch's torch.channels_last. A tensor keeps its logical shape (N, C, H, W) in every format;
// only its strides differ. Channels-last strides are (H*W*C, 1, W*C, C): the C values of one pixel
// are adjacent, the layout convolution kernels read without a reorder (Note [Channels-last
// activations] in docs/semantics.md).
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/tensor.h"

namespace tessera {

enum class MemoryFormat : int8_t {
  Contiguous,    // row-major (N, C, H, W): the default, what Tensor::contiguous() gives
  ChannelsLast,  // (N, H, W, C) in memory; 4-D tensors only
};

TESSERA_API const char* memory_format_name(MemoryFormat format);  // "contiguous", "channels_last"

// True when `t`'s elements lie densely in `format`'s order. Dims of size 1 may have any stride
// and an empty tensor is contiguous in every format (PyTorch's rules). Throws for ChannelsLast
// when `t` is not 4-D.
TESSERA_API bool is_contiguous(const Tensor& t, MemoryFormat format);

// `t` itself when it is already contiguous in `format`, else a copy laid out in `format`, on the
// same device with the same dtype. Throws for ChannelsLast when `t` is not 4-D.
TESSERA_API Tensor contiguous(const Tensor& t, MemoryFormat format);

// ChannelsLast when `t` is 4-D, dense in channels-last order and not also row-major contiguous (a
// tensor that is both, such as one with C == 1, counts as Contiguous); Contiguous otherwise. The
// format that conv2d gives its output (docs/semantics.md).
TESSERA_API MemoryFormat suggest_memory_format(const Tensor& t);

// The channels-last strides of a 4-D shape; throws when `sizes` is not 4-D.
TESSERA_API std::vector<int64_t> channels_last_strides(IntArrayRef sizes);

}  // namespace tessera
