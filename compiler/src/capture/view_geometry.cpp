// View geometry for capture (view_geometry.h).
#include "capture/view_geometry.h"

#include "tessera/dispatcher.h"
#include "tessera/ops.h"

namespace tessera::compiler {

std::vector<int64_t> broadcast_base(const Tensor& t, int64_t root_numel) {
  if (t.storage_offset() != 0) return {};
  std::vector<int64_t> base(size_t(t.dim()));
  int64_t expect = 1;
  bool repeats = false;
  for (int64_t i = t.dim() - 1; i >= 0; --i) {
    const int64_t size = t.sizes()[size_t(i)], stride = t.strides()[size_t(i)];
    if (size != 1 && stride == 0) {
      base[size_t(i)] = 1;
      repeats = true;
      continue;
    }
    if (size != 1 && stride != expect) return {};
    base[size_t(i)] = size;
    expect *= size;
  }
  return repeats && expect == root_numel ? base : std::vector<int64_t>{};
}

Tensor storage_positions(const Tensor& t) {
  // A real tensor, also while a capture runs on this thread.
  ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
  const int64_t n = t.numel();
  Tensor index = empty({n}, TensorOptions().dtype(DType::Int64));
  int64_t* pos = index.data_ptr<int64_t>();
  const size_t rank = size_t(t.dim());
  std::vector<int64_t> at(rank, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t p = t.storage_offset();
    for (size_t d = 0; d < rank; ++d) p += at[d] * t.strides()[d];
    pos[i] = p;
    for (size_t d = rank; d-- > 0;) {
      if (++at[d] < t.sizes()[d]) break;
      at[d] = 0;
    }
  }
  return index;
}

}  // namespace tessera::compiler
