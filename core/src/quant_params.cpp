// QuantParams: validated quantization parameters (quant_params.h).
#include "tessera/quant_params.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

#include "tessera/error.h"
#include "tessera/tensor.h"

namespace tessera {

int64_t quant_min(DType t) {
  TESSERA_CHECK(is_quantized(t), "quant_min: ", t, " is not a quantized dtype; expected qint8, quint8 or qint32");
  return t == kQInt8 ? -128 : t == kQUInt8 ? 0 : int64_t(std::numeric_limits<int32_t>::min());
}
int64_t quant_max(DType t) {
  TESSERA_CHECK(is_quantized(t), "quant_max: ", t, " is not a quantized dtype; expected qint8, quint8 or qint32");
  return t == kQInt8 ? 127 : t == kQUInt8 ? 255 : int64_t(std::numeric_limits<int32_t>::max());
}

namespace {
void check_param(DType dtype, double scale, int64_t zero_point, const std::string& where) {
  TESSERA_CHECK(std::isfinite(scale) && scale > 0 && scale <= double(std::numeric_limits<float>::max()),
                "quantizer: scale", where, " is ", scale, "; expected a finite positive value (float32 range)");
  TESSERA_CHECK(zero_point >= quant_min(dtype) && zero_point <= quant_max(dtype), "quantizer: zero_point", where,
                " is ", zero_point, ", out of range for ", dtype, "; expected ", quant_min(dtype), "..",
                quant_max(dtype));
}
}  // namespace

QuantParams::QuantParams(DType dtype, QScheme q, std::vector<double> scales, std::vector<int64_t> zero_points,
                     int64_t axis)
    : dtype_(dtype), qscheme_(q), scales_(std::move(scales)), zero_points_(std::move(zero_points)), axis_(axis) {}

IntrusivePtr<const QuantParams> QuantParams::per_tensor(DType dtype, double scale, int64_t zero_point) {
  TESSERA_CHECK(is_quantized(dtype), "quantizer: dtype ", dtype, " is not quantized; expected qint8, quint8 or qint32");
  check_param(dtype, scale, zero_point, "");
  return IntrusivePtr<const QuantParams>(new QuantParams(dtype, QScheme::PerTensorAffine, {scale}, {zero_point}, -1));
}

IntrusivePtr<const QuantParams> QuantParams::per_channel(DType dtype, std::vector<double> scales,
                                                     std::vector<int64_t> zero_points, int64_t axis) {
  TESSERA_CHECK(is_quantized(dtype), "quantizer: dtype ", dtype, " is not quantized; expected qint8, quint8 or qint32");
  TESSERA_CHECK(!scales.empty() && scales.size() == zero_points.size(), "quantizer: got ", scales.size(),
                " scales and ", zero_points.size(), " zero points; expected one of each per channel");
  TESSERA_CHECK(axis >= 0, "quantizer: axis ", axis, " is negative; expected a dimension index >= 0");
  for (size_t c = 0; c < scales.size(); ++c)
    check_param(dtype, scales[c], zero_points[c], '[' + std::to_string(c) + ']');
  return IntrusivePtr<const QuantParams>(
      new QuantParams(dtype, QScheme::PerChannelAffine, std::move(scales), std::move(zero_points), axis));
}

int64_t quantize_value(float x, double scale, int64_t zero_point, DType dtype) {
  const int64_t lo = quant_min(dtype), hi = quant_max(dtype);
  if (std::isnan(x)) return hi;
  const float inv = 1.0f / float(scale);
  const double v = double(std::nearbyint(x * inv)) + double(zero_point);
  return v <= double(lo) ? lo : v >= double(hi) ? hi : int64_t(v);
}

namespace detail {
namespace {
// Calls f(linear index i, element offset) over `t` in row-major order, and gives the channel of
// element i along `axis` (-1: none) through `channel_of`.
template <typename F>
void for_each_element(const Tensor& t, F&& f) {
  const int64_t nd = t.dim();
  std::vector<int64_t> idx(size_t(nd), 0);
  const IntArrayRef sizes = t.sizes(), strides = t.strides();
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    int64_t off = 0;
    for (int64_t d = 0; d < nd; ++d) off += idx[size_t(d)] * strides[size_t(d)];
    f(i, off, idx.data());
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < sizes[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
}
}  // namespace

Tensor quantize_reference(const Tensor& x, IntrusivePtr<const QuantParams> q) {
  TESSERA_CHECK(x.is_cpu() && x.dtype() == kFloat32, "quantize: the reference kernel takes a float32 CPU tensor, got ",
                x.dtype(), " on ", x.device().str());
  const bool per_channel = q->qscheme() == QScheme::PerChannelAffine;
  if (per_channel)
    TESSERA_CHECK(q->axis() < x.dim() && int64_t(q->scales().size()) == x.sizes()[size_t(q->axis())],
                  "quantize: ", q->scales().size(), " channel parameters for axis ", q->axis(), " of a tensor of sizes ",
                  x.sizes());
  Tensor out = make_tensor(x.sizes(), q->dtype(), x.device());
  const float* src = static_cast<const float*>(x.raw_data_ptr());
  const DType dt = q->dtype();
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      T* dst = static_cast<T*>(out.raw_data_ptr());
      if (sizeof(T) == 1 && !per_channel && x.is_contiguous()) {
        // quantize_value for 8-bit types, vectorisable: clamping x * inv to one step beyond the integer range
        // before rounding changes no result and keeps it below 2^22, where adding and subtracting
        // 1.5 * 2^23 rounds half to even in the default rounding mode (as nearbyint does).
        const float inv = 1.0f / float(q->scale());
        const float zp = float(q->zero_point()), lo = float(quant_min(dt)) - zp, hi = float(quant_max(dt)) - zp;
        const float magic = 12582912.0f;
        const int64_t n = x.numel();
        for (int64_t i = 0; i < n; ++i) {
          const float v = src[i] * inv;
          const float c = std::min(std::max(v, lo - 1.0f), hi + 1.0f);
          const float r = std::min(std::max((c + magic) - magic, lo), hi);
          dst[i] = T(std::isnan(v) ? hi + zp : r + zp);
        }
        return;
      }
      for_each_element(x, [&](int64_t i, int64_t off, const int64_t* idx) {
        const size_t c = per_channel ? size_t(idx[q->axis()]) : 0;
        dst[i] = T(quantize_value(src[off], q->scales()[c], q->zero_points()[c], dt));
      });
    }
  });
  out.impl()->set_qparams(std::move(q));
  return out;
}

