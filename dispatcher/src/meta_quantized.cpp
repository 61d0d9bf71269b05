// Shape rules of the quantized ops of the catalogue (meta_rules.h).
#include <cmath>
#include <limits>
#include <optional>

#include "meta_rules.h"

namespace tessera::meta {

// Note [Packed int8 weights]
// _quantized_linear_prepack returns the weights in the backend's own int8 layout (oneDNN's blocked
// format on the CPU) as an opaque uint8 [out_features, bytes] tensor: out_features stays readable
// by the shape rule of _quantized_linear, everything else is the backend's. The dispatcher sizes
// it before any kernel runs, so the rule reserves an upper bound: a 4 KiB header, the scales, the
// weights padded to 64 in both dims (the largest block oneDNN uses for int8) and 16 bytes per
// padded output channel for the backend's compensation terms. The kernel checks that its layout
// fits and fails with the sizes otherwise.
void meta_quantized_linear_prepack(MetaCall& m) {
  const TensorImpl& w = need(m, 0, "weight");
  const TensorImpl& s = need(m, 1, "weight_scale");
  TESSERA_CHECK(w.dtype() == kInt8 && w.dim() == 2, m.op_name, ": weight must be a 2-D int8 tensor [out_features, ",
                "in_features], got ", w.dtype(), " ", w.sizes(), "; quantize it with quantize_per_channel first");
  const int64_t n = w.sizes()[0], k = w.sizes()[1];
  TESSERA_CHECK(n > 0 && k > 0, m.op_name, ": weight ", w.sizes(), " is empty; expected at least one input and one ",
                "output feature");
  TESSERA_CHECK(s.dtype() == kFloat32 && s.dim() == 1 && s.sizes()[0] == n, m.op_name,
                ": weight_scale must be float32 [", n, "] (one scale per output channel), got ", s.dtype(), " ",
                s.sizes());
  auto pad64 = [](int64_t v) { return (v + 63) / 64 * 64; };
  std::optional<int64_t> body = checked_mul(pad64(k), pad64(n));
  std::optional<int64_t> total = body ? checked_add(*body, 4096 + 64 + 8 * n + 16 * pad64(n)) : std::nullopt;
  TESSERA_CHECK(total.has_value(), m.op_name, ": weight ", w.sizes(), " is too large to pack");
  m.add_output(IntArrayRef({n, (*total + n - 1) / n}), kUInt8);
}

void check_quantize_input(const MetaCall& m, const TensorImpl& x, DType dt) {
  TESSERA_CHECK(x.dtype() == kFloat32, m.op_name, ": quantize only works on float32 tensors, got ", x.dtype(),
                "; convert with .to(kFloat32)");
  TESSERA_CHECK(is_quantized(dt), m.op_name, ": dtype ", dt, " is not a quantized dtype; expected qint8, quint8 or qint32");
}

void meta_quantize_per_tensor(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  using A = op::quantize_per_tensor::attr;
  const DType dt = attr_dtype(m, A::dtype);
  check_quantize_input(m, x, dt);
  QuantParams::per_tensor(dt, attr_double(m, A::scale), attr_int(m, A::zero_point));  // checks scale and zero point
  m.add_output(x.sizes(), dt);
}

void meta_quantize_per_channel(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  const TensorImpl& scales = need(m, 1, "scales");
  const TensorImpl& zps = need(m, 2, "zero_points");
  const int64_t axis = attr_int(m, op::quantize_per_channel::attr::axis);
  const DType dt = attr_dtype(m, op::quantize_per_channel::attr::dtype);
  check_quantize_input(m, x, dt);
  TESSERA_CHECK(axis >= 0 && axis < x.dim(), m.op_name, ": axis ", axis, " is out of range for a tensor of ", x.dim(),
                " dims; expected 0..", x.dim() - 1);
  const int64_t channels = x.sizes()[size_t(axis)];
  TESSERA_CHECK(scales.dim() == 1 && scales.sizes()[0] == channels && is_floating(scales.dtype()), m.op_name,
                ": scales must be a 1-D floating tensor of ", channels, " values (the size of dim ", axis, "), got ",
                scales.dtype(), " ", scales.sizes());
  TESSERA_CHECK(zps.dim() == 1 && zps.sizes()[0] == channels && is_integral(zps.dtype()), m.op_name,
                ": zero_points must be a 1-D integer tensor of ", channels, " values (the size of dim ", axis,
                "), got ", zps.dtype(), " ", zps.sizes());
  m.add_output(x.sizes(), dt);
}

// Note [Fake quantize]
// fake_quantize_per_tensor_affine / _per_channel_affine simulate quantization in float32 for
// quantization-aware training (docs/quantization.md, "Quantization-aware training"), as PyTorch's
// ops of those names (the per-tensor one is PyTorch's tensor_qparams overload: scale and zero point
// are tensors, so that training can move them without a new graph). Per element, in float32 as
// PyTorch's CPU kernels: q = int64(zero_point + nearbyint(x * (1 / scale))), the result
// (min(max(q, quant_min), quant_max) - zero_point) * scale. The gradient is the straight-through
// estimator: grad where quant_min <= q <= quant_max, 0 elsewhere (fake_quantize_backward in
// autograd/src/formula_helpers.cpp). The shape rule checks what needs no data (dtypes, sizes, the
// range); the kernel checks the values: a scale that is not finite and positive, a zero point
// outside [quant_min, quant_max].
namespace {
void check_fake_quantize(const MetaCall& m, const TensorImpl& x, const TensorImpl& scale, const TensorImpl& zp,
                         int64_t channels, int64_t quant_min, int64_t quant_max) {
  TESSERA_CHECK(x.dtype() == kFloat32, m.op_name, ": self must be float32, got ", x.dtype(),
                "; convert with .to(kFloat32)");
  TESSERA_CHECK(quant_min <= quant_max, m.op_name, ": quant_min ", quant_min, " is greater than quant_max ",
                quant_max, "; expected quant_min <= quant_max (e.g. 0 and 255 for quint8)");
  TESSERA_CHECK(scale.dtype() == kFloat32 && scale.numel() == channels && scale.dim() <= 1, m.op_name,
                ": scale must be a float32 tensor of ", channels, channels == 1 ? " value" : " values (the size of dim axis)",
                ", got ", scale.dtype(), " ", scale.sizes());
  TESSERA_CHECK((zp.dtype() == kInt32 || zp.dtype() == kInt64) && zp.numel() == channels && zp.dim() <= 1,
                m.op_name, ": zero_point must be an int32 or int64 tensor of ", channels,
                channels == 1 ? " value" : " values (the size of dim axis)", ", got ", zp.dtype(), " ", zp.sizes());
}
}  // namespace

void meta_fake_quantize_per_tensor_affine(MetaCall& m) {
  using A = op::fake_quantize_per_tensor_affine::attr;
  const TensorImpl& x = need(m, 0, "self");
  check_fake_quantize(m, x, need(m, 1, "scale"), need(m, 2, "zero_point"), 1, attr_int(m, A::quant_min),
                      attr_int(m, A::quant_max));
  m.add_output(x.sizes(), kFloat32);
}

void meta_fake_quantize_per_channel_affine(MetaCall& m) {
  using A = op::fake_quantize_per_channel_affine::attr;
  const TensorImpl& x = need(m, 0, "self");
  const int64_t axis = attr_int(m, A::axis);
  TESSERA_CHECK(axis >= 0 && axis < x.dim(), m.op_name, ": axis ", axis, " is out of range for a tensor of ", x.dim(),
                " dims; expected 0..", x.dim() - 1);
  check_fake_quantize(m, x, need(m, 1, "scale"), need(m, 2, "zero_point"), x.sizes()[size_t(axis)],
                      attr_int(m, A::quant_min), attr_int(m, A::quant_max));
  m.add_output(x.sizes(), kFloat32);
}

void meta_dequantize(MetaCall& m) {
  const TensorImpl& q = need(m, 0, "self");
  m.add_output(q.sizes(), is_quantized(q.dtype()) ? kFloat32 : q.dtype());
}

void meta_int_repr(MetaCall& m) {
  const TensorImpl& q = need(m, 0, "self");
  TESSERA_CHECK(is_quantized(q.dtype()), m.op_name, ": expected a quantized tensor (qint8, quint8, qint32), got ",
                q.dtype());
  m.add_output(q.sizes(), underlying_dtype(q.dtype()));
}

void check_quant_scale(const MetaCall& m, double scale, const char* what) {
  TESSERA_CHECK(std::isfinite(scale) && scale > 0 && scale <= double(std::numeric_limits<float>::max()), m.op_name,
                ": ", what, " must be a finite positive float32 value, got ", scale);
}

// The checks _quantized_linear and _quantized_linear_dynamic share; returns out_features.
int64_t check_quantized_linear_weights(const MetaCall& m, const TensorImpl& pw) {
  TESSERA_CHECK(pw.dtype() == kUInt8 && pw.dim() == 2, m.op_name, ": packed_weight must come from ",
                "_quantized_linear_prepack (uint8, 2-D), got ", pw.dtype(), " ", pw.sizes());
  const int64_t n = pw.sizes()[0];
  if (m.has(2)) {
    const TensorImpl& b = m.t(2);
    TESSERA_CHECK(b.dtype() == kFloat32 && b.dim() == 1 && b.sizes()[0] == n, m.op_name, ": bias must be float32 [",
                  n, "], got ", b.dtype(), " ", b.sizes());
  }
  return n;
}

void add_quantized_linear_output(MetaCall& m, const TensorImpl& x, int64_t n, DType out) {
  Sz sizes(x.sizes());
  sizes[sizes.size() - 1] = n;
  m.add_output(sizes, out);
}

void meta_quantized_linear(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& pw = need(m, 1, "packed_weight");
  TESSERA_CHECK((x.dtype() == kUInt8 || x.dtype() == kFloat32) && x.dim() >= 1, m.op_name,
                ": input must be the uint8 representation [..., in_features] of a quint8 tensor, or float32 values ",
                "to quantize with input_scale and input_zero_point, got ", x.dtype(), " ", x.sizes());
  const int64_t n = check_quantized_linear_weights(m, pw);
  using A = op::_quantized_linear::attr;
  check_quant_scale(m, attr_double(m, A::input_scale), "input_scale");
  const int64_t in_zp = attr_int(m, A::input_zero_point);
  TESSERA_CHECK(in_zp >= 0 && in_zp <= 255, m.op_name, ": input_zero_point ", in_zp,
                " is out of range for quint8; expected 0..255");
  const DType out = attr_dtype(m, A::out_dtype);
  TESSERA_CHECK(out == kUInt8 || out == kQUInt8 || out == kFloat32, m.op_name,
                ": out_dtype must be uint8 (requantised), quint8 (requantised, then dequantized to float32) or ",
                "float32, got ", out);
  if (out != kFloat32) {
    check_quant_scale(m, attr_double(m, A::output_scale), "output_scale");
    const int64_t out_zp = attr_int(m, A::output_zero_point);
    TESSERA_CHECK(out_zp >= 0 && out_zp <= 255, m.op_name, ": output_zero_point ", out_zp,
                  " is out of range for quint8; expected 0..255");
  }
  add_quantized_linear_output(m, x, n, out == kUInt8 ? kUInt8 : kFloat32);
}

void meta_quantized_linear_dynamic(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& pw = need(m, 1, "packed_weight");
  TESSERA_CHECK(x.dtype() == kFloat32 && x.dim() >= 1, m.op_name, ": input must be float32 [..., in_features], got ",
                x.dtype(), " ", x.sizes(), "; convert with .to(kFloat32)");
  add_quantized_linear_output(m, x, check_quantized_linear_weights(m, pw), kFloat32);
}

void check_quint8_params(const MetaCall& m, int scale_attr, const char* scale_name, const char* zp_name) {
  check_quant_scale(m, attr_double(m, scale_attr), scale_name);
  const int64_t zp = attr_int(m, scale_attr + 1);
  TESSERA_CHECK(zp >= 0 && zp <= 255, m.op_name, ": ", zp_name, " ", zp, " is out of range for quint8; expected 0..255");
}

void meta_quantized_conv2d(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& w = need(m, 1, "weight");
  const TensorImpl& ws = need(m, 2, "weight_scale");
  TESSERA_CHECK((x.dtype() == kUInt8 || x.dtype() == kFloat32) && x.dim() == 4, m.op_name,
                ": input must be the uint8 representation [N, C, H, W] of a quint8 tensor, or float32 values to ",
                "quantize with input_scale and input_zero_point, got ", x.dtype(), " ", x.sizes());
  TESSERA_CHECK(w.dtype() == kInt8 && w.dim() == 4, m.op_name, ": weight must be int8 [out_channels, ",
                "in_channels/groups, kH, kW], got ", w.dtype(), " ", w.sizes());
  const int64_t oc = w.sizes()[0];
  TESSERA_CHECK(ws.dtype() == kFloat32 && ws.dim() == 1 && ws.sizes()[0] == oc, m.op_name,
                ": weight_scale must be float32 [", oc, "] (one scale per output channel), got ", ws.dtype(), " ",
                ws.sizes());
  int64_t stride[2], padding[2], dilation[2];
  using A = op::_quantized_conv2d::attr;
  attr_pair(m, A::stride, "stride", stride);
  attr_pair(m, A::padding, "padding", padding);
  attr_pair(m, A::dilation, "dilation", dilation);
  Sz out = shape::conv2d<int64_t>(m.op_name, x.sizes(), w.sizes(), stride, padding, dilation, attr_int(m, A::groups));
  if (m.has(3)) {
    const TensorImpl& b = m.t(3);
    TESSERA_CHECK(b.dtype() == kFloat32 && b.dim() == 1 && b.sizes()[0] == oc, m.op_name, ": bias must be float32 [",
                  oc, "], got ", b.dtype(), " ", b.sizes());
  }
  check_quint8_params(m, A::input_scale, "input_scale", "input_zero_point");
  if (m.has(4)) {
    const TensorImpl& o = m.t(4);
    const IntArrayRef os = o.sizes(), want = out.ref();
    TESSERA_CHECK((o.dtype() == kUInt8 || o.dtype() == kFloat32) && std::equal(os.begin(), os.end(), want.begin(), want.end()),
                  m.op_name, ": other must be uint8 or float32 of the output's shape ", want, ", got ", o.dtype(), " ", os);
    check_quint8_params(m, A::other_scale, "other_scale", "other_zero_point");
  }
  check_quint8_params(m, A::output_scale, "output_scale", "output_zero_point");
  const DType dt = attr_dtype(m, A::out_dtype);
  TESSERA_CHECK(dt == kUInt8 || dt == kQUInt8, m.op_name,
                ": out_dtype must be uint8 (requantised) or quint8 (requantised, then dequantized to float32), got ", dt);
  m.add_output(out, dt == kUInt8 ? kUInt8 : kFloat32);
}

}  // namespace tessera::meta
