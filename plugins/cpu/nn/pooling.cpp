// max_pool2d and avg_pool2d (NCHW or CHW, floor mode; avg counts the zero padding in the divisor as
// PyTorch's count_include_pad=True default). f32 planes run the per-ISA plane kernel
// (Note [Pooling loop order] in nn_isa_kernels.inc); bf16/f16 planes go through f32 buffers; f64
// runs the same loop order here in double.
#include <cmath>
#include <limits>

#include "nn_common.h"
#include "nn_ops.h"

namespace tessera::cpu::nn {
namespace {

using PoolGeom = PoolGeometry;

inline int64_t div_floor(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t div_ceil(int64_t a, int64_t b) { return -div_floor(-a, b); }

// Integers (max over every integer dtype, average over int64, as PyTorch): the max starts at the
// type's lowest value, the sum wraps modulo 2^64 and the average divides with truncation toward
// zero (PyTorch's integer avg_pool2d: -7 / 4 = -1).
template <typename T, bool kMax>
void pool_plane(const T* in, T* out, const PoolGeom& g) {
  const T init = kMax ? (std::is_integral_v<T> ? std::numeric_limits<T>::lowest() : -std::numeric_limits<T>::infinity())
                      : T(0);
  auto add = [](T a, T b) {
    if constexpr (std::is_integral_v<T>) return T(uint64_t(a) + uint64_t(b));
    else return T(a + b);
  };
  for (int64_t oh = 0; oh < g.oh; ++oh) {
    T* orow = out + oh * g.ow;
    for (int64_t o = 0; o < g.ow; ++o) orow[o] = init;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t ih = oh * g.sh - g.ph + i * g.dh;
      if (ih < 0 || ih >= g.h) continue;
      const T* irow = in + ih * g.w;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t off = j * g.dw - g.pw;  // iw = ow * sw + off
        const int64_t lo = std::max<int64_t>(0, div_ceil(-off, g.sw));
        const int64_t hi = std::min<int64_t>(g.ow, div_floor(g.w - 1 - off, g.sw) + 1);
        if (g.sw == 1) {
          const T* src = irow + off;
          for (int64_t o = lo; o < hi; ++o) {
            const T v = src[o];
            if constexpr (kMax) orow[o] = (v > orow[o] || v != v) ? v : orow[o];
            else orow[o] = add(orow[o], v);
          }
        } else {
          for (int64_t o = lo; o < hi; ++o) {
            const T v = irow[o * g.sw + off];
            if constexpr (kMax) orow[o] = (v > orow[o] || v != v) ? v : orow[o];
            else orow[o] = add(orow[o], v);
          }
        }
      }
    }
    if constexpr (!kMax && std::is_integral_v<T>) {
      const T count = T(g.kh * g.kw);
      for (int64_t o = 0; o < g.ow; ++o) orow[o] /= count;
    } else if constexpr (!kMax) {
      const T inv = T(1) / T(g.kh * g.kw);
      for (int64_t o = 0; o < g.ow; ++o) orow[o] *= inv;
    }
  }
}

// Note [Channels-last pooling]: a channels-last input (docs/semantics.md, "Memory formats") gets a
// channels-last output from the shape rule, and is pooled where it lies: for each output pixel the
// taps are the outer loops and the C channels, adjacent in memory, the inner one. The taps are
// visited in the same order as the planar loop, so both layouts give the same bits. Floating types
// below f32 go through f32 one pixel (C values) at a time.
template <typename T, bool kMax>
void pool_pixel_nhwc(const T* in, T* out, int64_t c, int64_t oh, int64_t ow, const PoolGeom& g) {
  const T init = kMax ? (std::is_integral_v<T> ? std::numeric_limits<T>::lowest() : -std::numeric_limits<T>::infinity())
                      : T(0);
  for (int64_t q = 0; q < c; ++q) out[q] = init;
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t ih = oh * g.sh - g.ph + i * g.dh;
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t iw = ow * g.sw - g.pw + j * g.dw;
      if (iw < 0 || iw >= g.w) continue;
      const T* src = in + (ih * g.w + iw) * c;
      for (int64_t q = 0; q < c; ++q) {
        const T v = src[q];
        if constexpr (kMax) out[q] = (v > out[q] || v != v) ? v : out[q];
        else if constexpr (std::is_integral_v<T>) out[q] = T(uint64_t(out[q]) + uint64_t(v));
        else out[q] = T(out[q] + v);
      }
    }
  }
  if constexpr (!kMax && std::is_integral_v<T>) {
    const T count = T(g.kh * g.kw);
    for (int64_t q = 0; q < c; ++q) out[q] /= count;
  } else if constexpr (!kMax) {
    const T inv = T(1) / T(g.kh * g.kw);
    for (int64_t q = 0; q < c; ++q) out[q] *= inv;
  }
}