Tensor dequantize_reference(const Tensor& qt) {
  const QuantParams* q = qt.impl()->qparams();
  TESSERA_CHECK(q != nullptr, "dequantize: the ", qt.dtype(), " tensor carries no quantization parameters; make ",
                "quantized tensors with quantize_per_tensor or quantize_per_channel");
  TESSERA_CHECK(qt.is_cpu(), "dequantize: quantized tensors live on the CPU, got one on ", qt.device().str());
  Tensor out = make_tensor(qt.sizes(), kFloat32, qt.device());
  float* dst = static_cast<float*>(out.raw_data_ptr());
  const bool per_channel = q->qscheme() == QScheme::PerChannelAffine;
  visit_dtype(qt.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T* src = static_cast<const T*>(qt.raw_data_ptr());
      for_each_element(qt, [&](int64_t i, int64_t off, const int64_t* idx) {
        const int64_t v = int64_t(src[off]);
        if (per_channel) {
          const size_t c = size_t(idx[q->axis()]);
          dst[i] = float(double(v - q->zero_points()[c]) * q->scales()[c]);
        } else {
          dst[i] = float(v - q->zero_point()) * float(q->scale());
        }
      });
    }
  });
  return out;
}
}  // namespace detail

std::string qparams_str(const QuantParams& q) {
  std::ostringstream os;
  if (q.qscheme() == QScheme::PerTensorAffine) {
    os << "qscheme per_tensor_affine, scale " << q.scale() << ", zero_point " << q.zero_point();
    return os.str();
  }
  os << "qscheme per_channel_affine, axis " << q.axis() << ", scales [";
  for (size_t c = 0; c < q.scales().size(); ++c) os << (c ? ", " : "") << q.scales()[c];
  os << "], zero_points [";
  for (size_t c = 0; c < q.zero_points().size(); ++c) os << (c ? ", " : "") << q.zero_points()[c];
  os << "]";
  return os.str();
}

}  // namespace tessera
