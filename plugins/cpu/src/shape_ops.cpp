// Structural kernels: slice_copy, expand_copy, flip, repeat, pad, tril/triu, scatter,
// scatter_reduce, topk, cumsum (argmin lives next to argmax in reduce.cpp). Copies run through strided
// views and copy_tensor (every dtype, any input strides); outputs are contiguous (the dispatcher
// allocates them so for these ops).
#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "kernels.h"
#include "tessera/pad_index.h"

namespace tessera::cpu {
namespace {

int64_t esize(const tessera_tensor_t* t) { return int64_t(sdk::dtype_size(t->dtype)); }
char* bytes(const tessera_tensor_t* t) { return static_cast<char*>(t->data) + t->byte_offset; }

int64_t wrap_dim(const char* op, int64_t d, int64_t nd) {
  const int64_t n = nd == 0 ? 1 : nd;
  TESSERA_SDK_CHECK(d >= -n && d < n, std::string(op) + ": dimension " + std::to_string(d) +
                                          " out of range for a tensor of rank " + std::to_string(nd));
  return d < 0 ? d + n : d;
}

void check_contiguous_output(const tessera_tensor_t* out, const char* op) {
  TESSERA_SDK_CHECK(TensorView(out).is_contiguous(), std::string(op) + ": output must be contiguous");
}

int64_t load_index(const char* p, int32_t dtype) {
  if (dtype == TESSERA_DTYPE_INT64) return *reinterpret_cast<const int64_t*>(p);
  if (dtype == TESSERA_DTYPE_INT32) return *reinterpret_cast<const int32_t*>(p);
  throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                   std::string("index tensor has dtype ") + dtype_name(dtype) + "; expected int64 or int32");
}

// ---- slice_copy, expand_copy, flip, repeat: one strided copy each

// The first index of self[start:end:step] along a dim of `size` (the dispatcher's slice_length:
// shape_rules_structural.h), for a non-empty result.
int64_t slice_start(int64_t size, const KernelCall& c, int64_t step) {
  using A = op::slice_copy_Tensor::attr;
  const bool forward = step > 0;
  const int64_t lo = forward ? 0 : -1, hi = forward ? size : size - 1;
  if (c.attr_is_none(A::start)) return forward ? 0 : size - 1;
  const int64_t v = c.attr_int(A::start);
  if (v < 0) return std::max(size + v, lo);
  return std::min(v, hi);
}

void slice_copy_kernel(const KernelCall& c) {
  using A = op::slice_copy_Tensor::attr;
  const tessera_tensor_t* x = c.raw()->inputs[0];
  const tessera_tensor_t* out = c.raw()->outputs[0];
  if (out->numel == 0) return;
  const int64_t d = wrap_dim("slice_copy", c.attr_int(A::dim), x->ndim);
  const int64_t step = c.attr_int(A::step);
  TESSERA_SDK_CHECK(step != 0, "slice_copy: step must not be zero");
  const int64_t start = slice_start(x->sizes[d], c, step);
  int64_t st[kMaxDims];
  check_rank(x->ndim, "the slice_copy input");
  for (int i = 0; i < x->ndim; ++i) st[i] = x->strides[i] * (i == d ? step : 1);
  StridedView v(x, x->ndim, out->sizes, st, start * x->strides[d] * esize(x));
  copy_tensor(out, &v.t);
}

void expand_copy_kernel(const KernelCall& c) {
  const tessera_tensor_t* x = c.raw()->inputs[0];
  const tessera_tensor_t* out = c.raw()->outputs[0];
  check_rank(out->ndim, "the expand_copy output");
  const int lead = out->ndim - x->ndim;
  TESSERA_SDK_CHECK(lead >= 0, "expand_copy: output rank below the input's");
  int64_t st[kMaxDims];
  for (int i = 0; i < out->ndim; ++i)
    st[i] = i < lead || x->sizes[i - lead] != out->sizes[i] ? 0 : x->strides[i - lead];
  StridedView v(x, out->ndim, out->sizes, st, 0);
  copy_tensor(out, &v.t);
}

void flip_kernel(const KernelCall& c) {
  const tessera_tensor_t* x = c.raw()->inputs[0];
  const tessera_tensor_t* out = c.raw()->outputs[0];
  if (out->numel == 0) return;
  check_rank(x->ndim, "the flip input");
  int count = 0;
  const int64_t* dims = c.attr_ints(op::flip::attr::dims, &count);
  int64_t st[kMaxDims];
  for (int i = 0; i < x->ndim; ++i) st[i] = x->strides[i];
  int64_t offset = 0;
  bool flipped[kMaxDims] = {};
  for (int k = 0; k < count; ++k) {
    const int64_t d = wrap_dim("flip", dims[k], x->ndim);
    if (x->ndim == 0 || flipped[d]) continue;
    flipped[d] = true;
    offset += (x->sizes[d] - 1) * x->strides[d];
    st[d] = -x->strides[d];
  }
  StridedView v(x, x->ndim, x->sizes, st, offset * esize(x));
  copy_tensor(out, &v.t);
}

// The output viewed as [r_0, .., r_lead-1, r_lead, s_0, r_lead+1, s_1, ...]: each tile dim split into
// (repeat, size); the input broadcast over the repeat dims.
void repeat_kernel(const KernelCall& c) {
  const tessera_tensor_t* x = c.raw()->inputs[0];
  const tessera_tensor_t* out = c.raw()->outputs[0];
  if (out->numel == 0) return;
  int m = 0;
  const int64_t* reps = c.attr_ints(op::repeat::attr::repeats, &m);
  const int lead = m - x->ndim;
  TESSERA_SDK_CHECK(lead >= 0 && out->ndim == m, "repeat: repeats do not match the output rank");
  TESSERA_SDK_CHECK(m + x->ndim <= kMaxDims, "repeat: " + std::to_string(m) + " repeats of a " +
                                                 std::to_string(x->ndim) + "-D tensor exceed the kernel's " +
                                                 std::to_string(kMaxDims) + " dims; repeat in two steps");
  int64_t sizes[kMaxDims], ost[kMaxDims], xst[kMaxDims];
  int n = 0;
  for (int i = 0; i < m; ++i) {
    if (i < lead) {
      sizes[n] = reps[i], ost[n] = out->strides[i], xst[n++] = 0;
      continue;
    }
    const int64_t s = x->sizes[i - lead];
    sizes[n] = reps[i], ost[n] = out->strides[i] * s, xst[n++] = 0;
    sizes[n] = s, ost[n] = out->strides[i], xst[n++] = x->strides[i - lead];
  }
  StridedView vo(out, n, sizes, ost, 0);
  StridedView vx(x, n, sizes, xst, 0);
  copy_tensor(&vo.t, &vx.t);
}

// ---- pad

// The source index of each padded element: tessera::pad_source (tessera/pad_index.h), shared with
// the CUDA plugin.
using tessera::PadMode;
using tessera::pad_source;

void pad_kernel(const KernelCall& c) {
  using A = op::pad::attr;
  const tessera_tensor_t* x = c.raw()->inputs[0];
  const tessera_tensor_t* out = c.raw()->outputs[0];
  if (out->numel == 0) return;
  check_rank(x->ndim, "the pad input");
  check_contiguous_output(out, "pad");
  int count = 0;
  const int64_t* p = c.attr_ints(A::pad, &count);
  const std::string mode = c.attr_string(A::mode).empty() ? "constant" : c.attr_string(A::mode);
  const int nd = x->ndim;
  int64_t lo[kMaxDims] = {}, hi[kMaxDims] = {};
  for (int k = 0; k < count / 2; ++k) {
    lo[nd - 1 - k] = p[2 * k];
    hi[nd - 1 - k] = p[2 * k + 1];
  }
  const int64_t es = esize(out);
  if (mode == "constant") {
    const double value = c.attr_is_none(A::value) ? 0.0 : c.attr_double(A::value);
    OwnedTensor fill(nullptr, 0, out->dtype);
    visit(out->dtype, [&](auto tag) {
      using T = decltype(tag);
      Elem<T>::store(reinterpret_cast<T*>(bytes(fill.raw())), acc_t<T>(value));
    });
    int64_t zeros[kMaxDims] = {};
    StridedView vf(fill.raw(), nd, out->sizes, zeros, 0);
    copy_tensor(out, &vf.t);
    int64_t sizes[kMaxDims];
    int64_t xoff = 0, ooff = 0;
    for (int d = 0; d < nd; ++d) {
      sizes[d] = out->sizes[d] - std::max<int64_t>(lo[d], 0) - std::max<int64_t>(hi[d], 0);
      if (sizes[d] <= 0) return;  // cropped away entirely
      xoff += std::max<int64_t>(-lo[d], 0) * x->strides[d];
      ooff += std::max<int64_t>(lo[d], 0) * out->strides[d];
    }
    StridedView vo(out, nd, sizes, out->strides, ooff * es);
    StridedView vx(x, nd, sizes, x->strides, xoff * esize(x));
    copy_tensor(&vo.t, &vx.t);
    return;
  }
  const std::optional<PadMode> parsed = tessera::pad_mode(mode);
  TESSERA_SDK_CHECK(parsed.has_value(), "pad: unknown mode '" + mode + "'");
  const PadMode pm = *parsed;
  // Byte offsets into x of every output index, per dim.
  std::vector<std::vector<int64_t>> offsets(static_cast<size_t>(nd));
  for (int d = 0; d < nd; ++d) {
    offsets[size_t(d)].resize(size_t(out->sizes[d]));
    for (int64_t o = 0; o < out->sizes[d]; ++o) {
      const int64_t i = pad_source(o, lo[d], hi[d], x->sizes[d], pm);
      TESSERA_SDK_CHECK(i >= 0 && i < x->sizes[d], "pad: padding too large for dimension " + std::to_string(d));
      offsets[size_t(d)][size_t(o)] = i * x->strides[d] * esize(x);
    }
  }
  const char* xb = bytes(x);
  char* ob = bytes(out);
  const int64_t inner = nd > 0 ? out->sizes[nd - 1] : 1;
  const int64_t rows = out->numel / inner;
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t rem = r, base = 0;
      for (int d = nd - 2; d >= 0; --d) {
        base += offsets[size_t(d)][size_t(rem % out->sizes[d])];
        rem /= out->sizes[d];
      }
      char* dst = ob + r * inner * es;
      if (nd == 0) {
        std::memcpy(dst, xb, size_t(es));
        continue;
      }
      const std::vector<int64_t>& last = offsets[size_t(nd - 1)];
      for (int64_t j = 0; j < inner; ++j) std::memcpy(dst + j * es, xb + base + last[size_t(j)], size_t(es));
    }
  });
}

