// Sizes rules of the structural and nn ops that ONNX models need (slice_copy, expand_copy, pad,
// topk, repeat, conv_transpose2d, _resize, linalg_vector_norm). Included by shape_rules.h before
// output_sizes(); the same contract as the rules there (Note [Shape rules]): templates over the size
// type S, comparisons only, never tensor data.
#pragma once

namespace tessera::shape {

// The length of self[start:end:step] along a dim of size `size`, Python's slice rules (also
// NumPy's and ONNX Slice's): a negative bound counts from the end, out-of-range bounds clamp, a
// negative step walks backwards from start (default: the last element) to before end (default:
// before the first). `start_out` (when given) receives the normalised first index.
template <typename S>
S slice_length(const char* op, S size, const std::optional<int64_t>& start, const std::optional<int64_t>& end,
               int64_t step, S* start_out = nullptr) {
  TESSERA_CHECK(step != 0, op, ": slice step cannot be zero; use a positive step, or a negative one to walk backwards");
  TESSERA_CHECK(step != INT64_MIN, op, ": slice step ", step, " is out of range");
  // A bound normalised into [lo, hi]: `lo` 0 and `hi` size for a positive step, -1 and size - 1
  // for a negative one.
  const bool forward = step > 0;
  const S lo = forward ? S(0) : S(-1);
  const S hi = forward ? size : size - S(1);
  auto normalise = [&](int64_t v) -> S {
    if (v < 0) {
      const S w = size + S(v);
      return w <= lo ? lo : w;  // before the first element
    }
    return hi <= S(v) ? hi : S(v);
  };
  const S b = start ? normalise(*start) : (forward ? S(0) : size - S(1));
  const S e = end ? normalise(*end) : (forward ? size : S(-1));
  if (start_out) *start_out = b;
  if (forward) return e <= b ? S(0) : (e - b - S(1)) / S(step) + S(1);
  return b <= e ? S(0) : (b - e - S(1)) / S(-step) + S(1);
}

namespace rules {

// slice_copy.Tensor(self, int dim, int? start, int? end, int step).
template <typename S>
Sizes<S> slice_copy(const SizeArgs<S>& a) {
  using A = op::slice_copy_Tensor::attr;
  Sizes<S> out(a.in(0));
  TESSERA_CHECK(!out.empty(), a.op, ": cannot slice a 0-dim tensor; reshape it to 1-D first");
  const int64_t d = wrap(a.op, a.attr_int(A::dim), int64_t(out.size()));
  std::optional<int64_t> start, end;
  if (!a.attr_none(A::start)) start = a.attr_int(A::start);
  if (!a.attr_none(A::end)) end = a.attr_int(A::end);
  out[size_t(d)] = slice_length<S>(a.op, out[size_t(d)], start, end, a.attr_int(A::step));
  return out;
}

// expand_copy(self, int[] size): Tensor::expand's rule (-1 keeps a size, new dims lead).
template <typename S>
Sizes<S> expand_copy(const SizeArgs<S>& a) {
  ArrayRef<S> in = a.in(0);
  IntArrayRef size = a.attr_ints(op::expand_copy::attr::size);
  TESSERA_CHECK(size.size() >= in.size(), a.op, ": the number of sizes provided (", size.size(),
                ") must be greater or equal to the number of dimensions in the tensor (", in.size(), ")");
  const size_t lead = size.size() - in.size();
  Sizes<S> out;
  for (size_t i = 0; i < size.size(); ++i) {
    const int64_t want = size[i];
    if (i < lead) {
      TESSERA_CHECK(want >= 0, a.op, ": the expanded size ", want, " at new leading dimension ", i,
                    " must be non-negative (-1 is only allowed for existing dimensions); sizes ", size);
      out.push_back(S(want));
      continue;
    }
    const S have = in[i - lead];
    if (want == -1) {
      out.push_back(have);
      continue;
    }
    TESSERA_CHECK(want >= 0, a.op, ": size ", want, " at dimension ", i, " must be non-negative or -1");
    TESSERA_CHECK(have == S(1) || have == S(want), a.op, ": the expanded size of the tensor (", want,
                  ") must match the existing size (", have, ") at non-singleton dimension ", i, ".  Target sizes: ",
                  size, ".  Tensor sizes: ", sizes_str(in), "; pass -1 to keep a size");
    out.push_back(S(want));
  }
  return out;
}

// pad(self, int[] pad, str mode, float? value): pad pairs (lo, hi) from the last dim backwards.
template <typename S>
Sizes<S> pad(const SizeArgs<S>& a) {
  IntArrayRef p = a.attr_ints(op::pad::attr::pad);
  Sizes<S> out(a.in(0));
  TESSERA_CHECK(p.size() % 2 == 0, a.op, ": padding length must be divisible by 2 (lo, hi pairs), got ", p.size(),
                " values ", p);
  TESSERA_CHECK(p.size() / 2 <= out.size(), a.op, ": padding length ", p.size(), " is too large for a ",
                out.size(), "-D input; give at most 2 values per dimension");
  for (size_t k = 0; k < p.size() / 2; ++k) {
    const size_t d = out.size() - 1 - k;
    const std::optional<int64_t> both = checked_add(p[2 * k], p[2 * k + 1]);
    TESSERA_CHECK(both, a.op, ": padding ", p, " overflows int64");
    const S o = out[d] + S(*both);
    TESSERA_CHECK(!(o <= S(-1)), a.op, ": the padding ", p[2 * k], ", ", p[2 * k + 1], " of dimension ", d,
                  " (size ", out[d], ") gives a negative output size ", o, "; crop less");
    out[d] = o;
  }
  return out;
}

// topk(self, int k, int dim, ...): self's sizes with dim replaced by k (both outputs).
template <typename S>
Sizes<S> topk(const SizeArgs<S>& a) {
  using A = op::topk::attr;
  Sizes<S> out(a.in(0));
  const int64_t k = a.attr_int(A::k);
  const int64_t d = wrap(a.op, a.attr_int(A::dim), int64_t(out.size()));
  const S n = out.empty() ? S(1) : out[size_t(d)];
  TESSERA_CHECK(k >= 0 && S(k) <= n, a.op, ": k (", k, ") is out of range for dimension ", d, " of size ", n,
                "; expected 0 <= k <= ", n);
  if (!out.empty()) out[size_t(d)] = S(k);
  return out;
}

// repeat(self, int[] repeats).
template <typename S>
Sizes<S> repeat(const SizeArgs<S>& a) {
  ArrayRef<S> in = a.in(0);
  IntArrayRef r = a.attr_ints(op::repeat::attr::repeats);
  TESSERA_CHECK(r.size() >= in.size(), a.op, ": number of dimensions of repeat dims (", r.size(),
                ") can not be smaller than number of dimensions of tensor (", in.size(), ")");
  const size_t lead = r.size() - in.size();
  Sizes<S> out;
  for (size_t i = 0; i < r.size(); ++i) {
    TESSERA_CHECK(r[i] >= 0, a.op, ": repeats must be non-negative, got ", r);
    out.push_back(i < lead ? S(r[i]) : in[i - lead] * S(r[i]));
  }
  return out;
}

// conv_transpose2d(input, weight (C_in, C_out/groups, kH, kW), bias?, stride, padding, output_padding,
// groups, dilation).
template <typename S>
Sizes<S> conv_transpose2d(const SizeArgs<S>& a) {
  using A = op::conv_transpose2d_input::attr;
  ArrayRef<S> x = a.in(0), w = a.in(1);
  int64_t stride[2], padding[2], out_pad[2], dilation[2];
  a.attr_pair(A::stride, "stride", stride);
  a.attr_pair(A::padding, "padding", padding);
  a.attr_pair(A::output_padding, "output_padding", out_pad);
  a.attr_pair(A::dilation, "dilation", dilation);
  const int64_t groups = a.attr_int(A::groups);
  TESSERA_CHECK(x.size() == 4 || x.size() == 3, a.op, ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got ",
                sizes_str(x));
  TESSERA_CHECK(w.size() == 4, a.op, ": expected a 4-D weight (in_channels, out_channels/groups, kH, kW), got ",
                sizes_str(w));
  TESSERA_CHECK(groups > 0, a.op, ": groups must be positive, got ", groups);
  const size_t c = x.size() - 3;
  TESSERA_CHECK(x[c] == w[0], a.op, ": input has ", x[c], " channels but weight of shape ", sizes_str(w),
                " expects ", w[0]);
  TESSERA_CHECK(w[0] / S(groups) * S(groups) == w[0], a.op, ": in_channels ", w[0], " is not divisible by groups=",
                groups);
  Sizes<S> out;
  if (x.size() == 4) out.push_back(x[0]);
  out.push_back(w[1] * S(groups));
  for (int i = 0; i < 2; ++i) {
    TESSERA_CHECK(stride[i] > 0 && dilation[i] > 0, a.op, ": stride and dilation must be positive, got ", stride[i],
                  " and ", dilation[i]);
    TESSERA_CHECK(padding[i] >= 0 && out_pad[i] >= 0, a.op, ": padding and output_padding must be non-negative");
    TESSERA_CHECK(out_pad[i] < stride[i] || out_pad[i] < dilation[i], a.op, ": output padding (", out_pad[i],
                  ") must be smaller than either stride (", stride[i], ") or dilation (", dilation[i], ")");
    const int64_t k = int64_t(w[2 + size_t(i)]);
    TESSERA_CHECK(stride[i] < (int64_t(1) << 31) && dilation[i] < (int64_t(1) << 31) && k < (int64_t(1) << 31) &&
                      padding[i] < (int64_t(1) << 31) && out_pad[i] < (int64_t(1) << 31),
                  a.op, ": stride, dilation, padding and kernel sizes must be below 2^31");
    const S o = (x[c + 1 + size_t(i)] - S(1)) * S(stride[i]) - S(2 * padding[i]) + S(dilation[i] * (k - 1)) +
                S(out_pad[i] + 1);
    TESSERA_CHECK(!(o <= S(0)), a.op, ": the output size ", o, " of spatial dimension ", i,
                  " is not positive; use less padding");
    out.push_back(o);
  }
  return out;
}

// _resize(self, int[] size, ...): the last len(size) dims become size.
template <typename S>
Sizes<S> resize(const SizeArgs<S>& a) {
  Sizes<S> out(a.in(0));
  IntArrayRef size = a.attr_ints(op::_resize::attr::size);
  TESSERA_CHECK(!size.empty() && size.size() <= out.size(), a.op, ": size ", size, " must give 1 to ", out.size(),
                " output sizes (for the last dims of the ", out.size(), "-D input)");
  for (size_t i = 0; i < size.size(); ++i) {
    TESSERA_CHECK(size[i] >= 0, a.op, ": output sizes must be non-negative, got ", size);
    out[out.size() - size.size() + i] = S(size[i]);
  }
  return out;
}

// linalg_vector_norm(self, Scalar ord, int[]? dim, bool keepdim, ...).
template <typename S>
Sizes<S> reduce_norm(const SizeArgs<S>& a) {
  using A = op::linalg_vector_norm::attr;
  return shape::reduce<S>(a.op, a.in(0), a.attr_ints(A::dim), a.attr_bool(A::keepdim));
}

}  // namespace rules
}  // namespace tessera::shape
