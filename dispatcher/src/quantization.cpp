// tessera/quantization.h: quantized tensors (the ops quantize_per_tensor, quantize_per_channel,
// dequantize, int_repr and their reference kernels) and quantized linear layers over the ops
// _quantized_linear_prepack and _quantized_linear of the op contract.
#include "tessera/quantization.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <variant>
#include <vector>

#include "op_registry.h"
#include "tessera/dispatcher.h"
#include "tessera/ops.h"

namespace tessera {
namespace {

OperatorEntry& op_named(const char* name) { return Dispatcher::instance().op(name); }

Tensor call1(OperatorEntry& op, std::initializer_list<const TensorImpl*> ts, std::initializer_list<tessera_value_t> as) {
  CallFrame f{ts.begin(), int(ts.size()), as.begin(), int(as.size()), nullptr};
  return call_unboxed_one(op, f);
}

// The representation of a quantized tensor as a plain integer tensor over the same storage.
Tensor repr_view(const Tensor& q) {
  return Tensor(make_intrusive<TensorImpl>(q.storage(), underlying_dtype(q.dtype()), q.device(), q.sizes(),
                                           q.strides(), q.storage_offset()));
}

const TensorImpl* impl_of(const Tensor& t, const char* op, const char* arg) {
  TESSERA_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
  return t.impl();
}

double number(const Value& v) { return std::holds_alternative<double>(v) ? std::get<double>(v) : double(std::get<int64_t>(v)); }

void check_cpu(const Tensor& t, const char* op) {
  TESSERA_CHECK(t.is_cpu(), op, ": quantized tensors live on the CPU; got a tensor on ", t.device().str(),
                "; move it with .cpu()");
}

// A 1-D tensor's values as double / int64 (any device, any strides).
std::vector<double> doubles_of(const Tensor& t) {
  Tensor c = t.cpu().to(kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}
std::vector<int64_t> ints_of(const Tensor& t) {
  Tensor c = t.cpu().to(kInt64).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

}  // namespace

// Note [Quantized reference kernels]: the four ops run as composites in the runtime, because the
// quantization parameters live in the tensor (quant_params.h) and do not cross the plugin ABI. The
// arithmetic is in core (detail::quantize_reference / dequantize_reference), shared with printing.
// A quantized tensor carries the Quantized dispatch key; an op with no kernel for that key reaches
// the dtype check of its dense kernel and fails naming dequantize() (Dispatcher resolve).
void register_quantization_composites(Dispatcher& d) {
  d.register_composite(d.op("quantize_per_tensor"), [](const Stack& args) -> Stack {
    const Tensor& x = std::get<Tensor>(args[0]);
    check_cpu(x, "quantize_per_tensor");
    return {detail::quantize_reference(
        x, QuantParams::per_tensor(std::get<DType>(args[3]), number(args[1]), std::get<int64_t>(args[2])))};
  });
  d.register_composite(d.op("quantize_per_channel"), [](const Stack& args) -> Stack {
    const Tensor& x = std::get<Tensor>(args[0]);
    check_cpu(x, "quantize_per_channel");
    auto q = QuantParams::per_channel(std::get<DType>(args[4]), doubles_of(std::get<Tensor>(args[1])),
                                    ints_of(std::get<Tensor>(args[2])), std::get<int64_t>(args[3]));
    return {detail::quantize_reference(x, std::move(q))};
  });
  d.register_composite(d.op("dequantize"), [](const Stack& args) -> Stack {
    const Tensor& q = std::get<Tensor>(args[0]);
    if (!is_quantized(q.dtype())) return {q};
    check_cpu(q, "dequantize");
    return {detail::dequantize_reference(q)};
  });
  d.register_composite(d.op("int_repr"), [](const Stack& args) -> Stack {
    const Tensor& q = std::get<Tensor>(args[0]);
    check_cpu(q, "int_repr");
    return {repr_view(q).clone()};
  });
}

Tensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, DType dtype) {
  static OperatorEntry& op = op_named("quantize_per_tensor");
  return call1(op, {impl_of(x, "quantize_per_tensor", "self")},
               {value_double(scale), value_int(zero_point), value_dtype(dtype)});
}

Tensor quantize_per_channel(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis,
                            DType dtype) {
  static OperatorEntry& op = op_named("quantize_per_channel");
  return call1(op,
               {impl_of(x, "quantize_per_channel", "self"), impl_of(scales, "quantize_per_channel", "scales"),
                impl_of(zero_points, "quantize_per_channel", "zero_points")},
               {value_int(axis), value_dtype(dtype)});
}

Tensor dequantize(const Tensor& q) {
  static OperatorEntry& op = op_named("dequantize");
  return call1(op, {impl_of(q, "dequantize", "self")}, {});
}

Tensor int_repr(const Tensor& q) {
  static OperatorEntry& op = op_named("int_repr");
  return call1(op, {impl_of(q, "int_repr", "self")}, {});
}

}  // namespace tessera

namespace tessera::quantization {

PackedLinearWeight::PackedLinearWeight(const Tensor& weight, const Tensor& scales) {
  static OperatorEntry& op = op_named("_quantized_linear_prepack");
  TESSERA_CHECK(weight.defined() && scales.defined(), "PackedLinearWeight: weight and scales must be defined tensors");
  packed_ = call1(op, {weight.impl(), scales.impl()}, {});
  scales_ = scales.contiguous();
  out_features_ = weight.size(0);
  in_features_ = weight.size(1);
}

PackedLinearWeight PackedLinearWeight::from_float(const Tensor& weight) {
  TESSERA_CHECK(weight.defined() && weight.dim() == 2 && is_floating(weight.dtype()),
                "PackedLinearWeight::from_float: expected a floating weight [out_features, in_features], got ",
                weight.defined() ? std::string(dtype_name(weight.dtype())) : std::string("an undefined tensor"));
  Tensor w = weight.cpu().to(kFloat32).contiguous();
  const int64_t n = w.size(0), k = w.size(1);
  std::vector<double> scales(static_cast<size_t>(n));
  const float* p = w.data_ptr<float>();
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0;
    for (int64_t q = 0; q < k; ++q) amax = std::max(amax, std::abs(p[j * k + q]));
    TESSERA_CHECK(std::isfinite(amax), "PackedLinearWeight::from_float: row ", j, " of the weight is not finite");
    scales[size_t(j)] = std::max(double(float(amax / 127.5f)), double(std::numeric_limits<float>::epsilon()));
  }
  Tensor st = tensor(scales).to(kFloat32);
  Tensor qw = quantize_per_channel(w, st, zeros({n}, kInt64), 0, kQInt8);
  return PackedLinearWeight(repr_view(qw), st);
}

QParams choose_qparams(double min_val, double max_val, DType dtype) {
  TESSERA_CHECK(std::isfinite(min_val) && std::isfinite(max_val) && min_val <= max_val,
                "choose_qparams: the range [", min_val, ", ", max_val, "] must be finite and ordered");
  const double lo = double(quant_min(dtype)), hi = double(quant_max(dtype));
  const float min_neg = float(std::min(min_val, 0.0)), max_pos = float(std::max(max_val, 0.0));
  float scale = (max_pos - min_neg) / float(hi - lo);
  scale = std::max(scale, std::numeric_limits<float>::epsilon());
  const double zp = lo - double(std::nearbyint(min_neg / scale));
  return {double(scale), int64_t(std::clamp(zp, lo, hi))};
}

Tensor quantized_linear(const Tensor& input, const PackedLinearWeight& weight, const std::optional<Tensor>& bias,
                        double output_scale, int64_t output_zero_point, bool relu) {
  TESSERA_CHECK(input.defined() && input.dtype() == kQUInt8 && input.impl()->qparams() &&
                    input.impl()->qparams()->qscheme() == QScheme::PerTensorAffine,
                "quantized_linear: input must be a quint8 per-tensor quantized tensor, got ",
                input.defined() ? std::string(dtype_name(input.dtype())) : std::string("an undefined tensor"),
                "; quantize it with quantize_per_tensor(x, scale, zero_point, kQUInt8)");
  const QuantParams& q = *input.impl()->qparams();
  auto out_q = QuantParams::per_tensor(kQUInt8, output_scale, output_zero_point);
  Tensor y = linear_int8(repr_view(input), q.scale(), q.zero_point(), weight, bias, output_scale, output_zero_point,
                         relu, kUInt8);
  Tensor out(make_intrusive<TensorImpl>(y.storage(), kQUInt8, y.device(), y.sizes(), y.strides(), y.storage_offset()));
  out.impl()->set_qparams(std::move(out_q));
  return out;
}

DynamicQuantizedLinear::DynamicQuantizedLinear(const Tensor& weight, const std::optional<Tensor>& bias)
    : weight_(PackedLinearWeight::from_float(weight)) {
  if (bias && bias->defined()) bias_ = bias->cpu().to(kFloat32).contiguous();
}

Tensor DynamicQuantizedLinear::forward(const Tensor& x) const {
  TESSERA_CHECK(x.defined() && x.dtype() == kFloat32, "DynamicQuantizedLinear: expected a float32 input, got ",
                x.defined() ? std::string(dtype_name(x.dtype())) : std::string("an undefined tensor"));
  TESSERA_CHECK(x.numel() > 0, "DynamicQuantizedLinear: the input ", x.sizes(), " is empty");
  const double lo = amin(x).item<float>(), hi = amax(x).item<float>();
  TESSERA_CHECK(std::isfinite(lo) && std::isfinite(hi), "DynamicQuantizedLinear: the input holds non-finite values (",
                lo, ", ", hi, "); quantisation needs a finite range");
  const QParams p = choose_qparams(lo, hi, kQUInt8);
  Tensor qx = quantize_per_tensor(x, p.scale, p.zero_point, kQUInt8);
  return linear_int8(repr_view(qx), p.scale, p.zero_point, weight_, bias_, 1.0, 0, false, kFloat32);
}

Tensor linear_int8(const Tensor& input, double input_scale, int64_t input_zero_point, const PackedLinearWeight& weight,
                   const std::optional<Tensor>& bias, double output_scale, int64_t output_zero_point, bool relu,
                   DType out_dtype) {
  static OperatorEntry& op = op_named("_quantized_linear");
  TESSERA_CHECK(input.defined(), "linear_int8: input is an undefined tensor");
  TESSERA_CHECK(weight.defined(), "linear_int8: the packed weight is empty; construct it from int8 weights and scales");
  const TensorImpl* b = bias && bias->defined() ? bias->impl() : nullptr;
  return call1(op, {input.impl(), weight.packed().impl(), b},
               {value_double(input_scale), value_int(input_zero_point), value_double(output_scale),
                value_int(output_zero_point), value_bool(relu), value_dtype(out_dtype)});
}

}  // namespace tessera::quantization