// ---- tril / triu

void trilu_kernel(void* upper_tag, const KernelCall& c) {
  const bool upper = upper_tag != nullptr;
  const tessera_tensor_t* x = c.raw()->inputs[0];
  const tessera_tensor_t* out = c.raw()->outputs[0];
  check_contiguous_output(out, upper ? "triu" : "tril");
  copy_tensor(out, x);
  if (out->numel == 0) return;
  const int64_t rows = out->sizes[out->ndim - 2], cols = out->sizes[out->ndim - 1];
  const int64_t diag = std::clamp<int64_t>(c.attr_int(0), -rows - cols, rows + cols);
  const int64_t es = esize(out), mats = out->numel / (rows * cols);
  char* ob = bytes(out);
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i) {
      char* row = ob + (m * rows + i) * cols * es;
      // tril keeps j <= i + diag, triu keeps j >= i + diag.
      const int64_t b = upper ? 0 : std::clamp<int64_t>(i + diag + 1, 0, cols);
      const int64_t e = upper ? std::clamp<int64_t>(i + diag, 0, cols) : cols;
      if (e > b) std::memset(row + b * es, 0, size_t((e - b) * es));
    }
}
tessera_status_t tril_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) { trilu_kernel(nullptr, c); });
}
tessera_status_t triu_kernel(void*, const tessera_kernel_call_t* call) {
  static int tag;
  return guarded(call, [&](const KernelCall& c) { trilu_kernel(&tag, c); });
}

