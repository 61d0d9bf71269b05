// Memory formats (tessera/memory_format.h): layout tests and conversions over strides.
#include "tessera/memory_format.h"

#include "memory_format_internal.h"
#include "tessera/checked_math.h"
#include "tessera/error.h"
#include "tessera/ops.h"

namespace tessera {

namespace {

void check_format(const Tensor& t, MemoryFormat format, const char* what) {
  TESSERA_CHECK(t.defined(), what, ": the tensor is undefined (default-constructed)");
  TESSERA_CHECK(format == MemoryFormat::Contiguous || format == MemoryFormat::ChannelsLast, what,
                ": unknown memory format ", int(format), "; expected MemoryFormat::Contiguous or ChannelsLast");
  TESSERA_CHECK(format != MemoryFormat::ChannelsLast || t.dim() == 4, what,
                ": channels_last needs a 4-D (N, C, H, W) tensor, got ", t.dim(), "-D with shape ", t.sizes(),
                "; unsqueeze a (C, H, W) tensor to (1, C, H, W) first");
}

}  // namespace

const char* memory_format_name(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::Contiguous: return "contiguous";
    case MemoryFormat::ChannelsLast: return "channels_last";
  }
  return "unknown";
}

std::vector<int64_t> channels_last_strides(IntArrayRef sizes) {
  TESSERA_CHECK(sizes.size() == 4, "channels_last_strides: expected 4 sizes (N, C, H, W), got ", sizes.size(),
                " ", sizes);
  for (size_t d = 0; d < 4; ++d)
    TESSERA_CHECK(sizes[d] >= 0, "channels_last_strides: invalid shape ", sizes, ": size ", sizes[d],
                  " at dimension ", d, " is negative");
  // As contiguous_strides does, a size-0 dim counts as 1 so that strides stay positive; the
  // products saturate only for shapes no tensor can have (its numel would overflow first).
  auto at_least_one = [](int64_t s) { return s > 1 ? s : int64_t(1); };
  std::vector<int64_t> strides(4);
  strides[1] = 1;
  strides[3] = at_least_one(sizes[1]);
  strides[2] = saturating_mul(strides[3], at_least_one(sizes[3]));
  strides[0] = saturating_mul(strides[2], at_least_one(sizes[2]));
  return strides;
}

bool is_contiguous(const Tensor& t, MemoryFormat format) {
  check_format(t, format, "is_contiguous");
  if (format == MemoryFormat::Contiguous) return t.is_contiguous();
  return detail::channels_last_dense(t.sizes(), t.strides());
}

Tensor contiguous(const Tensor& t, MemoryFormat format) {
  check_format(t, format, "contiguous");
  if (format == MemoryFormat::Contiguous) return t.contiguous();
  if (detail::channels_last_dense(t.sizes(), t.strides())) return t;
  Tensor out = empty_strided(t.sizes(), channels_last_strides(t.sizes()), TensorOptions().dtype(t.dtype()).device(t.device()));
  out.copy_(t);
  return out;
}

MemoryFormat suggest_memory_format(const Tensor& t) {
  TESSERA_CHECK(t.defined(), "suggest_memory_format: the tensor is undefined (default-constructed)");
  return detail::suggests_channels_last(*t.impl()) ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

}  // namespace tessera
