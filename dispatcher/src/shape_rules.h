// Shape rules of the core op set.
//
// Note [Shape rules]
// Every rule is a function template over the size type `S`. The runtime instantiates them for
// int64_t (op_catalogue.cpp); the compiler instantiates the same templates for a symbolic size
// type (an expression with guards) to propagate dynamic shapes, so a rule is written once. What a
// rule needs from S: construction from an integer, + - * / (floor division of non-negative values),
// == and != against S and integers (a symbolic type records a guard for each comparison it
// decides), and streaming to std::ostream for error messages. Rules never branch on anything but
// such comparisons, and never read tensor data. Every rule checks its inputs and throws
// tessera::Error naming the op, the sizes it got and what it expected.
//
// Each op of dispatcher/ops/ops.json names its rule ("sizes": one of shape::rules below, reached
// through OpInfo::sizes and output_sizes()). The rule reads the op's arguments from SizeArgs, so the
// same function sizes an eager call (the op's meta function in the dispatcher, on int64_t) and a
// captured one (capture_shapes.cpp, on symbolic sizes). Adding a rule: a template here, its name in
// ops.json (docs/adding-an-op.md).
#pragma once
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "small_vector.h"
#include "tessera/array_ref.h"
#include "tessera/checked_math.h"
#include "tessera/dtype.h"
#include "tessera/error.h"
#include "tessera/op_info.h"
#include "tessera/op_names.h"
#include "tessera/plugin_abi.h"

namespace tessera::shape {

template <typename S>
using Sizes = detail::SmallVector<S, 8>;

template <typename S>
std::string sizes_str(ArrayRef<S> s, const char* sep = ", ") {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? sep : "") << s[i];
  os << "]";
  return os.str();
}