// ---- scatter, scatter_reduce

enum class Reduce { None, Sum, Prod, Mean, Max, Min };

// Calls f(out byte offset, src byte offset) for every index element, in row-major order of index.
template <typename F>
void for_each_scatter(const tessera_tensor_t* out, const tessera_tensor_t* idx, const tessera_tensor_t* src, int64_t dim,
                      F f) {
  const int nd = idx->ndim;
  check_rank(nd, "the scatter index");
  const int64_t es = esize(out), ses = esize(src), ies = esize(idx);
  const int64_t dim_size = out->ndim == 0 ? 1 : out->sizes[dim];
  int64_t pos[kMaxDims] = {};
  for (int64_t n = 0; n < idx->numel; ++n) {
    int64_t io = 0, so = 0, oo = 0;
    for (int d = 0; d < nd; ++d) {
      io += pos[d] * idx->strides[d];
      so += src->ndim == 0 ? 0 : pos[d] * src->strides[d];
      if (d != dim) oo += out->ndim == 0 ? 0 : pos[d] * out->strides[d];
    }
    int64_t k = load_index(bytes(idx) + io * ies, idx->dtype);
    TESSERA_SDK_CHECK(k >= -dim_size && k < dim_size, "index " + std::to_string(k) +
                                                          " is out of bounds for dimension " + std::to_string(dim) +
                                                          " with size " + std::to_string(dim_size));
    if (k < 0) k += dim_size;
    if (out->ndim > 0) oo += k * out->strides[dim];
    f(oo * es, so * ses);
    for (int d = nd - 1; d >= 0; --d) {
      if (++pos[d] < idx->sizes[d]) break;
      pos[d] = 0;
    }
  }
}

