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
#pragma once
#include <cstdint>
#include <sstream>
#include <string>

#include "small_vector.h"
#include "tessera/array_ref.h"
#include "tessera/checked_math.h"
#include "tessera/error.h"

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

}  // namespace tessera::shape
