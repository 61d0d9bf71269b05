// The operator catalogue: the shape rule of every op of dispatcher/ops/ops.json (meta_rules.h): the
// creation, copy, pointwise and reduction rules here, the table the dispatcher defines its operators
// with, and the composites. The shape arithmetic lives in shape_rules.h (Note [Shape rules]); the
// rules add dtype rules and argument checks. Note [Compute dtype] (op_registry.h) says which inputs
// the dispatcher converts.
#include <cmath>
#include <string>

#include "meta_rules.h"
#include "tessera/ops.h"

namespace tessera {
namespace meta {

// ---- creation and copies

void meta_empty_strided(MetaCall& m) {
  using A = op::empty_strided::attr;
  IntArrayRef sizes = attr_ints(m, A::size), strides = attr_ints(m, A::stride);
  TESSERA_CHECK(sizes.size() == strides.size(), m.op_name, ": got ", sizes.size(), " sizes ", sizes, " and ",
                strides.size(), " strides ", strides, "; expected as many strides as sizes");
  DType dt = attr_none(m, A::dtype) ? default_dtype() : attr_dtype(m, A::dtype);
  auto& o = m.add_output(sizes, dt);
  o.strides = detail::SmallVector<int64_t, 8>(strides);
}

// fill_(Scalar): the value must fit the tensor's dtype (PyTorch's checked_convert).
void meta_fill_(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  using A = op::fill_::attr;
  if (m.num_attrs > A::value && attr(m, A::value).kind != TESSERA_VALUE_NONE)
    check_scalar_fits(scalar_of(attr(m, A::value)), self.dtype(), "fill_");
  m.alias_output(0);
}

// alpha of add/sub: PyTorch's alpha_check, then the value must fit the result dtype.
void check_alpha(const MetaCall& m, DType result) {
  if (m.num_attrs == 0) return;
  const tessera_value_t& a = m.attrs[0];
  if (a.kind == TESSERA_VALUE_NONE) return;
  // The default alpha (integer 1) passes every check for a non-bool result.
  if (a.kind == TESSERA_VALUE_INT && a.u.i == 1 && result != kBool) return;
  const Scalar alpha = scalar_of(a);
  TESSERA_CHECK(result == kBool || !alpha.is_bool(), m.op_name,
                ": boolean alpha only supported for boolean results; pass an integer alpha");
  TESSERA_CHECK(is_floating(result) || !alpha.is_floating(), m.op_name,
                ": for integral input tensors, argument alpha must not be a floating point number (got ",
                alpha, ")");
  if (scalar_overflows(alpha, result))  // the message is built only on failure (hot path)
    check_scalar_fits(alpha, result, (std::string(m.op_name) + " alpha").c_str());
}

void meta_random_(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  TESSERA_CHECK(is_floating(self.dtype()), m.op_name, ": expected a floating tensor, got ", self.dtype(),
                "; create it with a floating dtype (e.g. kFloat32)");
  m.alias_output(0);
}

// Copies and casts move values, not quantized representations (Note [Quantized reference kernels]).
void check_not_quantized(const MetaCall& m, const TensorImpl& t) {
  TESSERA_CHECK(!is_quantized(t.dtype()), "'", m.op_name, "' does not take quantized tensors (dtype ", t.dtype(),
                "); call dequantize() first, and quantize_per_tensor() on the result if needed");
}

void meta_copy_(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  const TensorImpl& src = need(m, 1, "src");
  check_not_quantized(m, self);
  check_not_quantized(m, src);
  sizes_by<shape::rules::copy_<int64_t>>(m);
  m.alias_output(0);
}

void meta_to_copy(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  check_not_quantized(m, self);
  DType dt = attr_none(m, op::_to_copy::attr::dtype) ? self.dtype() : attr_dtype(m, op::_to_copy::attr::dtype);
  m.add_output(self.sizes(), dt);
}

void meta_full_like(MetaCall& m) {
  using A = op::full_like::attr;
  const TensorImpl& self = need(m, 0, "self");
  const DType dt = attr_none(m, A::dtype) ? self.dtype() : attr_dtype(m, A::dtype);
  check_scalar_fits(scalar_of(attr(m, A::fill_value)), dt, "full_like");
  m.add_output(self.sizes(), dt);
}

void meta_same(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  m.add_output(self.sizes(), self.dtype());
}

void meta_arange(MetaCall& m) {
  using A = op::arange::attr;
  double start = attr_double(m, A::start), end = attr_double(m, A::end), step = attr_double(m, A::step);
  DType dt = attr_dtype(m, A::dtype);
  TESSERA_CHECK(step != 0, m.op_name, ": step must be nonzero");
  TESSERA_CHECK(std::isfinite(start) && std::isfinite(end), m.op_name, ": unsupported range ", start, " -> ",
                end);
  TESSERA_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), m.op_name,
                ": upper bound and larger bound inconsistent with step sign (start ", start, ", end ", end,
                ", step ", step, ")");
  double n = std::ceil((end - start) / step);
  TESSERA_CHECK(n >= 0 && n < 9.0e18, m.op_name, ": invalid number of elements ", n);
  int64_t count = int64_t(n);
  m.add_output(IntArrayRef(count), dt);
}