void scatter_kernel(Reduce r, bool include_self, const KernelCall& c, int64_t dim_attr) {
  const tessera_tensor_t* self = c.raw()->inputs[0];
  const tessera_tensor_t* idx = c.raw()->inputs[1];
  const tessera_tensor_t* src = c.raw()->inputs[2];
  const tessera_tensor_t* out = c.raw()->outputs[0];
  check_contiguous_output(out, "scatter");
  copy_tensor(out, self);
  if (idx->numel == 0) return;
  const int64_t dim = wrap_dim("scatter", dim_attr, self->ndim);
  char* ob = bytes(out);
  const char* sb = bytes(src);
  if (r == Reduce::None) {
    const size_t es = size_t(esize(out));
    for_each_scatter(out, idx, src, dim, [&](int64_t o, int64_t s) { std::memcpy(ob + o, sb + s, es); });
    return;
  }
  visit(out->dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = acc_t<T>;
    const int64_t n = out->numel;
    std::vector<Acc> acc(static_cast<size_t>(n));
    std::vector<int64_t> count(size_t(n), include_self ? 1 : 0);
    std::vector<uint8_t> touched(size_t(n), 0);
    T* op = reinterpret_cast<T*>(ob);
    for (int64_t i = 0; i < n; ++i) acc[size_t(i)] = Elem<T>::load(op + i);
    for_each_scatter(out, idx, src, dim, [&](int64_t o, int64_t s) {
      const size_t i = size_t(o / int64_t(sizeof(T)));
      const Acc v = Elem<T>::load(reinterpret_cast<const T*>(sb + s));
      Acc& a = acc[i];
      ++count[i];
      if (!include_self && !touched[i]) {
        touched[i] = 1;
        a = v;
        return;
      }
      touched[i] = 1;
      switch (r) {
        case Reduce::Sum:
        case Reduce::Mean: a = Acc(a + v); break;
        case Reduce::Prod: a = Acc(a * v); break;
        case Reduce::Max:
          if (v != v || v > a) a = a != a ? a : v;
          break;
        case Reduce::Min:
          if (v != v || v < a) a = a != a ? a : v;
          break;
        case Reduce::None: break;
      }
    });
    for (int64_t i = 0; i < n; ++i) {
      if (!touched[size_t(i)]) continue;
      Acc v = acc[size_t(i)];
      if (r == Reduce::Mean) {
        const int64_t k = std::max<int64_t>(count[size_t(i)], 1);
        if constexpr (is_float_v<T>)
          v = Acc(v / Acc(k));
        else
          v = Acc((v >= 0 ? v : v - (k - 1)) / k);  // floor division, as PyTorch's integral mean
      }
      Elem<T>::store(op + i, v);
    }
  });
}

tessera_status_t scatter_src_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    scatter_kernel(Reduce::None, true, c, c.attr_int(op::scatter_src::attr::dim));
  });
}

tessera_status_t scatter_reduce_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    using A = op::scatter_reduce_two::attr;
    const std::string s = c.attr_string(A::reduce);
    const Reduce r = s == "sum" ? Reduce::Sum : s == "prod" ? Reduce::Prod : s == "mean" ? Reduce::Mean
                   : s == "amax" ? Reduce::Max : s == "amin" ? Reduce::Min : Reduce::None;
    TESSERA_SDK_CHECK(r != Reduce::None, "scatter_reduce: unknown reduce '" + s + "'");
    scatter_kernel(r, c.attr_bool(A::include_self), c, c.attr_int(A::dim));
  });
}

// ---- topk, cumsum: along one dim of a contiguous input, as [outer, n, inner]

struct Lanes {
  int64_t outer = 1, n = 1, inner = 1;
};
Lanes lanes_of(const tessera_tensor_t* x, int64_t dim) {
  Lanes l;
  for (int i = 0; i < x->ndim; ++i) (i < dim ? l.outer : (i == dim ? l.n : l.inner)) *= x->sizes[i];
  return l;
}

// NaN is larger than every number (PyTorch's topk and sort).
template <typename A>
bool greater_nan_max(A a, A b) {
  if (a != a) return b == b;
  if (b != b) return false;
  return a > b;
}

