// One element of fake_quantize_per_tensor_affine / _per_channel_affine (Note [Fake quantize] in
// dispatcher/src/meta_quantized.cpp): the one rule of the CPU kernel and the CUDA plugin's, so that
// both give the same float32 bits. PyTorch's fake_quantize_tensor_cachemask_kernel in float32; its
// int64 conversion of zero_point + nearbyint(x / scale) is undefined for NaN and out-of-range
// values; here they are clamped first (the result only depends on the value clamped to [quant_min,
// quant_max]), and NaN gives quant_min, as x86's conversion (the "integer indefinite" value) makes
// PyTorch give. `inv_scale` is 1.0f / scale, computed once by the caller. Header-only;
// __host__ __device__ under nvcc.
#pragma once

#include <math.h>

#include <cstdint>
#if !defined(__CUDACC__)
#include <cmath>
#include <string>
#endif

#if defined(__CUDACC__)
#define TESSERA_FAKE_QUANTIZE_HD __host__ __device__ inline
#else
#define TESSERA_FAKE_QUANTIZE_HD inline
#endif

namespace tessera {

TESSERA_FAKE_QUANTIZE_HD float fake_quantize_value(float x, float scale, float inv_scale, int64_t zero_point,
                                                   int64_t quant_min, int64_t quant_max) {
  const float qf = float(zero_point) + nearbyintf(x * inv_scale);
  const double q =
      qf != qf ? double(quant_min) : fmin(fmax(double(qf), double(quant_min)), double(quant_max));
  return float(q - double(zero_point)) * scale;
}

#if !defined(__CUDACC__)
// Why the scale and zero point of channel `k` (of `channels`; 1 per tensor) cannot be used, as
// PyTorch checks them, or an empty string: the message every kernel reports.
inline std::string fake_quantize_param_error(float scale, int64_t zero_point, int64_t k, int64_t channels,
                                             int64_t quant_min, int64_t quant_max) {
  const std::string which = channels > 1 ? " of channel " + std::to_string(k) : std::string();
  if (!(std::isfinite(scale) && scale > 0))
    return "scale " + std::to_string(scale) + which +
           " is not finite and positive; expected a scale > 0 (an observer gives one)";
  if (zero_point < quant_min || zero_point > quant_max)
    return "zero_point " + std::to_string(zero_point) + which + " is outside [quant_min, quant_max] = [" +
           std::to_string(quant_min) + ", " + std::to_string(quant_max) + "]";
  return {};
}
#endif

}  // namespace tessera