// Output rows [b, e) (one image's output row each) of a channels-last pool, computed in T: the
// stored type, or float for f16 / bf16 (`dt`), whose images are widened one at a time.
template <typename T>
void pool_rows_nhwc(const char* xb, char* yb, int32_t dt, int64_t c, const PoolGeom& g, bool is_max, int64_t b,
                    int64_t e) {
  const bool widen = dt == TESSERA_DTYPE_FLOAT16 || dt == TESSERA_DTYPE_BFLOAT16;  // then T is float
  const int64_t es = int64_t(sdk::dtype_size(dt)), in_image = g.h * g.w * c;
  Buffer<float> fin(widen ? in_image : 0), fout(widen ? c : 0);
  int64_t loaded = -1;  // the image held in fin
  for (int64_t r = b; r < e; ++r) {
    const int64_t n = r / g.oh, oh = r % g.oh;
    if (widen && loaded != n) {
      load_f32(xb + n * in_image * es, dt, in_image, 1, fin.get());
      loaded = n;
    }
    const T* in = widen ? reinterpret_cast<const T*>(fin.get()) : reinterpret_cast<const T*>(xb) + n * in_image;
    for (int64_t ow = 0; ow < g.ow; ++ow) {
      const int64_t out_off = ((n * g.oh + oh) * g.ow + ow) * c;
      T* out = widen ? reinterpret_cast<T*>(fout.get()) : reinterpret_cast<T*>(yb) + out_off;
      is_max ? pool_pixel_nhwc<T, true>(in, out, c, oh, ow, g) : pool_pixel_nhwc<T, false>(in, out, c, oh, ow, g);
      if (widen) store_f32(fout.get(), yb + out_off * es, dt, c, 1);
    }
  }
}

// Pools a channels-last x (N, C, H, W) into the channels-last y: rows of output pixels in parallel.
void pool2d_nhwc(const tessera_tensor_t* x, const tessera_tensor_t* y, const PoolGeom& g, bool is_max) {
  const int64_t c = x->sizes[1], rows = x->sizes[0] * g.oh;
  const int32_t dt = x->dtype;
  const char* xb = static_cast<const char*>(x->data) + x->byte_offset;
  char* yb = static_cast<char*>(y->data) + y->byte_offset;
  const int64_t grain = grain_items(OpKind::Pooling, g.ow * c * g.kh * g.kw, rows);
  parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
    if (dt == TESSERA_DTYPE_FLOAT16 || dt == TESSERA_DTYPE_BFLOAT16)
      return pool_rows_nhwc<float>(xb, yb, dt, c, g, is_max, b, e);
    visit(dt, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    (std::is_integral_v<T> && !std::is_same_v<T, bool>))
        pool_rows_nhwc<T>(xb, yb, dt, c, g, is_max, b, e);
    });
  });
}