void topk_kernel(const KernelCall& c) {
  using At = op::topk::attr;
  TempList temps;
  const tessera_tensor_t* x = contiguous_or_copy(c.raw()->inputs[0], temps);
  const tessera_tensor_t* values = c.raw()->outputs[0];
  const tessera_tensor_t* indices = c.raw()->outputs[1];
  check_contiguous_output(values, "topk");
  check_contiguous_output(indices, "topk");
  if (values->numel == 0) return;
  const int64_t dim = wrap_dim("topk", c.attr_int(At::dim), x->ndim);
  const int64_t k = c.attr_int(At::k);
  const bool largest = c.attr_bool(At::largest);
  const Lanes l = x->ndim == 0 ? Lanes{} : lanes_of(x, dim);
  TESSERA_SDK_CHECK(k >= 0 && k <= l.n, "topk: k out of range");
  int64_t* ip = reinterpret_cast<int64_t*>(bytes(indices));
  visit(x->dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = acc_t<T>;
    const T* xp = reinterpret_cast<const T*>(bytes(x));
    T* vp = reinterpret_cast<T*>(bytes(values));
    parallel_for(0, l.outer * l.inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(l.n, 1)), [&](int64_t b, int64_t e) {
      std::vector<std::pair<Acc, int64_t>> lane(size_t(l.n));
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / l.inner, i = t % l.inner;
        for (int64_t j = 0; j < l.n; ++j) lane[size_t(j)] = {Elem<T>::load(xp + (o * l.n + j) * l.inner + i), j};
        // A total order: by value (NaN largest), equal values by ascending index.
        auto before = [largest](const std::pair<Acc, int64_t>& p, const std::pair<Acc, int64_t>& q) {
          const bool pq = largest ? greater_nan_max(p.first, q.first) : greater_nan_max(q.first, p.first);
          const bool qp = largest ? greater_nan_max(q.first, p.first) : greater_nan_max(p.first, q.first);
          return pq || (!qp && p.second < q.second);
        };
        std::partial_sort(lane.begin(), lane.begin() + k, lane.end(), before);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t at = (o * k + j) * l.inner + i;
          vp[at] = xp[(o * l.n + lane[size_t(j)].second) * l.inner + i];
          ip[at] = lane[size_t(j)].second;
        }
      }
    });
  });
}

void cumsum_kernel(const KernelCall& c) {
  TempList temps;
  const tessera_tensor_t* out = c.raw()->outputs[0];
  const tessera_tensor_t* x = contiguous_or_copy(cast_if_needed(c.raw()->inputs[0], out->dtype, temps), temps);
  check_contiguous_output(out, "cumsum");
  if (out->numel == 0) return;
  const int64_t dim = wrap_dim("cumsum", c.attr_int(op::cumsum::attr::dim), x->ndim);
  const Lanes l = x->ndim == 0 ? Lanes{} : lanes_of(x, dim);
  visit(out->dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = acc_t<T>;
    const T* xp = reinterpret_cast<const T*>(bytes(x));
    T* op = reinterpret_cast<T*>(bytes(out));
    parallel_for(0, l.outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(l.n * l.inner, 1)), [&](int64_t b, int64_t e) {
      std::vector<Acc> run(size_t(l.inner));
      for (int64_t o = b; o < e; ++o) {
        std::fill(run.begin(), run.end(), Acc(0));
        for (int64_t j = 0; j < l.n; ++j)
          for (int64_t i = 0; i < l.inner; ++i) {
            const int64_t at = (o * l.n + j) * l.inner + i;
            run[size_t(i)] = Acc(run[size_t(i)] + Elem<T>::load(xp + at));
            Elem<T>::store(op + at, run[size_t(i)]);
          }
      }
    });
  });
}

}  // namespace

void register_shape_kernels(Registrar& r) {
  r.add(op::slice_copy_Tensor::name, kMaskAll, &guarded_kernel<slice_copy_kernel>);
  r.add(op::expand_copy::name, kMaskAll, &guarded_kernel<expand_copy_kernel>);
  r.add(op::flip::name, kMaskAll, &guarded_kernel<flip_kernel>);
  r.add(op::repeat::name, kMaskAll, &guarded_kernel<repeat_kernel>);
  r.add(op::pad::name, kMaskAll, &guarded_kernel<pad_kernel>);
  r.add(op::tril::name, kMaskAll, &tril_kernel);
  r.add(op::triu::name, kMaskAll, &triu_kernel);
  r.add(op::scatter_src::name, kMaskAll, &scatter_src_kernel);
  r.add(op::scatter_reduce_two::name, kMaskAll, &scatter_reduce_kernel);
  r.add(op::topk::name, kMaskAll, &guarded_kernel<topk_kernel>);
  r.add(op::cumsum::name, kMaskAll, &guarded_kernel<cumsum_kernel>);
}

}  // namespace tessera::cpu
