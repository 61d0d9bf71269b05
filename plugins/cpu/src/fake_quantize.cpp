// fake_quantize_per_tensor_affine and fake_quantize_per_channel_affine (Note [Fake quantize] in
// dispatcher/src/meta_quantized.cpp): quantize then dequantize in float32, as PyTorch's CPU kernels.
#include <cmath>
#include <string>
#include <vector>

#include "kernels.h"
#include "parallel.h"
#include "tessera/fake_quantize.h"

namespace tessera::cpu {
namespace {

// The scale and zero point of each channel (one for per-tensor), checked as PyTorch checks them.
struct ChannelParams {
  std::vector<float> scale, inv_scale;
  std::vector<int64_t> zero_point;
};

ChannelParams read_params(const KernelCall& c, int64_t channels, int64_t qmin, int64_t qmax) {
  const TensorView s = c.input(1), z = c.input(2);
  ChannelParams p;
  const int64_t s_stride = s.ndim() == 1 ? s.stride(0) : 0, z_stride = z.ndim() == 1 ? z.stride(0) : 0;
  for (int64_t k = 0; k < channels; ++k) {
    const float sc = s.host_ptr<float>()[k * s_stride];
    const int64_t zp = z.dtype() == TESSERA_DTYPE_INT32 ? int64_t(z.host_ptr<int32_t>()[k * z_stride])
                                                          : z.host_ptr<int64_t>()[k * z_stride];
    const std::string error = fake_quantize_param_error(sc, zp, k, channels, qmin, qmax);
    TESSERA_SDK_CHECK(error.empty(), error);
    p.scale.push_back(sc);
    p.inv_scale.push_back(1.0f / sc);
    p.zero_point.push_back(zp);
  }
  return p;
}

// One element: fake_quantize_value (tessera/fake_quantize.h), the rule the CUDA plugin shares.
// `axis` < 0: one channel.
void fake_quantize(const KernelCall& c, int64_t axis, int64_t qmin, int64_t qmax) {
  const TensorView x = c.input(0), out = c.output(0);
  const int64_t n = x.numel();
  const int64_t channels = axis < 0 ? 1 : x.size(int(axis));
  const ChannelParams p = read_params(c, channels, qmin, qmax);
  if (n == 0) return;
  const int nd = x.ndim();
  // Elements per index of `axis` in C order (the product of the sizes after it).
  int64_t inner = 1;
  for (int d = int(axis) + 1; axis >= 0 && d < nd; ++d) inner *= x.size(d);
  const float* xp = x.host_ptr<float>();
  float* op = out.host_ptr<float>();
  if (x.is_contiguous() && out.is_contiguous()) {
    parallel_for(0, n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const size_t ch = axis < 0 ? 0 : size_t((i / inner) % channels);
        op[i] = fake_quantize_value(xp[i], p.scale[ch], p.inv_scale[ch], p.zero_point[ch], qmin, qmax);
      }
    });
    return;
  }
  // Any strides: walk the indices in C order.
  std::vector<int64_t> idx(size_t(nd), 0);
  int64_t xo = 0, oo = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t ch = axis < 0 ? 0 : size_t(idx[size_t(axis)]);
    op[oo] = fake_quantize_value(xp[xo], p.scale[ch], p.inv_scale[ch], p.zero_point[ch], qmin, qmax);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < x.size(d)) {
        xo += x.stride(d);
        oo += out.stride(d);
        break;
      }
      xo -= x.stride(d) * (x.size(d) - 1);
      oo -= out.stride(d) * (x.size(d) - 1);
      idx[size_t(d)] = 0;
    }
  }
}

tessera_status_t fake_quantize_per_tensor_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    using A = op::fake_quantize_per_tensor_affine::attr;
    fake_quantize(c, -1, c.attr_int(A::quant_min), c.attr_int(A::quant_max));
  });
}

tessera_status_t fake_quantize_per_channel_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    using A = op::fake_quantize_per_channel_affine::attr;
    fake_quantize(c, c.attr_int(A::axis), c.attr_int(A::quant_min), c.attr_int(A::quant_max));
  });
}

}  // namespace

void register_fake_quantize_kernels(Registrar& r) {
  r.add(op::fake_quantize_per_tensor_affine::name, TESSERA_DTYPE_MASK_FLOATING, &fake_quantize_per_tensor_kernel);
  r.add(op::fake_quantize_per_channel_affine::name, TESSERA_DTYPE_MASK_FLOATING, &fake_quantize_per_channel_kernel);
}

}  // namespace tessera::cpu