void pool2d(const KernelCall& call, bool is_max) {
  const char* op = call.op_name();
  // max_pool2d and avg_pool2d share the leading layout (self; kernel_size, stride, padding), read
  // through max_pool2d's indices (tessera/op_names.h); dilation is max_pool2d's alone.
  using A = op::max_pool2d::attr;
  static_assert(op::avg_pool2d::attr::kernel_size == int(A::kernel_size) &&
                op::avg_pool2d::attr::stride == int(A::stride) &&
                op::avg_pool2d::attr::padding == int(A::padding) &&
                op::avg_pool2d::tensor::self == int(op::max_pool2d::tensor::self));
  const TensorView x0 = call.input(op::max_pool2d::tensor::self);
  const int32_t xdt = x0.dtype();
  const bool supported = dtype_is_floating(xdt) || (is_max ? dtype_is_integral(xdt) : xdt == TESSERA_DTYPE_INT64);
  if (!supported)
    fail(std::string(op) + ": not implemented for dtype " + dtype_name(xdt) + "; supported dtypes: " +
         (is_max ? "uint8, int8, int16, int32, int64" : "int64") + ", float16, bfloat16, float32, float64");
  if (x0.ndim() != 3 && x0.ndim() != 4)
    fail(std::string(op) + ": input has shape " + shape_str(x0) + "; expected 3-D (C, H, W) or 4-D (N, C, H, W)");
  PoolGeom g{};
  int64_t k[2], s[2], p[2], d[2] = {1, 1};
  attr_pair(call, A::kernel_size, "kernel_size", k, nullptr);
  attr_pair(call, A::stride, "stride", s, k);  // empty stride = kernel_size
  const int64_t zero[2] = {0, 0}, one[2] = {1, 1};
  attr_pair(call, A::padding, "padding", p, zero);
  if (is_max && call.num_attrs() > A::dilation) attr_pair(call, A::dilation, "dilation", d, one);
  // ceil_mode / count_include_pad / divisor_override, when the schema carries them: the contract's
  // max_pool2d / avg_pool2d do not (they end at dilation / padding), so these positions are PyTorch's
  // and have no op_names.h constant; the guards only fire for a schema that declares them.
  const int ceil_index = is_max ? 4 : 3;
  if (call.num_attrs() > ceil_index && call.attr(ceil_index).kind == TESSERA_VALUE_BOOL && call.attr_bool(ceil_index))
    fail_unimplemented(std::string(op) + ": ceil_mode=True is not implemented by the CPU plugin; use ceil_mode=False");
  if (!is_max && call.num_attrs() > 4 && call.attr(4).kind == TESSERA_VALUE_BOOL && !call.attr_bool(4))
    fail_unimplemented(std::string(op) + ": count_include_pad=False is not implemented by the CPU plugin");
  if (!is_max && call.num_attrs() > 5 && !call.attr_is_none(5))
    fail_unimplemented(std::string(op) + ": divisor_override is not implemented by the CPU plugin");
  for (int i = 0; i < 2; ++i) {
    if (k[i] <= 0 || s[i] <= 0 || d[i] <= 0 || p[i] < 0)
      fail(std::string(op) + ": kernel_size, stride and dilation must be positive and padding non-negative (got kernel " +
           std::to_string(k[i]) + ", stride " + std::to_string(s[i]) + ", padding " + std::to_string(p[i]) +
           ", dilation " + std::to_string(d[i]) + ")");
    if (2 * p[i] > k[i])
      fail(std::string(op) + ": padding " + std::to_string(p[i]) + " is more than half the kernel size " +
           std::to_string(k[i]) + "; expected padding <= kernel_size / 2");
  }
  const bool nhwc = channels_last_only(x0.raw()) && channels_last_dense(call.output(0).raw());  // Note [Channels-last pooling]
  TempList holder;
  const tessera_tensor_t* x = nhwc ? x0.raw() : contiguous(x0.raw(), holder);
  const int nd = x->ndim;
  g.h = x->sizes[nd - 2];
  g.w = x->sizes[nd - 1];
  g.kh = k[0], g.kw = k[1], g.sh = s[0], g.sw = s[1], g.ph = p[0], g.pw = p[1], g.dh = d[0], g.dw = d[1];
  g.oh = (g.h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  const TensorView y0 = call.output(0);
  if (y0.ndim() != nd || y0.size(-2) != g.oh || y0.size(-1) != g.ow)
    fail(std::string(op) + ": output has shape " + shape_str(y0) + "; expected spatial size [" + std::to_string(g.oh) +
         ", " + std::to_string(g.ow) + "] for input " + shape_str(x));
  if (g.oh <= 0 || g.ow <= 0)
    fail(std::string(op) + ": the output would be empty for input " + shape_str(x) + "; use a smaller kernel");
  if (nhwc) return pool2d_nhwc(x0.raw(), y0.raw(), g, is_max);
  TempList out_holder;
  const tessera_tensor_t* y = y0.raw();
  if (!y0.is_contiguous()) {
    out_holder.emplace_back(y->sizes, y->ndim, y->dtype);
    y = out_holder.back().raw();
  }
  int64_t planes = 1;
  for (int i = 0; i < nd - 2; ++i) planes *= x->sizes[i];
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
  const char* xb = static_cast<const char*>(x->data) + x->byte_offset;
  char* yb = static_cast<char*>(y->data) + y->byte_offset;
  const int32_t dt = x->dtype;
  const NnIsaTable& isa = nn_isa();
  const int64_t grain = grain_items(OpKind::Pooling, out_plane * g.kh * g.kw, planes);
  parallel_for(0, planes, grain, [&](int64_t b, int64_t e) {
    const bool via_f32 = dt == TESSERA_DTYPE_FLOAT16 || dt == TESSERA_DTYPE_BFLOAT16;
    Buffer<float> fin(via_f32 ? in_plane : 0);
    Buffer<float> fout(via_f32 ? out_plane : 0);
    for (int64_t pl = b; pl < e; ++pl) {
      if (dtype_is_integral(dt)) {
        visit(dt, [&](auto tag) {
          using T = decltype(tag);
          if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            const T* in = reinterpret_cast<const T*>(xb) + pl * in_plane;
            T* out = reinterpret_cast<T*>(yb) + pl * out_plane;
            is_max ? pool_plane<T, true>(in, out, g) : pool_plane<T, false>(in, out, g);
          }
        });
      } else if (dt == TESSERA_DTYPE_FLOAT64) {
        const double* in = reinterpret_cast<const double*>(xb) + pl * in_plane;
        double* out = reinterpret_cast<double*>(yb) + pl * out_plane;
        is_max ? pool_plane<double, true>(in, out, g) : pool_plane<double, false>(in, out, g);
      } else if (dt == TESSERA_DTYPE_FLOAT32) {
        isa.pool_plane_f32(reinterpret_cast<const float*>(xb) + pl * in_plane,
               reinterpret_cast<float*>(yb) + pl * out_plane, &g, is_max);
      } else {
        const int64_t es = int64_t(sdk::dtype_size(dt));
        load_f32(xb + pl * in_plane * es, dt, in_plane, 1, fin.get());
        isa.pool_plane_f32(fin.get(), fout.get(), &g, is_max);
        store_f32(fout.get(), yb + pl * out_plane * es, dt, out_plane, 1);
      }
    }
  });
  if (y != y0.raw()) copy_tensor(y0.raw(), y);
}

}  // namespace

void max_pool2d_kernel(const KernelCall& call) { pool2d(call, true); }
void avg_pool2d_kernel(const KernelCall& call) { pool2d(call, false); }

}  // namespace tessera::cpu::nn