// ---- elementwise binary

enum class Bin { Arith, Sub, Pow, TrueDiv, Compare, Logical };

void check_pow_dtype(const MetaCall& m, DType r) {
  TESSERA_CHECK(r != kBool, m.op_name, ": not implemented for bool (both operands are bool); convert one with .to(kInt64)");
}

template <Bin K>
void meta_binary(MetaCall& m) {
  const TensorImpl& a = need(m, 0, "self");
  const TensorImpl& b = need(m, 1, "other");
  const bool same_sizes = a.sizes() == b.sizes();
  Sz out;
  if (!same_sizes) out = sizes_by<shape::rules::broadcast<int64_t>>(m);
  DType common = result_type(a, b);
  if constexpr (K == Bin::Sub) {
    TESSERA_CHECK(a.dtype() != kBool && b.dtype() != kBool, m.op_name,
                  ": Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to "
                  "invert a mask, use the `~` or `logical_not()` operator instead.");
  }
  if constexpr (K == Bin::Pow) check_pow_dtype(m, common);
  DType compute = common;
  if constexpr (K == Bin::TrueDiv) compute = float_of(common);
  DType result = (K == Bin::Compare || K == Bin::Logical) ? kBool : compute;
  if constexpr (K == Bin::Arith || K == Bin::Sub) check_alpha(m, result);
  m.compute_dtype = compute;
  m.cast_mask = 0b11;
  m.add_output(same_sizes ? a.sizes() : IntArrayRef(out), result);
}

void meta_pow_scalar(MetaCall& m) {
  const TensorImpl& a = need(m, 0, "self");
  const tessera_value_t& e = attr(m, op::pow_Tensor_Scalar::attr::exponent);
  ResultTypeState s;
  add_rt(s, a);
  s.add_tensor(e.kind == TESSERA_VALUE_DOUBLE ? kFloat64 : (e.kind == TESSERA_VALUE_BOOL ? kBool : kInt64),
               true, true);
  DType r = s.result();
  TESSERA_CHECK(!(is_integral(r, true) && e.kind == TESSERA_VALUE_INT && e.u.i < 0), m.op_name,
                ": integers to negative integer powers are not allowed (exponent ", e.u.i,
                ", dtype ", r, "); use a floating tensor or exponent");
  m.compute_dtype = r;
  m.cast_mask = 0b1;
  m.add_output(a.sizes(), r);
}

void meta_where(MetaCall& m) {
  const TensorImpl& c = need(m, 0, "condition");
  const TensorImpl& a = need(m, 1, "self");
  const TensorImpl& b = need(m, 2, "other");
  TESSERA_CHECK(c.dtype() == kBool, m.op_name, ": condition must be a bool tensor, got ", c.dtype(),
                "; build it with a comparison (e.g. gt) or .to(kBool)");
  Sz out = sizes_by<shape::rules::where<int64_t>>(m);
  DType r = result_type(a, b);
  m.compute_dtype = r;
  m.cast_mask = 0b110;
  m.add_output(out, r);
}

void meta_binary_inplace(MetaCall& m) {
  const TensorImpl& self = need(m, 0, "self");
  const TensorImpl& other = need(m, 1, "other");
  sizes_by<shape::rules::binary_inplace<int64_t>>(m);
  DType r = result_type(self, other);
  TESSERA_CHECK(can_cast(r, self.dtype()), m.op_name, ": result type ", r,
                " can't be cast to the desired output type ", self.dtype(), "; use the out-of-place op");
  check_alpha(m, self.dtype());
  m.compute_dtype = self.dtype();
  m.cast_mask = 0b10;
  m.alias_output(0);
}

