// The C view of a tensor that kernels and compiler plugins receive (tessera_tensor_t in
// plugin_abi.h). Header-only and private to the runtime: the dispatcher fills it on the call path,
// and the compiler's plugin partitioner (compiler/src/backends/plugin) fills it for the partitions
// it hands to a compiler plugin, so both give plugins the same fields.
#pragma once
#include "tessera/plugin_abi.h"
#include "tessera/tensor.h"

namespace tessera::detail {

// Sets every field of `c` from `t`; the views point into `t`, which must outlive `c`.
inline void fill_c_tensor(tessera_tensor_t& c, const TensorImpl* t) {
  c.struct_size = sizeof(tessera_tensor_t);
  c.dtype = int32_t(t->dtype());
  c.device_type = int32_t(t->device().type());
  c.device_index = t->device().index() < 0 ? 0 : t->device().index();
  c.ndim = int32_t(t->dim());
  c.reserved_ = 0;
  c.sizes = t->sizes().data();
  c.strides = t->strides().data();
  c.numel = t->numel();
  const Storage& s = t->storage();
  c.data = s ? s->data() : nullptr;
  const int64_t offset = t->storage_offset();
  c.byte_offset = offset == 0 ? 0 : offset * int64_t(itemsize(t->dtype()));  // outputs start at 0
  c.version = s ? s->version() : 0;
}

}  // namespace tessera::detail
