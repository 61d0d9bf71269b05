// cat, stack, index_select, gather, embedding.
#include "kernels.h"

namespace tessera::cpu {
namespace {

using View = StridedView;

// The index at byte address `p` of an index tensor of dtype `dtype`.
int64_t load_index_at(const char* p, int32_t dtype) {
  switch (dtype) {
    case TESSERA_DTYPE_INT64: return *reinterpret_cast<const int64_t*>(p);
    case TESSERA_DTYPE_INT32: return *reinterpret_cast<const int32_t*>(p);
    case TESSERA_DTYPE_INT16: return *reinterpret_cast<const int16_t*>(p);
    case TESSERA_DTYPE_INT8: return *reinterpret_cast<const int8_t*>(p);
    case TESSERA_DTYPE_UINT8: return *reinterpret_cast<const uint8_t*>(p);
    default:
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                       std::string("index tensor has dtype ") + dtype_name(dtype) + "; expected int64 or int32");
  }
}

int64_t load_index(const tessera_tensor_t* idx, int64_t byte_off) {
  return load_index_at(static_cast<const char*>(idx->data) + idx->byte_offset + byte_off, idx->dtype);
}

int64_t wrap_index(int64_t i, int64_t size, const char* what) {
  TESSERA_SDK_CHECK(i >= -size && i < size, std::string(what) + ": index " + std::to_string(i) +
                                                " is out of bounds for a dimension of size " + std::to_string(size));
  return i < 0 ? i + size : i;
}

int64_t wrap_dim(int64_t d, int64_t nd) {
  const int64_t n = nd == 0 ? 1 : nd;
  TESSERA_SDK_CHECK(d >= -n && d < n, "dimension " + std::to_string(d) + " out of range for rank " + std::to_string(nd));
  return d < 0 ? d + n : d;
}

tessera_status_t cat_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const tessera_tensor_t* out = c.raw()->outputs[0];
    const int64_t dim = wrap_dim(c.num_attrs() > op::cat::attr::dim ? c.attr_int(op::cat::attr::dim) : 0, out->ndim);
    const int64_t es = int64_t(sdk::dtype_size(out->dtype));
    int64_t offset = 0;
    for (int i = 0; i < c.num_inputs(); ++i) {
      const tessera_tensor_t* in = c.raw()->inputs[i];
      if (!in || in->numel == 0) {
        if (in && in->ndim == out->ndim) offset += in->sizes[dim];
        continue;
      }
      TESSERA_SDK_CHECK(in->ndim == out->ndim, "cat: input " + std::to_string(i) + " has rank " +
                                                   std::to_string(in->ndim) + "; expected " + std::to_string(out->ndim));
      View v(out, out->ndim, in->sizes, out->strides, offset * out->strides[dim] * es);
      copy_tensor(&v.t, in);
      offset += in->sizes[dim];
    }
  });
}

tessera_status_t stack_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const tessera_tensor_t* out = c.raw()->outputs[0];
    const int64_t dim = wrap_dim(c.num_attrs() > op::stack::attr::dim ? c.attr_int(op::stack::attr::dim) : 0, out->ndim);
    const int64_t es = int64_t(sdk::dtype_size(out->dtype));
    check_rank(out->ndim, "the stack output");
    int64_t st[kMaxDims];
    int j = 0;
    for (int d = 0; d < out->ndim; ++d)
      if (d != dim) st[j++] = out->strides[d];
    for (int i = 0; i < c.num_inputs(); ++i) {
      const tessera_tensor_t* in = c.raw()->inputs[i];
      TESSERA_SDK_CHECK(in->ndim == out->ndim - 1, "stack: input " + std::to_string(i) + " has rank " +
                                                       std::to_string(in->ndim) + "; expected " +
                                                       std::to_string(out->ndim - 1));
      View v(out, in->ndim, in->sizes, st, i * out->strides[dim] * es);
      copy_tensor(&v.t, in);
    }
  });
}

tessera_status_t index_select_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const tessera_tensor_t* x = c.raw()->inputs[0];
    const tessera_tensor_t* idx = c.raw()->inputs[1];
    const tessera_tensor_t* out = c.raw()->outputs[0];
    const int64_t dim = wrap_dim(c.attr_int(op::index_select::attr::dim), x->ndim);
    TESSERA_SDK_CHECK(idx->ndim <= 1, "index_select: index must be 0-D or 1-D, got rank " + std::to_string(idx->ndim));
    const int64_t n = idx->numel;
    const int64_t xes = int64_t(sdk::dtype_size(x->dtype)), oes = int64_t(sdk::dtype_size(out->dtype));
    const int64_t istride = idx->ndim == 1 ? idx->strides[0] : 0;
    const int64_t isz = int64_t(sdk::dtype_size(idx->dtype));
    if (x->ndim == 0) {
      for (int64_t j = 0; j < n; ++j) wrap_index(load_index(idx, j * istride * isz), 1, "index_select");
      copy_tensor(out, x);
      return;
    }
    check_rank(x->ndim, "the index_select input");
    int64_t sub_sizes[kMaxDims], xs[kMaxDims], os[kMaxDims];
    int k = 0;
    for (int d = 0; d < x->ndim; ++d)
      if (d != dim) {
        sub_sizes[k] = x->sizes[d];
        xs[k] = x->strides[d];
        os[k++] = out->strides[d];
      }
    for (int64_t j = 0; j < n; ++j)
      wrap_index(load_index(idx, j * istride * isz), x->sizes[dim], "index_select");
    parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const int64_t i = wrap_index(load_index(idx, j * istride * isz), x->sizes[dim], "index_select");
        View vo(out, k, sub_sizes, os, j * out->strides[dim] * oes);
        View vx(x, k, sub_sizes, xs, i * x->strides[dim] * xes);
        copy_tensor(&vo.t, &vx.t);
      }
    });
  });
}