// ---- unary

void meta_unary_float(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  DType r = float_of(x.dtype());
  m.compute_dtype = r;
  m.cast_mask = 0b1;
  m.add_output(x.sizes(), r);
}

void meta_unary_float_only(MetaCall& m) {
  check_floating_input(m, need(m, 0, "self"));
  meta_unary_float(m);
}

void meta_unary_nobool(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(x.dtype() != kBool, m.op_name,
                ": not supported for bool tensors; convert with .to(kInt64) or use "
                "logical ops");
  m.add_output(x.sizes(), x.dtype());
}

void meta_gelu(MetaCall& m) {
  const tessera_value_t& a = attr(m, op::gelu::attr::approximate);
  std::string approx = a.kind == TESSERA_VALUE_STRING && a.u.s ? a.u.s : "none";
  TESSERA_CHECK(approx == "none" || approx == "tanh", m.op_name,
                ": approximate must be \"none\" or \"tanh\", got \"", approx, "\"");
  meta_unary_float_only(m);
}

// clamp(self, Scalar? min, Scalar? max): PyTorch's rule, a floating self keeps its dtype, any other
// promotes with the bounds as wrapped numbers (int8 with a float bound computes in float32); bool is
// refused, and each bound must fit the result dtype.
void meta_clamp(MetaCall& m) {
  const TensorImpl& x = need(m, op::clamp::tensor::self, "self");
  const int bounds[] = {op::clamp::attr::min, op::clamp::attr::max};
  TESSERA_CHECK(!attr_none(m, bounds[0]) || !attr_none(m, bounds[1]), m.op_name,
                ": at least one of 'min' or 'max' must not be None");
  DType r = x.dtype();
  if (!is_floating(r)) {
    ResultTypeState s;
    add_rt(s, x);
    for (int b : bounds)
      if (!attr_none(m, b)) s.add_tensor(scalar_of(attr(m, b)).dtype(), true, true);
    r = s.result();
  }
  TESSERA_CHECK(r != kBool, m.op_name, ": not implemented for bool tensors; convert with .to(kInt64)");
  for (int b : bounds)
    if (!attr_none(m, b)) check_scalar_fits(scalar_of(attr(m, b)), r, b == bounds[0] ? "clamp min" : "clamp max");
  m.compute_dtype = r;
  m.cast_mask = 0b1;
  m.add_output(x.sizes(), r);
}

// ---- reductions

void meta_sum_prod(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  Sz out = sizes_by<shape::rules::reduce<int64_t>>(m);
  DType r = is_floating(x.dtype()) ? x.dtype() : kInt64;
  m.compute_dtype = r;
  m.cast_mask = 0b1;
  m.add_output(out, r);
}

void meta_mean(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(is_floating(x.dtype()), m.op_name, ": expected a floating input, got ", x.dtype(),
                "; convert with .to(kFloat32) first");
  Sz out = sizes_by<shape::rules::reduce<int64_t>>(m);
  m.add_output(out, x.dtype());
}

void meta_var(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(is_floating(x.dtype()), m.op_name, ": expected a floating input, got ", x.dtype(),
                "; convert with .to(kFloat32) first");
  Sz out = sizes_by<shape::rules::reduce_var<int64_t>>(m);
  TESSERA_CHECK(attr_int(m, op::var::attr::correction) >= 0, m.op_name, ": correction must be non-negative, got ",
                attr_int(m, op::var::attr::correction));
  m.add_output(out, x.dtype());
}

void meta_amax(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  IntArrayRef dims = attr_ints(m, op::amax::attr::dim);
  if (dims.empty()) {
    TESSERA_CHECK(x.numel() > 0, m.op_name, ": cannot reduce an empty tensor (shape ", x.sizes(),
                  "); the operation has no identity");
  } else {
    for (int64_t d : dims) {
      int64_t w = shape::wrap(m.op_name, d, x.dim());
      TESSERA_CHECK(x.dim() == 0 || x.sizes()[size_t(w)] > 0, m.op_name, ": cannot reduce over dimension ", d,
                    " of size 0 (shape ", x.sizes(), "); the operation has no identity");
    }
  }
  Sz out = sizes_by<shape::rules::reduce<int64_t>>(m);
  m.add_output(out, x.dtype());
}

