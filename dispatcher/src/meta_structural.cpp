// Shape rules of the structural and nn ops that ONNX models need (meta_rules.h): slicing, expand,
// pad, flip, repeat, triangles, scatter, topk, cumsum, batch and group norm, transposed conv,
// resize, logsumexp and vector norms. Sizes come from shape_rules_structural.h.
#include <cmath>
#include <string>

#include "meta_rules.h"

namespace tessera::meta {

void check_same_dtype(const MetaCall& m, const TensorImpl& a, const TensorImpl& b, const char* an,
                      const char* bn);  // meta_nn.cpp

namespace {

std::string string_attr(const MetaCall& m, int i, const char* if_none) {
  const tessera_value_t& v = attr(m, i);
  if (v.kind == TESSERA_VALUE_STRING && v.u.s) return v.u.s;
  TESSERA_CHECK(v.kind == TESSERA_VALUE_NONE, m.op_name, ": attribute ", i, " must be a string");
  return if_none;
}

// A 1-D per-channel tensor argument (weight, bias, running statistics) of C elements.
void check_channel_vector(const MetaCall& m, int i, const char* name, int64_t channels) {
  if (!m.has(i)) return;
  TESSERA_CHECK(m.t(i).dim() == 1 && m.t(i).sizes()[0] == channels, m.op_name, ": ", name,
                " must have shape [", channels, "] (one value per channel), got ", m.t(i).sizes());
}

void check_index_tensor(const MetaCall& m, const TensorImpl& idx) {
  TESSERA_CHECK(idx.dtype() == kInt64 || idx.dtype() == kInt32, m.op_name, ": index must be an int64 or int32 tensor, got ",
                idx.dtype(), "; convert with .to(kInt64)");
}

}  // namespace

void meta_slice_copy(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  m.add_output(sizes_by<shape::rules::slice_copy<int64_t>>(m), x.dtype());
}

void meta_expand_copy(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  m.add_output(sizes_by<shape::rules::expand_copy<int64_t>>(m), x.dtype());
}

void meta_pad(MetaCall& m) {
  using A = op::pad::attr;
  const TensorImpl& x = need(m, 0, "self");
  const std::string mode = string_attr(m, A::mode, "constant");
  TESSERA_CHECK(mode == "constant" || mode == "reflect" || mode == "replicate" || mode == "circular", m.op_name,
                ": mode must be \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"", mode,
                "\" (ONNX's \"edge\" is \"replicate\", its \"wrap\" \"circular\")");
  TESSERA_CHECK(mode == "constant" || attr_none(m, A::value), m.op_name, ": padding mode \"", mode,
                "\" doesn't take in value argument; pass value=None");
  IntArrayRef p = attr_ints(m, A::pad);
  for (size_t k = 0; k < p.size() / 2 && k < size_t(x.dim()); ++k) {  // before the rule adds
    const std::optional<int64_t> both = checked_add(p[2 * k], p[2 * k + 1]);
    TESSERA_CHECK(both && checked_add(x.sizes()[size_t(x.dim()) - 1 - k], *both), m.op_name, ": padding ", p,
                  " overflows int64");
  }
  Sz out = sizes_by<shape::rules::pad<int64_t>>(m);
  for (size_t k = 0; mode != "constant" && k < p.size() / 2; ++k) {
    const size_t d = size_t(x.dim()) - 1 - k;
    const int64_t n = x.sizes()[d];
    // Note [Circular pad crops first]: circular mode drops the cropped elements (negative amounts)
    // first and wraps within the rest, as torch.nn.functional.pad and ONNX Runtime's Pad "wrap" do
    // (x = [0 1 2 3 4 5] padded (-1, 2) is [1 2 3 4 5 1 2], not [1 2 3 4 5 0 1]). Reflect and
    // replicate pad from the whole input and then crop, as PyTorch does. The pad_backward formula
    // follows the same order.
    const int64_t kept = n - std::max<int64_t>(-p[2 * k], 0) - std::max<int64_t>(-p[2 * k + 1], 0);
    for (int side = 0; side < 2; ++side) {
      const int64_t amount = p[2 * k + size_t(side)];
      if (amount <= 0) continue;
      if (mode == "reflect")
        TESSERA_CHECK(amount < n, m.op_name, ": reflect padding ", amount, " of dimension ", d,
                      " must be smaller than its size ", n, "; pad less or use \"replicate\"");
      else if (mode == "circular")
        TESSERA_CHECK(amount <= kept, m.op_name, ": circular padding ", amount, " of dimension ", d,
                      " wraps around more than once (", kept, " elements left after the crops of ", n,
                      "); pad at most that many");
      else
        TESSERA_CHECK(n > 0, m.op_name, ": cannot replicate-pad dimension ", d, " of size 0");
    }
  }
  m.add_output(out, x.dtype());
}

void meta_batch_norm(MetaCall& m) {
  using A = op::batch_norm::attr;
  const TensorImpl& x = need(m, 0, "input");
  check_floating_input(m, x);
  TESSERA_CHECK(!attr_bool(m, A::training), m.op_name,
                ": training=True is not supported (inference only: it normalises with running_mean and "
                "running_var); pass training=False");
  TESSERA_CHECK(x.dim() >= 2, m.op_name, ": expected an (N, C, ...) input of at least 2 dimensions, got ", x.sizes());
  TESSERA_CHECK(m.has(3) && m.has(4), m.op_name,
                ": running_mean and running_var are required when training=False");
  const int64_t c = x.sizes()[1];
  const char* names[] = {"weight", "bias", "running_mean", "running_var"};
  for (int i = 1; i <= 4; ++i) check_channel_vector(m, i, names[i - 1], c);
  TESSERA_CHECK(attr_double(m, A::eps) >= 0, m.op_name, ": eps must be non-negative, got ", attr_double(m, A::eps));
  m.compute_dtype = x.dtype();
  m.cast_mask = 0b11111;
  m.add_output(x.sizes(), x.dtype());
}

void meta_group_norm(MetaCall& m) {
  using A = op::group_norm::attr;
  const TensorImpl& x = need(m, 0, "input");
  check_floating_input(m, x);
  TESSERA_CHECK(x.dim() >= 2, m.op_name, ": expected an (N, C, ...) input of at least 2 dimensions, got ", x.sizes());
  const int64_t g = attr_int(m, A::num_groups), c = x.sizes()[1];
  TESSERA_CHECK(g > 0 && c % g == 0, m.op_name, ": expected number of channels in input (", c,
                ") to be divisible by num_groups (", g, ")");
  check_channel_vector(m, 1, "weight", c);
  check_channel_vector(m, 2, "bias", c);
  m.compute_dtype = x.dtype();
  m.cast_mask = 0b111;
  m.add_output(x.sizes(), x.dtype());
}

void meta_cumsum(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  shape::wrap(m.op_name, attr_int(m, op::cumsum::attr::dim), x.dim());
  DType r = is_floating(x.dtype()) ? x.dtype() : kInt64;
  if (!attr_none(m, op::cumsum::attr::dtype)) r = attr_dtype(m, op::cumsum::attr::dtype);
  TESSERA_CHECK(!is_quantized(r) && r != kBool, m.op_name, ": dtype ", r, " is not supported; use int64 or a float dtype");
  m.compute_dtype = r;
  m.cast_mask = 0b1;
  m.add_output(x.sizes(), r);
}

void meta_topk(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(x.dtype() != kBool, m.op_name, ": not implemented for bool tensors; convert with .to(kUInt8)");
  Sz out = sizes_by<shape::rules::topk<int64_t>>(m);
  m.add_output(out, x.dtype());
  m.add_output(out, kInt64);
}

// scatter.src and scatter_reduce.two: self, index and src of one rank; index no larger than src,
// nor than self off dim.
void check_scatter(const MetaCall& m, const TensorImpl& self, const TensorImpl& idx, const TensorImpl& src, int64_t dim) {
  check_index_tensor(m, idx);
  TESSERA_CHECK(self.dtype() == src.dtype(), m.op_name, ": expected self.dtype to be equal to src.dtype, got ",
                self.dtype(), " and ", src.dtype(), "; convert src with .to(", self.dtype(), ")");
  const int64_t d = shape::wrap(m.op_name, dim, self.dim());
  const int64_t nd = std::max<int64_t>(self.dim(), 1);
  TESSERA_CHECK(std::max<int64_t>(idx.dim(), 1) == nd && std::max<int64_t>(src.dim(), 1) == nd, m.op_name,
                ": index (", idx.sizes(), ") and src (", src.sizes(), ") must have as many dimensions as self (",
                self.sizes(), ")");
  for (int64_t i = 0; i < idx.dim(); ++i) {
    const int64_t n = idx.sizes()[size_t(i)];
    TESSERA_CHECK(src.dim() == 0 || n <= src.sizes()[size_t(i)], m.op_name, ": expected index ", idx.sizes(),
                  " to be no larger than src ", src.sizes(), " in every dimension");
    TESSERA_CHECK(i == d || self.dim() == 0 || n <= self.sizes()[size_t(i)], m.op_name, ": expected index ",
                  idx.sizes(), " to be no larger than self ", self.sizes(), " apart from dimension ", d);
  }
}

void meta_scatter(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  check_scatter(m, self, need(m, 1, "index"), need(m, 2, "src"), attr_int(m, op::scatter_src::attr::dim));
  m.add_output(self.sizes(), self.dtype());
}

void meta_scatter_reduce(MetaCall& m) {
  using A = op::scatter_reduce_two::attr;
  const TensorImpl& self = need(m, 0, "self");
  const std::string reduce = string_attr(m, A::reduce, "");
  TESSERA_CHECK(reduce == "sum" || reduce == "prod" || reduce == "mean" || reduce == "amax" || reduce == "amin",
                m.op_name, ": reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
  check_scatter(m, self, need(m, 1, "index"), need(m, 2, "src"), attr_int(m, A::dim));
  TESSERA_CHECK(self.dtype() != kBool || reduce == "amax" || reduce == "amin", m.op_name, ": reduce=\"", reduce,
                "\" is not implemented for bool tensors");
  m.add_output(self.sizes(), self.dtype());
}

void meta_trilu(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(x.dim() >= 2, m.op_name, ": input tensor must have at least 2 dimensions, got ", x.sizes());
  m.add_output(x.sizes(), x.dtype());
}

void meta_flip(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  shape::reduce<int64_t>(m.op_name, x.sizes(), attr_ints(m, op::flip::attr::dims), false);  // checks dims
  m.add_output(x.sizes(), x.dtype());
}

void meta_repeat(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  IntArrayRef reps = attr_ints(m, op::repeat::attr::repeats);
  for (size_t i = 0; i < reps.size() && reps.size() >= size_t(x.dim()); ++i) {  // before the rule multiplies
    const size_t lead = reps.size() - size_t(x.dim());
    TESSERA_CHECK(i < lead || checked_mul(x.sizes()[i - lead], reps[i]), m.op_name, ": repeating size ",
                  x.sizes()[i - lead], " ", reps[i], " times overflows int64");
  }
  Sz out = sizes_by<shape::rules::repeat<int64_t>>(m);
  int64_t n = 1;
  for (int64_t s : out) {
    const std::optional<int64_t> p = checked_mul(n, s);
    TESSERA_CHECK(p, m.op_name, ": the repeated tensor of sizes ", out.ref(), " has more than 2^63 elements");
    n = *p;
  }
  TESSERA_CHECK(out.size() <= size_t(kMaxKernelDims), m.op_name, ": ", out.size(), " repeats give more than ",
                kMaxKernelDims, " dimensions");
  m.add_output(out, x.dtype());
}

void meta_conv_transpose2d(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& w = need(m, 1, "weight");
  check_floating_input(m, x);
  check_same_dtype(m, x, w, "input", "weight");
  for (int64_t s : x.sizes())  // Note [Checked extents] in shape_rules_structural.h
    TESSERA_CHECK(s < (int64_t(1) << 40), m.op_name, ": input size ", s, " is too large (at most 2^40 per dim)");
  Sz out = sizes_by<shape::rules::conv_transpose2d<int64_t>>(m);
  const int64_t c_out = out[out.size() - 3];
  if (m.has(2)) {
    check_channel_vector(m, 2, "bias", c_out);
    check_same_dtype(m, x, m.t(2), "input", "bias");
  }
  m.add_output(out, x.dtype());
}

void meta_resize(MetaCall& m) {
  using A = op::_resize::attr;
  const TensorImpl& x = need(m, 0, "self");
  const std::string mode = string_attr(m, A::mode, "nearest");
  const std::string coord = string_attr(m, A::coordinate_transformation_mode, "half_pixel");
  const std::string nearest = string_attr(m, A::nearest_mode, "round_prefer_floor");
  TESSERA_CHECK(mode == "nearest" || mode == "linear" || mode == "cubic", m.op_name,
                ": mode must be \"nearest\", \"linear\" or \"cubic\", got \"", mode, "\"");
  TESSERA_CHECK(coord == "half_pixel" || coord == "half_pixel_symmetric" || coord == "pytorch_half_pixel" ||
                    coord == "align_corners" || coord == "asymmetric" || coord == "tf_half_pixel_for_nearest",
                m.op_name, ": coordinate_transformation_mode \"", coord,
                "\" is not one of half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, "
                "tf_half_pixel_for_nearest (tf_crop_and_resize is not implemented)");
  TESSERA_CHECK(nearest == "round_prefer_floor" || nearest == "round_prefer_ceil" || nearest == "floor" ||
                    nearest == "ceil",
                m.op_name, ": nearest_mode must be round_prefer_floor, round_prefer_ceil, floor or ceil, got \"",
                nearest, "\"");
  TESSERA_CHECK(mode == "nearest" || is_floating(x.dtype()), m.op_name, ": mode \"", mode,
                "\" takes floating tensors, got ", x.dtype(), "; convert with .to(kFloat32)");
  Sz out = sizes_by<shape::rules::resize<int64_t>>(m);
  IntArrayRef size = attr_ints(m, A::size);
  for (size_t i = 0; i < size.size(); ++i)
    TESSERA_CHECK(size[i] == 0 || x.sizes()[size_t(x.dim()) - size.size() + i] > 0, m.op_name,
                  ": cannot resize an empty dimension to ", size[i]);
  if (m.has(op::_resize::tensor::scales)) {
    const TensorImpl& s = m.t(op::_resize::tensor::scales);
    TESSERA_CHECK(is_floating(s.dtype()) && s.dim() == 1 && s.numel() == int64_t(size.size()), m.op_name,
                  ": scales must be a 1-D floating tensor of ", size.size(), " values (one per resized dim), got ",
                  s.dtype(), " of shape ", s.sizes());
  }
  m.add_output(out, x.dtype());
}

void meta_logsumexp(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  Sz out = sizes_by<shape::rules::reduce<int64_t>>(m);
  const DType r = float_of(x.dtype());
  m.compute_dtype = r;
  m.cast_mask = 0b1;
  m.add_output(out, r);
}

void meta_vector_norm(MetaCall& m) {
  using A = op::linalg_vector_norm::attr;
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(is_floating(x.dtype()), m.op_name, ": expected a floating point tensor as input, got ", x.dtype(),
                "; convert with .to(kFloat32)");
  DType r = x.dtype();
  if (!attr_none(m, A::dtype)) {
    r = attr_dtype(m, A::dtype);
    TESSERA_CHECK(is_floating(r) && can_cast(x.dtype(), r), m.op_name, ": dtype ", r,
                  " must be a floating dtype the input (", x.dtype(), ") converts to");
  }
  const tessera_value_t& ord = attr(m, A::ord);
  TESSERA_CHECK(ord.kind == TESSERA_VALUE_DOUBLE || ord.kind == TESSERA_VALUE_INT, m.op_name, ": ord must be a number");
  const double p = attr_double(m, A::ord);
  Sz out = sizes_by<shape::rules::reduce_norm<int64_t>>(m);
  if (p < 0 || std::isinf(p)) {  // no identity: a reduced dim of size 0 has no maximum or minimum
    IntArrayRef dims = attr_ints(m, A::dim);
    bool empty = dims.empty() && x.numel() == 0;
    for (int64_t d : dims) empty = empty || (x.dim() > 0 && x.sizes()[size_t(shape::wrap(m.op_name, d, x.dim()))] == 0);
    TESSERA_CHECK(!empty, m.op_name, ": cannot compute the ", p, " norm over an empty dimension (shape ", x.sizes(),
                  "); the operation has no identity");
  }
  m.compute_dtype = r;
  m.cast_mask = 0b1;
  m.add_output(out, r);
}

}  // namespace tessera::meta