tessera_status_t gather_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const tessera_tensor_t* x = c.raw()->inputs[0];
    const tessera_tensor_t* idx = c.raw()->inputs[1];
    const tessera_tensor_t* out = c.raw()->outputs[0];
    const int64_t dim = wrap_dim(c.attr_int(op::gather::attr::dim), x->ndim);
    TempList temps;
    const tessera_tensor_t* xin = cast_if_needed(x, out->dtype, temps);
    const int nd = out->ndim;
    TESSERA_SDK_CHECK(idx->ndim == std::max(x->ndim, 1) || idx->ndim == x->ndim,
                      "gather: index rank " + std::to_string(idx->ndim) + " differs from input rank " +
                          std::to_string(x->ndim));
    check_rank(nd, "the gather output");
    TESSERA_SDK_CHECK(idx->ndim == nd, "gather: index rank " + std::to_string(idx->ndim) + " differs from output rank " +
                                           std::to_string(nd));
    int64_t xs[kMaxDims];
    for (int d = 0; d < nd; ++d) {
      TESSERA_SDK_CHECK(d == dim || x->ndim == 0 || idx->sizes[d] <= x->sizes[d],
                        "gather: index size " + std::to_string(idx->sizes[d]) + " at dim " + std::to_string(d) +
                            " exceeds the input size " + std::to_string(x->sizes[d]));
      xs[d] = (d == dim || x->ndim == 0) ? 0 : xin->strides[d];
    }
    const int64_t es = int64_t(sdk::dtype_size(out->dtype));
    const int64_t esz[3] = {es, int64_t(sdk::dtype_size(idx->dtype)), es};
    char* ptrs[3] = {static_cast<char*>(out->data) + out->byte_offset,
                     static_cast<char*>(idx->data) + idx->byte_offset,
                     static_cast<char*>(xin->data) + xin->byte_offset};
    const int64_t* strides[3] = {out->strides, idx->strides, xs};
    StridedLoop loop;
    loop.setup(nd, out->sizes, 3, ptrs, strides, esz);
    if (loop.numel == 0) return;
    const int64_t dim_size = x->ndim == 0 ? 1 : x->sizes[dim];
    const int64_t dim_stride = (x->ndim == 0 ? 0 : xin->strides[dim]) * es;
    const int32_t idx_dtype = idx->dtype;
    for_each(loop, 16384, [&](char** p, const int64_t* st, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = wrap_index(load_index_at(p[1] + i * st[1], idx_dtype), dim_size, "gather");
        std::memcpy(p[0] + i * st[0], p[2] + i * st[2] + k * dim_stride, size_t(es));
      }
    });
  });
}

tessera_status_t embedding_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const tessera_tensor_t* w = c.raw()->inputs[0];
    const tessera_tensor_t* idx = c.raw()->inputs[1];
    const tessera_tensor_t* out = c.raw()->outputs[0];
    TESSERA_SDK_CHECK(w->ndim == 2, "embedding: weight must be 2-D, got rank " + std::to_string(w->ndim));
    TESSERA_SDK_CHECK(TensorView(out).is_contiguous(), "embedding: output must be contiguous");
    TempList temps;
    if (!TensorView(idx).is_contiguous()) {
      temps.emplace_back(idx->sizes, idx->ndim, TESSERA_DTYPE_INT64);
      copy_tensor(temps.back().raw(), idx);
      idx = temps.back().raw();
    }
    const int64_t n = idx->numel, rows = w->sizes[0], d = w->sizes[1];
    const int64_t isz = int64_t(sdk::dtype_size(idx->dtype));
    const int64_t es = int64_t(sdk::dtype_size(w->dtype));
    for (int64_t j = 0; j < n; ++j) wrap_index(load_index(idx, j * isz), rows, "embedding");
    const bool rows_contig = w->strides[1] == 1 || d == 1;
    char* obase = static_cast<char*>(out->data) + out->byte_offset;
    const char* wbase = static_cast<const char*>(w->data) + w->byte_offset;
    parallel_for(0, n, std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)), [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const int64_t i = wrap_index(load_index(idx, j * isz), rows, "embedding");
        if (rows_contig && out->dtype == w->dtype) {
          std::memcpy(obase + j * d * es, wbase + i * w->strides[0] * es, size_t(d * es));
        } else {
          const int64_t one[1] = {d}, wst[1] = {w->strides[1]}, ost[1] = {1};
          View vo(out, 1, one, ost, j * d * int64_t(sdk::dtype_size(out->dtype)));
          View vw(w, 1, one, wst, i * w->strides[0] * es);
          copy_tensor(&vo.t, &vw.t);
        }
      }
    });
  });
}

}  // namespace

void register_index_kernels(Registrar& r) {
  r.add(op::cat::name, kMaskAll, &cat_kernel);
  r.add(op::stack::name, kMaskAll, &stack_kernel);
  r.add(op::index_select::name, kMaskAll, &index_select_kernel);
  r.add(op::gather::name, kMaskAll, &gather_kernel);
  r.add(op::embedding::name, kMaskAll, &embedding_kernel);
}

}  // namespace tessera::cpu