void meta_argmax(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(x.dtype() != kBool, m.op_name, ": does not support bool input; convert it with .to(kInt64)");
  if (attr_none(m, op::argmax::attr::dim)) {
    TESSERA_CHECK(x.numel() > 0, m.op_name, ": expected a non-empty tensor, got shape ", x.sizes());
  } else {
    int64_t d = attr_int(m, op::argmax::attr::dim);
    int64_t w = shape::wrap(m.op_name, d, x.dim());
    TESSERA_CHECK(x.dim() == 0 || x.sizes()[size_t(w)] > 0, m.op_name, ": cannot reduce over dimension ", d,
                  " of size 0");
  }
  m.add_output(sizes_by<shape::rules::reduce_argmax<int64_t>>(m), kInt64);
}

// Note [Core op set]: the names and schemas are the contract with every backend plugin. They are
// declared in dispatcher/ops/ops.json (Note [Op contract]); each op's "shape_rule" names one of the
// meta_<rule> functions (here, meta_nn.cpp, meta_quantized.cpp), its "sizes" the shape::rules
// template they size the outputs with.
void meta_binary_arith(MetaCall& m) { meta_binary<Bin::Arith>(m); }
void meta_binary_sub(MetaCall& m) { meta_binary<Bin::Sub>(m); }
void meta_binary_pow(MetaCall& m) { meta_binary<Bin::Pow>(m); }
void meta_binary_true_div(MetaCall& m) { meta_binary<Bin::TrueDiv>(m); }
void meta_binary_compare(MetaCall& m) { meta_binary<Bin::Compare>(m); }
void meta_binary_logical(MetaCall& m) { meta_binary<Bin::Logical>(m); }

}  // namespace meta

namespace {
constexpr MetaFn kCoreMetas[] = {
#define TESSERA_META(rule) meta::meta_##rule,
#include "op_catalogue.inc"
#undef TESSERA_META
};
static_assert(sizeof(kCoreMetas) / sizeof(kCoreMetas[0]) == size_t(op::kNumOpInfos),
              "op_catalogue.inc and tessera/op_info.h come from the same ops.json");
}  // namespace

MetaFn core_meta(int index) { return kCoreMetas[index]; }

