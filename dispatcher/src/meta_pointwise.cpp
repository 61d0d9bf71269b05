// Shape rules of the pointwise ops added for ONNX models (meta_rules.h): activations with
// parameters, predicates, bitwise and shift ops, and the integer-division family. The dtype rules
// are PyTorch's (docs/pointwise-ops.md lists the ops; docs/semantics.md the differences).
#include "meta_rules.h"

namespace tessera::meta {

namespace {

void refuse_quantized(const MetaCall& m, const TensorImpl& t) {
  TESSERA_CHECK(!is_quantized(t.dtype()), m.op_name, ": does not take quantized tensors (dtype ", t.dtype(),
                "); call dequantize() first");
}

// The promoted dtype of a two-tensor op, sizes broadcast; both inputs are converted to it.
void binary_promoted(MetaCall& m, DType r) {
  const TensorImpl& a = need(m, 0, "self");
  const TensorImpl& b = need(m, 1, "other");
  m.compute_dtype = r;
  m.cast_mask = 0b11;
  if (a.sizes() == b.sizes()) {
    m.add_output(a.sizes(), r);
  } else {
    Sz out = sizes_by<shape::rules::broadcast<int64_t>>(m);
    m.add_output(out, r);
  }
}

}  // namespace

// celu(self, alpha): PyTorch divides by alpha (input_scale = 1 / alpha) and refuses 0.
void meta_celu(MetaCall& m) {
  TESSERA_CHECK(attr_double(m, op::celu::attr::alpha) != 0, m.op_name,
                ": alpha must not be 0 (celu computes exp(self / alpha)); pass a nonzero alpha");
  meta_unary_float_only(m);
}

// hardtanh(self, min_val, max_val): PyTorch's hardtanh_out keeps self's dtype (the bounds never
// promote): an integral self takes the bounds truncated to integers, uint8 refuses a negative
// bound, bool is refused.
void meta_hardtanh(MetaCall& m) {
  using A = op::hardtanh::attr;
  const TensorImpl& x = need(m, 0, "self");
  refuse_quantized(m, x);
  TESSERA_CHECK(x.dtype() != kBool, m.op_name, ": bool inputs are not supported; convert with .to(kFloat32)");
  if (x.dtype() == kUInt8) {
    const double lo = attr_double(m, A::min_val), hi = attr_double(m, A::max_val);
    TESSERA_CHECK(lo > -1 && hi > -1, m.op_name,
                  ": cannot do hardtanh on an unsigned type with negative limits (min_val ", lo, ", max_val ", hi,
                  "); pass limits >= 0 or convert self to a signed dtype");
  }
  m.add_output(x.sizes(), x.dtype());
}

// prelu(self, weight): PyTorch's checks; weight holds one value, or one per channel (dim 1 of self),
// and must have self's floating dtype.
void meta_prelu(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  const TensorImpl& w = need(m, 1, "weight");
  check_floating_input(m, x);
  TESSERA_CHECK(x.dtype() == w.dtype(), m.op_name, ": type promoting is not supported, got self ", x.dtype(),
                " and weight ", w.dtype(), "; convert weight with .to(", x.dtype(), ")");
  TESSERA_CHECK(w.dim() <= 1, m.op_name, ": expected weight to be a scalar or 1-D tensor, got shape ", w.sizes());
  if (w.numel() != 1) {
    TESSERA_CHECK(x.dim() > 0, m.op_name, ": a 0-dim self takes a weight of one element, got shape ", w.sizes());
    const int64_t channels = x.dim() > 1 ? x.sizes()[1] : 1;
    TESSERA_CHECK(w.numel() == channels, m.op_name, ": weight has ", w.numel(),
                  " elements but self has channel size ", channels, " (dim 1 of shape ", x.sizes(),
                  "); pass one weight or one per channel");
  }
  m.add_output(x.sizes(), x.dtype());
}

// _prelu_kernel(self, weight): weight broadcast against self (ONNX PRelu's slope), same floating dtype.
void meta_prelu_kernel(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  const TensorImpl& w = need(m, 1, "weight");
  check_floating_input(m, x);
  TESSERA_CHECK(x.dtype() == w.dtype(), m.op_name, ": type promoting is not supported, got self ", x.dtype(),
                " and weight ", w.dtype(), "; convert weight with .to(", x.dtype(), ")");
  binary_promoted(m, x.dtype());
}

// sign(self): self's dtype, bool included (the sign of true is true).
void meta_sign(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  refuse_quantized(m, x);
  m.add_output(x.sizes(), x.dtype());
}

// isnan, isinf, logical_not: any dtype in, bool out.
void meta_unary_predicate(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  refuse_quantized(m, x);
  m.add_output(x.sizes(), kBool);
}

// bitwise_not: integral and bool tensors, self's dtype.
void meta_unary_bitwise(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  refuse_quantized(m, x);
  TESSERA_CHECK(is_integral(x.dtype(), true), m.op_name, ": not implemented for ", x.dtype(),
                " tensors (it takes integral and bool tensors); convert with .to(kInt64)");
  m.add_output(x.sizes(), x.dtype());
}

// remainder, fmod, floor_divide: promoted like add, a bool result refused (as pow's rule).
void meta_binary_nobool(MetaCall& m) { meta_binary_pow(m); }

// bitwise_and/or/xor: promoted; a floating result is refused.
void meta_binary_bitwise(MetaCall& m) {
  const DType r = result_type(need(m, 0, "self"), need(m, 1, "other"));
  TESSERA_CHECK(is_integral(r, true), m.op_name, ": not implemented for ", r,
                " (it takes integral and bool tensors); convert both operands with .to(kInt64)");
  binary_promoted(m, r);
}

// bitwise_left_shift / bitwise_right_shift: promoted; integral results only (not bool).
void meta_binary_shift(MetaCall& m) {
  const DType r = result_type(need(m, 0, "self"), need(m, 1, "other"));
  TESSERA_CHECK(is_integral(r, false), m.op_name, ": not implemented for ", r,
                " (it takes integral tensors); convert both operands with .to(kInt64)");
  binary_promoted(m, r);
}

}  // namespace tessera::meta