inline int64_t wrap(const char* op, int64_t dim, int64_t ndim) {
  int64_t n = ndim == 0 ? 1 : ndim;  // a 0-dim tensor accepts dim 0 and -1
  TESSERA_CHECK(dim >= -n && dim < n, op, ": dimension out of range (expected to be in range of [", -n, ", ",
                n - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

// NumPy broadcasting of two shapes.
template <typename S>
Sizes<S> broadcast(const char* op, ArrayRef<S> a, ArrayRef<S> b) {
  size_t n = a.size() > b.size() ? a.size() : b.size();
  Sizes<S> out(n, S(1));
  for (size_t i = 0; i < n; ++i) {
    bool has_a = i < a.size(), has_b = i < b.size();
    S sa = has_a ? a[a.size() - 1 - i] : S(1);
    S sb = has_b ? b[b.size() - 1 - i] : S(1);
    S r = sa;
    if (sa == S(1))
      r = sb;
    else if (!(sb == S(1)))
      TESSERA_CHECK(sa == sb, op, ": shapes ", sizes_str(a), " and ", sizes_str(b),
                    " are not broadcastable (size ", sa, " != ", sb, " at dimension ", int64_t(n - 1 - i),
                    " from the left); make them equal or 1");
    out[n - 1 - i] = r;
  }
  return out;
}

// `src` must broadcast to `dst` exactly (in-place ops, copy_).
template <typename S>
void check_broadcast_to(const char* op, ArrayRef<S> src, ArrayRef<S> dst) {
  TESSERA_CHECK(src.size() <= dst.size(), op, ": source of shape ", sizes_str(src),
                " cannot be broadcast to the destination shape ", sizes_str(dst));
  for (size_t i = 0; i < src.size(); ++i) {
    S s = src[src.size() - 1 - i], d = dst[dst.size() - 1 - i];
    TESSERA_CHECK(s == S(1) || s == d, op, ": source of shape ", sizes_str(src),
                  " cannot be broadcast to the destination shape ", sizes_str(dst));
  }
}

// Reduction over `dims` (empty = all). keepdim keeps reduced dims as size 1.
template <typename S>
Sizes<S> reduce(const char* op, ArrayRef<S> in, ArrayRef<int64_t> dims, bool keepdim) {
  int64_t nd = int64_t(in.size());
  uint64_t mask = 0;
  if (dims.empty()) {
    mask = ~uint64_t(0);
  } else {
    for (int64_t d : dims) {
      int64_t w = wrap(op, d, nd);
      TESSERA_CHECK(!(mask >> w & 1), op, ": dimension ", d, " appears twice in dims ", sizes_str(dims));
      mask |= uint64_t(1) << w;
    }
  }
  Sizes<S> out;
  for (int64_t i = 0; i < nd; ++i) {
    if (mask >> i & 1) {
      if (keepdim) out.push_back(S(1));
    } else {
      out.push_back(in[size_t(i)]);
    }
  }
  return out;
}

// Note [matmul shapes]: PyTorch's rules. 1-D x 1-D: dot (0-dim); 2-D x 2-D: mm; 1-D x N-D: the
// vector is a row (prepend 1, removed after); N-D x 1-D: matrix-vector; batched: batch dims
// broadcast, the last two are the matrix dims.
template <typename S>
Sizes<S> matmul(const char* op, ArrayRef<S> a, ArrayRef<S> b) {
  TESSERA_CHECK(!a.empty() && !b.empty(), op, ": both arguments need at least 1 dimension, got ", a.size(),
                "-D and ", b.size(), "-D");
  auto mismatch = [&](S k1, S k2) {
    TESSERA_CHECK(k1 == k2, op, ": size mismatch, got ",
                  sizes_str(a, "x").substr(1, sizes_str(a, "x").size() - 2), " and ",
                  sizes_str(b, "x").substr(1, sizes_str(b, "x").size() - 2), " (", k1, " != ", k2,
                  "); the last dimension of the first must equal the ",
                  (b.size() == 1 ? "size of the second" : "second-to-last dimension of the second"));
  };
  if (a.size() == 1 && b.size() == 1) {
    mismatch(a[0], b[0]);
    return Sizes<S>();
  }
  if (a.size() == 2 && b.size() == 2) {
    mismatch(a[1], b[0]);
    return Sizes<S>{a[0], b[1]};
  }
  if (b.size() == 1) {  // (..., n, k) x (k)
    mismatch(a[a.size() - 1], b[0]);
    return Sizes<S>(a.begin(), a.end() - 1);
  }
  if (a.size() == 1) {  // (k) x (..., k, m)
    mismatch(a[0], b[b.size() - 2]);
    Sizes<S> out(b.begin(), b.end() - 2);
    out.push_back(b[b.size() - 1]);
    return out;
  }
  mismatch(a[a.size() - 1], b[b.size() - 2]);
  Sizes<S> batch = broadcast(op, ArrayRef<S>(a.data(), a.size() - 2), ArrayRef<S>(b.data(), b.size() - 2));
  batch.push_back(a[a.size() - 2]);
  batch.push_back(b[b.size() - 1]);
  return batch;
}

// linear: x (..., in) with weight (out, in) -> (..., out).
template <typename S>
Sizes<S> linear(const char* op, ArrayRef<S> x, ArrayRef<S> w) {
  TESSERA_CHECK(w.size() == 2 || w.size() == 1, op, ": weight must be 2-D (out_features, in_features), got ",
                sizes_str(w));
  TESSERA_CHECK(!x.empty(), op, ": input must have at least 1 dimension");
  S in = w[w.size() - 1];
  TESSERA_CHECK(x[x.size() - 1] == in, op, ": input of shape ", sizes_str(x), " has ", x[x.size() - 1],
                " features but weight of shape ", sizes_str(w), " expects ", in);
  Sizes<S> out(x.begin(), x.end() - 1);
  if (w.size() == 2) out.push_back(w[0]);
  return out;
}

// One spatial output size of a convolution or pooling window.
template <typename S>
S conv_out_size(const char* op, S in, int64_t kernel_extent, int64_t stride, int64_t padding,
                int64_t dilation, bool ceil_mode = false) {
  TESSERA_CHECK(stride > 0, op, ": stride must be positive, got ", stride);
  TESSERA_CHECK(dilation > 0, op, ": dilation must be positive, got ", dilation);
  TESSERA_CHECK(padding >= 0, op, ": padding must be non-negative, got ", padding);
  // Note [Checked extents]: the attributes come from users.
  const std::optional<int64_t> pad2 = checked_mul(padding, 2);
  const std::optional<int64_t> dilated = checked_mul(dilation, kernel_extent - 1);
  TESSERA_CHECK(pad2 && dilated && *dilated < INT64_MAX, op, ": padding ", padding, ", dilation ", dilation,
                " and kernel size ", kernel_extent, " overflow int64");
  S span = in + S(*pad2) - S(*dilated + 1);
  S out = (ceil_mode ? span + S(stride - 1) : span) / S(stride) + S(1);
  TESSERA_CHECK(!(span + S(1) <= S(0)), op, ": input size ", in, " (padded by ", padding,
                " on each side) is smaller than the ", "dilated kernel extent ",
                dilation * (kernel_extent - 1) + 1, "; use a smaller kernel or more padding");
  return out;
}

// conv2d: input (N, C, H, W) or (C, H, W); weight (O, C/groups, kH, kW).
template <typename S>
Sizes<S> conv2d(const char* op, ArrayRef<S> x, ArrayRef<S> w, const int64_t* stride, const int64_t* padding,
                const int64_t* dilation, int64_t groups) {
  TESSERA_CHECK(x.size() == 4 || x.size() == 3, op,
                ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got ", x.size(), "-D of shape ",
                sizes_str(x));
  TESSERA_CHECK(w.size() == 4, op, ": expected a 4-D weight (out_channels, in_channels/groups, kH, kW), got ",
                sizes_str(w));
  TESSERA_CHECK(groups > 0, op, ": groups must be positive, got ", groups);
  size_t c = x.size() - 3;
  TESSERA_CHECK(x[c] == w[1] * S(groups), op, ": input has ", x[c], " channels but weight of shape ",
                sizes_str(w), " with groups=", groups, " expects ", w[1] * S(groups));
  TESSERA_CHECK(w[0] / S(groups) * S(groups) == w[0], op, ": out_channels ", w[0],
                " is not divisible by groups=", groups);
  Sizes<S> out;
  if (x.size() == 4) out.push_back(x[0]);
  out.push_back(w[0]);
  out.push_back(conv_out_size<S>(op, x[c + 1], int64_t(w[2]), stride[0], padding[0], dilation[0]));
  out.push_back(conv_out_size<S>(op, x[c + 2], int64_t(w[3]), stride[1], padding[1], dilation[1]));
  return out;
}

// max_pool2d / avg_pool2d: input (N, C, H, W) or (C, H, W).
template <typename S>
Sizes<S> pool2d(const char* op, ArrayRef<S> x, const int64_t* kernel, const int64_t* stride,
                const int64_t* padding, const int64_t* dilation) {
  TESSERA_CHECK(x.size() == 4 || x.size() == 3, op,
                ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got ", sizes_str(x));
  for (int i = 0; i < 2; ++i) {
    TESSERA_CHECK(kernel[i] > 0, op, ": kernel_size must be positive, got ", kernel[i]);
    TESSERA_CHECK(padding[i] * 2 <= kernel[i], op, ": padding ", padding[i],
                  " must be at most half of kernel_size ", kernel[i]);
  }
  Sizes<S> out(x.begin(), x.end() - 2);
  size_t h = x.size() - 2;
  out.push_back(conv_out_size<S>(op, x[h], kernel[0], stride[0], padding[0], dilation[0]));
  out.push_back(conv_out_size<S>(op, x[h + 1], kernel[1], stride[1], padding[1], dilation[1]));
  return out;
}

// cat along `dim`: every shape equal except at `dim`. As in PyTorch, a legacy empty tensor (1-D of
// size 0) is skipped whatever the other shapes are.
template <typename S>
bool is_legacy_empty(ArrayRef<S> s) {
  return s.size() == 1 && s[0] == S(0);
}
template <typename S>
Sizes<S> cat(const char* op, const ArrayRef<S>* shapes, size_t count, int64_t dim) {
  TESSERA_CHECK(count > 0, op, ": expected a non-empty list of tensors");
  size_t first_index = 0;
  while (first_index + 1 < count && is_legacy_empty(shapes[first_index])) ++first_index;
  ArrayRef<S> first = shapes[first_index];
  TESSERA_CHECK(!first.empty(), op, ": zero-dimensional tensor (at position ", first_index,
                ") cannot be concatenated");
  int64_t d = wrap(op, dim, int64_t(first.size()));
  Sizes<S> out(first);
  for (size_t t = first_index + 1; t < count; ++t) {
    ArrayRef<S> s = shapes[t];
    if (is_legacy_empty(s)) continue;
    TESSERA_CHECK(!s.empty(), op, ": zero-dimensional tensor (at position ", t, ") cannot be concatenated");
    TESSERA_CHECK(s.size() == first.size(), op, ": tensors must have the same number of dimensions: got ",
                  first.size(), " and ", s.size(), " (tensor at position ", t, ")");
    for (size_t i = 0; i < s.size(); ++i) {
      if (int64_t(i) == d) continue;
      TESSERA_CHECK(s[i] == first[i], op, ": sizes of tensors must match except in dimension ", d,
                    ". Expected size ", first[i], " but got size ", s[i], " for tensor number ", t,
                    " in the list");
    }
    out[size_t(d)] = out[size_t(d)] + s[size_t(d)];
  }
  return out;
}

template <typename S>
Sizes<S> stack(const char* op, const ArrayRef<S>* shapes, size_t count, int64_t dim) {
  TESSERA_CHECK(count > 0, op, ": expected a non-empty list of tensors");
  ArrayRef<S> first = shapes[0];
  int64_t d = wrap(op, dim, int64_t(first.size()) + 1);
  for (size_t t = 1; t < count; ++t)
    TESSERA_CHECK(shapes[t] == first, op, ": stack expects each tensor to be equal size, but got ",
                  sizes_str(first), " at entry 0 and ", sizes_str(shapes[t]), " at entry ", t);
  Sizes<S> out(first);
  out.insert(size_t(d), S(int64_t(count)));
  return out;
}

// Attention: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).
template <typename S>
Sizes<S> attention(const char* op, ArrayRef<S> q, ArrayRef<S> k, ArrayRef<S> v) {
  TESSERA_CHECK(q.size() >= 2 && k.size() >= 2 && v.size() >= 2, op,
                ": query, key and value need at least 2 dimensions, got ", sizes_str(q), ", ", sizes_str(k),
                ", ", sizes_str(v));
  TESSERA_CHECK(q[q.size() - 1] == k[k.size() - 1], op, ": query embedding size ", q[q.size() - 1],
                " != key embedding size ", k[k.size() - 1]);
  TESSERA_CHECK(k[k.size() - 2] == v[v.size() - 2], op, ": key sequence length ", k[k.size() - 2],
                " != value sequence length ", v[v.size() - 2]);
  Sizes<S> batch = broadcast(op, ArrayRef<S>(q.data(), q.size() - 2), ArrayRef<S>(k.data(), k.size() - 2));
  batch = broadcast(op, batch.ref(), ArrayRef<S>(v.data(), v.size() - 2));
  batch.push_back(q[q.size() - 2]);
  batch.push_back(v[v.size() - 1]);
  return batch;
}

// ---- the arguments of a rule

// The non-tensor arguments of a call in schema order (defaults filled), with checked access. The
// messages name the op and the attribute's position.
struct AttrView {
  const char* op = "";
  const tessera_value_t* attrs = nullptr;
  int num_attrs = 0;

  const tessera_value_t& attr(int i) const {
    TESSERA_CHECK(i < num_attrs, op, ": missing attribute ", i, " (got ", num_attrs, ")");
    return attrs[i];
  }
  bool attr_none(int i) const { return attr(i).kind == TESSERA_VALUE_NONE; }
  int64_t attr_int(int i) const {
    const tessera_value_t& v = attr(i);
    TESSERA_CHECK(v.kind == TESSERA_VALUE_INT || v.kind == TESSERA_VALUE_BOOL, op, ": attribute ", i,
                  " must be an int");
    return v.kind == TESSERA_VALUE_BOOL ? v.u.b : v.u.i;
  }
  bool attr_bool(int i) const { return attr_int(i) != 0; }
  double attr_double(int i) const {
    const tessera_value_t& v = attr(i);
    if (v.kind == TESSERA_VALUE_DOUBLE) return v.u.d;
    if (v.kind == TESSERA_VALUE_INT) return double(v.u.i);
    if (v.kind == TESSERA_VALUE_BOOL) return double(v.u.b);
    detail::throw_error(ErrorCode::InvalidArgument,
                        std::string(op) + ": attribute " + std::to_string(i) + " must be a number");
  }
  DType attr_dtype(int i) const {
    const tessera_value_t& v = attr(i);
    TESSERA_CHECK(
        (v.kind == TESSERA_VALUE_DTYPE || v.kind == TESSERA_VALUE_INT) && v.u.i >= 0 && v.u.i < kNumDTypes, op,
        ": attribute ", i, " must be a dtype");
    return DType(v.u.i);
  }
  IntArrayRef attr_ints(int i) const {
    const tessera_value_t& v = attr(i);
    if (v.kind == TESSERA_VALUE_NONE) return {};
    TESSERA_CHECK(v.kind == TESSERA_VALUE_INT_LIST, op, ": attribute ", i, " must be an int list");
    return IntArrayRef(v.u.ints, size_t(v.count));
  }
  // int[2] argument: [a, b], or [a] meaning [a, a]; `if_empty` (when given) for [].
  void attr_pair(int i, const char* name, int64_t out[2], const int64_t* if_empty = nullptr) const {
    IntArrayRef l = attr_ints(i);
    if (l.empty() && if_empty) {
      out[0] = if_empty[0];
      out[1] = if_empty[1];
      return;
    }
    TESSERA_CHECK(l.size() == 1 || l.size() == 2, op, ": ", name, " must have 1 or 2 values, got ", l);
    out[0] = l[0];
    out[1] = l.size() == 2 ? l[1] : l[0];
  }
};

// What a sizes rule sees: the sizes of the tensor arguments, flattened as MetaCall's (Tensor and
// Tensor? arguments in schema order, a Tensor[] contributing its elements at list_begin; an absent
// Tensor? or a wrapped number is 0-dim), and the other arguments.
template <typename S>
struct SizeArgs : AttrView {
  const ArrayRef<S>* tensors = nullptr;
  int num_tensors = 0;
  int list_begin = -1, list_size = 0;

  ArrayRef<S> in(int i) const {
    TESSERA_CHECK(i < num_tensors, op, ": tensor argument ", i, " is missing (got ", num_tensors, ")");
    return tensors[i];
  }
};

// The sizes rules ops.json names, by name (Note [Shape rules]). A rule several ops share reads their
// arguments through one op's indices (op_names.h); the ops that name it have the same layout.
namespace rules {

template <typename S>
Sizes<S> same(const SizeArgs<S>& a) {
  return Sizes<S>(a.in(0));
}

// copy_(self, src): src broadcasts to self.
template <typename S>
Sizes<S> copy_(const SizeArgs<S>& a) {
  check_broadcast_to<S>(a.op, a.in(1), a.in(0));
  return Sizes<S>(a.in(0));
}

template <typename S>
Sizes<S> broadcast(const SizeArgs<S>& a) {
  return shape::broadcast<S>(a.op, a.in(0), a.in(1));
}

// where(condition, self, other).
template <typename S>
Sizes<S> where(const SizeArgs<S>& a) {
  Sizes<S> ab = shape::broadcast<S>(a.op, a.in(1), a.in(2));
  return shape::broadcast<S>(a.op, a.in(0), ab.ref());
}

// self op= other: the broadcast shape must be self's.
template <typename S>
Sizes<S> binary_inplace(const SizeArgs<S>& a) {
  Sizes<S> out = shape::broadcast<S>(a.op, a.in(0), a.in(1));
  TESSERA_CHECK(out.ref() == a.in(0), a.op, ": output with shape ", a.in(0), " doesn't match the broadcast shape ",
                out.ref(), "; use the out-of-place op");
  return out;
}

// (self, int[] dim, bool keepdim): sum, prod, mean, amax, amin.
template <typename S>
Sizes<S> reduce(const SizeArgs<S>& a) {
  return shape::reduce<S>(a.op, a.in(0), a.attr_ints(op::sum::attr::dim), a.attr_bool(op::sum::attr::keepdim));
}

// var(self, int[] dim, int correction, bool keepdim).
template <typename S>
Sizes<S> reduce_var(const SizeArgs<S>& a) {
  return shape::reduce<S>(a.op, a.in(0), a.attr_ints(op::var::attr::dim), a.attr_bool(op::var::attr::keepdim));
}

// argmax(self, int? dim, bool keepdim): over every dim when dim is None.
template <typename S>
Sizes<S> reduce_argmax(const SizeArgs<S>& a) {
  using A = op::argmax::attr;
  if (a.attr_none(A::dim)) return shape::reduce<S>(a.op, a.in(0), IntArrayRef(), a.attr_bool(A::keepdim));
  const int64_t d = a.attr_int(A::dim);
  return shape::reduce<S>(a.op, a.in(0), IntArrayRef(d), a.attr_bool(A::keepdim));
}

template <typename S>
Sizes<S> matmul(const SizeArgs<S>& a) {
  return shape::matmul<S>(a.op, a.in(0), a.in(1));
}

template <typename S>
Sizes<S> linear(const SizeArgs<S>& a) {
  return shape::linear<S>(a.op, a.in(0), a.in(1));
}

template <typename S>
Sizes<S> attention(const SizeArgs<S>& a) {
  return shape::attention<S>(a.op, a.in(0), a.in(1), a.in(2));
}

// conv2d(input, weight, bias?, int[2] stride, int[2] padding, int[2] dilation, int groups).
template <typename S>
Sizes<S> conv2d(const SizeArgs<S>& a) {
  int64_t stride[2], padding[2], dilation[2];
  using A = op::conv2d::attr;
  a.attr_pair(A::stride, "stride", stride);
  a.attr_pair(A::padding, "padding", padding);
  a.attr_pair(A::dilation, "dilation", dilation);
  return shape::conv2d<S>(a.op, a.in(0), a.in(1), stride, padding, dilation, a.attr_int(A::groups));
}

// max_pool2d(self, int[2] kernel_size, int[2] stride=[] (= kernel_size), int[2] padding, int[2] dilation).
template <typename S>
Sizes<S> max_pool2d(const SizeArgs<S>& a) {
  int64_t kernel[2], stride[2], padding[2], dilation[2];
  using A = op::max_pool2d::attr;
  a.attr_pair(A::kernel_size, "kernel_size", kernel);
  a.attr_pair(A::stride, "stride", stride, kernel);
  a.attr_pair(A::padding, "padding", padding);
  a.attr_pair(A::dilation, "dilation", dilation);
  return shape::pool2d<S>(a.op, a.in(0), kernel, stride, padding, dilation);
}

// avg_pool2d(self, int[2] kernel_size, int[2] stride=[] (= kernel_size), int[2] padding).
template <typename S>
Sizes<S> avg_pool2d(const SizeArgs<S>& a) {
  int64_t kernel[2], stride[2], padding[2], dilation[2] = {1, 1};
  using A = op::avg_pool2d::attr;
  a.attr_pair(A::kernel_size, "kernel_size", kernel);
  a.attr_pair(A::stride, "stride", stride, kernel);
  a.attr_pair(A::padding, "padding", padding);
  return shape::pool2d<S>(a.op, a.in(0), kernel, stride, padding, dilation);
}

// embedding(weight [num, dim], indices) -> indices' sizes + [dim].
template <typename S>
Sizes<S> embedding(const SizeArgs<S>& a) {
  ArrayRef<S> w = a.in(0);
  TESSERA_CHECK(w.size() == 2, a.op, ": weight must be 2-D (num_embeddings, embedding_dim), got ", w);
  Sizes<S> out(a.in(1));
  out.push_back(w[1]);
  return out;
}

// index_select(self, int dim, index): self's sizes with dim replaced by the index's length.
template <typename S>
Sizes<S> index_select(const SizeArgs<S>& a) {
  ArrayRef<S> index = a.in(1);
  TESSERA_CHECK(index.size() <= 1, a.op, ": index must be 0-D or 1-D, got shape ", index);
  Sizes<S> out(a.in(0));
  const int64_t d = wrap(a.op, a.attr_int(op::index_select::attr::dim), int64_t(out.size()));
  if (!out.empty()) out[size_t(d)] = index.empty() ? S(1) : index[0];
  return out;
}

// gather(self, int dim, index): the index's sizes.
template <typename S>
Sizes<S> gather(const SizeArgs<S>& a) {
  return Sizes<S>(a.in(1));
}

template <typename S>
Sizes<S> cat(const SizeArgs<S>& a) {
  return shape::cat<S>(a.op, a.tensors + a.list_begin, size_t(a.list_size), a.attr_int(op::cat::attr::dim));
}

template <typename S>
Sizes<S> stack(const SizeArgs<S>& a) {
  return shape::stack<S>(a.op, a.tensors + a.list_begin, size_t(a.list_size), a.attr_int(op::stack::attr::dim));
}

}  // namespace rules
}  // namespace tessera::shape

#include "shape_rules_structural.h"  // IWYU pragma: export

namespace tessera::shape {

// The sizes of the one output of an op whose contract names `rule`; false for SizesRule::None.
template <typename S>
bool output_sizes(op::SizesRule rule, const SizeArgs<S>& args, Sizes<S>* out) {
  switch (rule) {
#define TESSERA_SIZES_RULE_CASE(name)   \
  case op::SizesRule::name:             \
    *out = rules::name<S>(args);        \
    return true;
    TESSERA_OP_SIZES_RULES(TESSERA_SIZES_RULE_CASE)
#undef TESSERA_SIZES_RULE_CASE
    case op::SizesRule::None: break;
  }
  return false;
}

}  // namespace tessera::shape