// Composites: decompositions that run on any device whose plugin lacks a kernel for the op.
void register_core_composites(Dispatcher& d) {
  d.register_composite(d.op("_to_copy"), [](const Stack& args) -> Stack {
    const Tensor& self = std::get<Tensor>(args[0]);
    DType dt = std::holds_alternative<DType>(args[1]) ? std::get<DType>(args[1]) : self.dtype();
    Tensor out = make_tensor(self.sizes(), dt, self.device());
    out.copy_(self);
    return {out};
  });
  d.register_composite(d.op("clone"), [](const Stack& args) -> Stack {
    const Tensor& self = std::get<Tensor>(args[0]);
    Tensor out = make_tensor(self.sizes(), self.dtype(), self.device());
    out.copy_(self);
    return {out};
  });
  // Note [Factories of a traced size]: zeros_like(t) and ones_like(t) are this op, not a factory
  // given t.sizes(), so that a capture records the output's sizes as t's, symbolic ones included
  // (the backward's masks and zeros under a compiled training step with a dynamic batch).
  d.register_composite(d.op("full_like"), [](const Stack& args) -> Stack {
    const Tensor& self = std::get<Tensor>(args[0]);
    const DType dt = std::holds_alternative<DType>(args[2]) ? std::get<DType>(args[2]) : self.dtype();
    Tensor out = make_tensor(self.sizes(), dt, self.device());
    if (const auto* i = std::get_if<int64_t>(&args[1])) out.fill_(Scalar(*i));
    else if (const auto* b = std::get_if<bool>(&args[1])) out.fill_(Scalar(*b));
    else out.fill_(Scalar(std::get<double>(args[1])));
    return {out};
  });
  d.register_composite(d.op("contiguous"), [](const Stack& args) -> Stack {
    const Tensor& self = std::get<Tensor>(args[0]);
    if (self.is_contiguous()) return {self};
    Tensor out = make_tensor(self.sizes(), self.dtype(), self.device());
    out.copy_(self);
    return {out};
  });
  d.register_composite(d.op("empty_strided"), [](const Stack& args) -> Stack {
    const auto& sizes = std::get<std::vector<int64_t>>(args[0]);
    const auto& strides = std::get<std::vector<int64_t>>(args[1]);
    DType dt = std::holds_alternative<DType>(args[2]) ? std::get<DType>(args[2]) : default_dtype();
    return {make_tensor_strided(sizes, strides, dt, Device(DeviceType::CPU))};
  });
  register_quantization_composites(d);
  // _fused_sgd_ likewise: SGD's update with momentum in contract ops.
  d.register_composite(d.op("_fused_sgd_"), [](const Stack& args) -> Stack {
    Tensor p = std::get<Tensor>(args[0]), buf = std::get<Tensor>(args[1]);
    Tensor g = std::get<Tensor>(args[2]);
    const double lr = std::get<double>(args[3]), mom = std::get<double>(args[4]);
    const double dampening = std::get<double>(args[5]), wd = std::get<double>(args[6]);
    auto number = [](double x) { return scalar_tensor(x, kFloat64); };
    if (wd != 0) g = add(g, mul(p, number(wd)));
    if (std::get<bool>(args[8])) {
      buf.copy_(g);
    } else {
      buf.mul_(number(mom));
      buf.add_(g, 1 - dampening);
    }
    p.add_(std::get<bool>(args[7]) ? add(g, mul(buf, number(mom))) : buf, -lr);
    return {p, buf};
  });
  // _fused_adam_ on a device without a kernel: the same update in contract ops, one parameter at a
  // time (nn.h's unfused step does the same with the optimizer's own tensors).
  d.register_composite(d.op("_fused_adam_"), [](const Stack& args) -> Stack {
    Tensor p = std::get<Tensor>(args[0]), m = std::get<Tensor>(args[1]), v = std::get<Tensor>(args[2]);
    Tensor g = std::get<Tensor>(args[3]);
    const double lr = std::get<double>(args[4]), b1 = std::get<double>(args[5]), b2 = std::get<double>(args[6]);
    const double wd = std::get<double>(args[7]), eps = std::get<double>(args[8]);
    const double bc1 = std::get<double>(args[9]), bc2 = std::get<double>(args[10]);
    auto number = [](double x) { return scalar_tensor(x, kFloat64); };
    if (wd != 0) {
      if (std::get<bool>(args[11])) p.mul_(number(1 - lr * wd));
      else g = add(g, mul(p, number(wd)));
    }
    m.mul_(number(b1));
    m.add_(g, 1 - b1);
    v.mul_(number(b2));
    v.add_(mul(g, g), 1 - b2);
    p.add_(div(m, add(sqrt(div(v, number(bc2))), number(eps))), -lr / bc1);
    return {p, m, v};
  });
  // The multi-tensor steps on a device without a kernel for them: the per-parameter op, which runs
  // the device's own _fused_adam_ / _fused_sgd_ kernel or its composite.
  d.register_composite(d.op("_multi_tensor_adam_"), [](const Stack& args) -> Stack {
    const std::vector<Tensor>& t = std::get<std::vector<Tensor>>(args[0]);
    const FusedAdamArgs a{std::get<double>(args[1]), std::get<double>(args[2]), std::get<double>(args[3]),
                          std::get<double>(args[4]), std::get<double>(args[5]), std::get<double>(args[6]),
                          std::get<double>(args[7]), std::get<bool>(args[8])};
    const size_t n = t.size() / 4;
    for (size_t i = 0; i < n; ++i) _fused_adam_(t[i], t[n + i], t[2 * n + i], t[3 * n + i], a);
    return {};
  });
  d.register_composite(d.op("_multi_tensor_sgd_"), [](const Stack& args) -> Stack {
    const std::vector<Tensor>& t = std::get<std::vector<Tensor>>(args[0]);
    const FusedSgdArgs a{std::get<double>(args[1]), std::get<double>(args[2]), std::get<double>(args[3]),
                         std::get<double>(args[4]), std::get<bool>(args[5]),   std::get<bool>(args[6])};
    const size_t n = t.size() / 3;
    for (size_t i = 0; i < n; ++i) _fused_sgd_(t[i], t[n + i], t[2 * n + i], a);
    return {};
  });
  d.register_composite(d.op("linear"), [](const Stack& args) -> Stack {
    const Tensor& x = std::get<Tensor>(args[0]);
    const Tensor& w = std::get<Tensor>(args[1]);
    Tensor out = matmul(x, w.t());
    if (const auto* b = std::get_if<std::optional<Tensor>>(&args[2]); b && *b) out = add(out, **b);
    return {out};
  });
}

}  // namespace tessera
