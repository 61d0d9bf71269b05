// nn kernels that ONNX models need: batch_norm (inference), group_norm, conv_transpose2d, _resize
// (nearest / N-linear), logsumexp and linalg_vector_norm. Plain loops, accumulating in double (the
// normalisations and reductions) or the dtype's compute type; float32 conv_transpose2d runs on
// oneDNN's deconvolution where it accepts the geometry. Outputs are contiguous.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "../nn/onednn.h"
#include "kernels.h"
#include "tessera/resize_taps.h"

namespace tessera::cpu {
namespace {

char* bytes(const tessera_tensor_t* t) { return static_cast<char*>(t->data) + t->byte_offset; }

// The values of an optional 1-D tensor as doubles; `fill` for every element when absent.
std::vector<double> doubles(const tessera_tensor_t* t, int64_t n, double fill) {
  std::vector<double> v(size_t(n), fill);
  if (!t) return v;
  TESSERA_SDK_CHECK(t->numel == n, "per-channel tensor has " + std::to_string(t->numel) + " elements; expected " +
                                       std::to_string(n));
  const int64_t dims[1] = {n};
  OwnedTensor d(dims, 1, TESSERA_DTYPE_FLOAT64);
  copy_tensor(d.raw(), t);
  std::memcpy(v.data(), bytes(d.raw()), size_t(n) * sizeof(double));
  return v;
}

const tessera_tensor_t* input_or_null(const KernelCall& c, int i) {
  return i < c.num_inputs() ? c.raw()->inputs[i] : nullptr;
}

// ---- batch_norm (inference) and group_norm

void batch_norm_kernel(const KernelCall& c) {
  using A = op::batch_norm::attr;
  TESSERA_SDK_CHECK(!c.attr_bool(A::training), "batch_norm: training=True is not supported; pass training=False");
  TempList temps;
  const tessera_tensor_t* x = contiguous_or_copy(c.raw()->inputs[0], temps);
  const tessera_tensor_t* out = c.raw()->outputs[0];
  TESSERA_SDK_CHECK(TensorView(out).is_contiguous(), std::string(c.op_name()) + ": output must be contiguous");
  if (out->numel == 0) return;
  const int64_t ch = x->sizes[1], inner = x->numel / (x->sizes[0] * ch);
  const double eps = c.attr_double(A::eps);
  const std::vector<double> w = doubles(input_or_null(c, 1), ch, 1.0), b = doubles(input_or_null(c, 2), ch, 0.0);
  const std::vector<double> mean = doubles(input_or_null(c, 3), ch, 0.0), var = doubles(input_or_null(c, 4), ch, 1.0);
  std::vector<double> scale(static_cast<size_t>(ch)), shift(static_cast<size_t>(ch));
  for (int64_t k = 0; k < ch; ++k) {
    scale[size_t(k)] = w[size_t(k)] / std::sqrt(var[size_t(k)] + eps);
    shift[size_t(k)] = b[size_t(k)] - mean[size_t(k)] * scale[size_t(k)];
  }
  visit(x->dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_v<T>) {
      using Acc = acc_t<T>;
      const T* xp = reinterpret_cast<const T*>(bytes(x));
      T* op = reinterpret_cast<T*>(bytes(out));
      parallel_for(0, x->sizes[0] * ch, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t r = lo; r < hi; ++r) {
                       const Acc s = Acc(scale[size_t(r % ch)]), t = Acc(shift[size_t(r % ch)]);
                       for (int64_t i = 0; i < inner; ++i)
                         Elem<T>::store(op + r * inner + i, Elem<T>::load(xp + r * inner + i) * s + t);
                     }
                   });
    }
  });
}

void group_norm_kernel(const KernelCall& c) {
  using A = op::group_norm::attr;
  TempList temps;
  const tessera_tensor_t* x = contiguous_or_copy(c.raw()->inputs[0], temps);
  const tessera_tensor_t* out = c.raw()->outputs[0];
  TESSERA_SDK_CHECK(TensorView(out).is_contiguous(), std::string(c.op_name()) + ": output must be contiguous");
  if (out->numel == 0) return;
  const int64_t n = x->sizes[0], ch = x->sizes[1], groups = c.attr_int(A::num_groups);
  const int64_t inner = x->numel / (n * ch), per_group = ch / groups * inner;
  const double eps = c.attr_double(A::eps);
  const std::vector<double> w = doubles(input_or_null(c, 1), ch, 1.0), b = doubles(input_or_null(c, 2), ch, 0.0);
  visit(x->dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_v<T>) {
      const T* xp = reinterpret_cast<const T*>(bytes(x));
      T* op = reinterpret_cast<T*>(bytes(out));
      parallel_for(0, n * groups, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t g = lo; g < hi; ++g) {
          const T* gx = xp + g * per_group;
          double sum = 0;
          for (int64_t i = 0; i < per_group; ++i) sum += double(Elem<T>::load(gx + i));
          const double mean = per_group ? sum / double(per_group) : 0.0;
          double sq = 0;
          for (int64_t i = 0; i < per_group; ++i) {
            const double d = double(Elem<T>::load(gx + i)) - mean;
            sq += d * d;
          }
          const double rstd = 1.0 / std::sqrt((per_group ? sq / double(per_group) : 0.0) + eps);
          for (int64_t i = 0; i < per_group; ++i) {
            const int64_t k = (g % groups) * (ch / groups) + i / inner;
            const double y = (double(Elem<T>::load(gx + i)) - mean) * rstd * w[size_t(k)] + b[size_t(k)];
            Elem<T>::store(op + g * per_group + i, acc_t<T>(y));
          }
        }
      });
    }
  });
}

// ---- conv_transpose2d: each input pixel scattered through the kernel (direct, no im2col)

void pair_attr(const KernelCall& c, int i, int64_t out[2]) {
  int count = 0;
  const int64_t* v = c.attr_ints(i, &count);
  TESSERA_SDK_CHECK(count == 1 || count == 2, "conv_transpose2d: expected 1 or 2 values");
  out[0] = v[0];
  out[1] = count == 2 ? v[1] : v[0];
}

// float32 transposed convolution as oneDNN's deconvolution on plain layouts (NCHW activations, the
// weight [C_in, C_out/groups, kH, kW] as it lies: iohw / giohw). False when oneDNN refuses the
// geometry (the caller runs the direct loop). One primitive per call: no cache yet.
bool conv_transpose2d_onednn(const tessera_tensor_t* x, const tessera_tensor_t* w, const tessera_tensor_t* bias,
                             const tessera_tensor_t* out, int64_t nb, const int64_t stride[2], const int64_t pad[2],
                             const int64_t dil[2], int64_t groups) {
  using dnnl::memory;
  using tag = memory::format_tag;
  const memory::data_type f32 = memory::data_type::f32;
  const int b3 = x->ndim == 4 ? 1 : 0;
  const int64_t ci = x->sizes[b3], ih = x->sizes[b3 + 1], iw = x->sizes[b3 + 2];
  const int64_t co = out->sizes[b3], oh = out->sizes[b3 + 1], ow = out->sizes[b3 + 2];
  const int64_t kh = w->sizes[2], kw = w->sizes[3], g = groups;
  // output_padding extends the far side: padding_r = padding - output_padding (may be negative).
  const int64_t pr0 = (ih - 1) * stride[0] + dil[0] * (kh - 1) + 1 - pad[0] - oh;
  const int64_t pr1 = (iw - 1) * stride[1] + dil[1] * (kw - 1) + 1 - pad[1] - ow;
  try {
    const memory::desc src({nb, ci, ih, iw}, f32, tag::nchw), dst({nb, co, oh, ow}, f32, tag::nchw);
    const memory::desc wei = g == 1 ? memory::desc({co, ci, kh, kw}, f32, tag::iohw)
                                    : memory::desc({g, co / g, ci / g, kh, kw}, f32, tag::giohw);
    const memory::desc bmd = bias ? memory::desc({co}, f32, tag::x) : memory::desc();
    const memory::dims strides = {stride[0], stride[1]}, dilates = {dil[0] - 1, dil[1] - 1};
    const memory::dims pl = {pad[0], pad[1]}, pr = {pr0, pr1};
    const auto desc = bias ? dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                               dnnl::algorithm::deconvolution_direct, src, wei, bmd, dst,
                                                               strides, dilates, pl, pr)
                           : dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                               dnnl::algorithm::deconvolution_direct, src, wei, dst,
                                                               strides, dilates, pl, pr);
    const dnnl::deconvolution_forward::primitive_desc pd(desc, nn::cpu_engine());
    if (pd.src_desc() != src || pd.dst_desc() != dst || pd.weights_desc() != wei) return false;
    dnnl::engine& eng = nn::cpu_engine();
    memory sm(src, eng, bytes(x)), wm(wei, eng, bytes(w)), dm(dst, eng, bytes(out));
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dm}};
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(bmd, eng, bytes(bias)));
    dnnl::stream st(eng);
    dnnl::deconvolution_forward(pd).execute(st, args);
    st.wait();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

void conv_transpose2d_kernel(const KernelCall& c) {
  using A = op::conv_transpose2d_input::attr;
  TempList temps;
  const tessera_tensor_t* x = contiguous_or_copy(c.raw()->inputs[0], temps);
  const tessera_tensor_t* w = contiguous_or_copy(c.raw()->inputs[1], temps);
  const tessera_tensor_t* bias = input_or_null(c, 2);
  const tessera_tensor_t* out = c.raw()->outputs[0];
  TESSERA_SDK_CHECK(TensorView(out).is_contiguous(), std::string(c.op_name()) + ": output must be contiguous");
  if (out->numel == 0) return;
  int64_t stride[2], pad[2], dil[2];
  pair_attr(c, A::stride, stride);
  pair_attr(c, A::padding, pad);
  pair_attr(c, A::dilation, dil);
  const int64_t groups = c.attr_int(A::groups);
  const int b3 = x->ndim == 4 ? 1 : 0;  // a 3-D input is one image
  const int64_t batch = b3 ? x->sizes[0] : 1, cin = x->sizes[b3], ih = x->sizes[b3 + 1], iw = x->sizes[b3 + 2];
  const int64_t cout = out->sizes[b3], oh = out->sizes[b3 + 1], ow = out->sizes[b3 + 2];
  const int64_t kh = w->sizes[2], kw = w->sizes[3], cin_g = cin / groups, cout_g = cout / groups;
  if (x->dtype == TESSERA_DTYPE_FLOAT32) {
    const tessera_tensor_t* b = contiguous_or_copy(bias, temps);
    if (conv_transpose2d_onednn(x, w, b, out, batch, stride, pad, dil, groups)) return;
  }
  const std::vector<double> bv = doubles(bias, cout, 0.0);
  visit(x->dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_v<T>) {
      const T* xp = reinterpret_cast<const T*>(bytes(x));
      const T* wp = reinterpret_cast<const T*>(bytes(w));
      T* op = reinterpret_cast<T*>(bytes(out));
      // One task per (image, output channel): it reads every input channel of its group.
      parallel_for(0, batch * cout, 1, [&](int64_t lo, int64_t hi) {
        std::vector<double> acc(size_t(oh * ow));
        for (int64_t t = lo; t < hi; ++t) {
          const int64_t nimg = t / cout, oc = t % cout, g = oc / cout_g, ocg = oc % cout_g;
          std::fill(acc.begin(), acc.end(), bv[size_t(oc)]);
          for (int64_t icg = 0; icg < cin_g; ++icg) {
            const int64_t ic = g * cin_g + icg;
            const T* xplane = xp + (nimg * cin + ic) * ih * iw;
            const T* wk = wp + (ic * cout_g + ocg) * kh * kw;
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t bb = 0; bb < kw; ++bb) {
                const double wv = double(Elem<T>::load(wk + a * kw + bb));
                for (int64_t y = 0; y < ih; ++y) {
                  const int64_t oy = y * stride[0] - pad[0] + a * dil[0];
                  if (oy < 0 || oy >= oh) continue;
                  for (int64_t xx = 0; xx < iw; ++xx) {
                    const int64_t ox = xx * stride[1] - pad[1] + bb * dil[1];
                    if (ox < 0 || ox >= ow) continue;
                    acc[size_t(oy * ow + ox)] += wv * double(Elem<T>::load(xplane + y * iw + xx));
                  }
                }
              }
          }
          T* oplane = op + t * oh * ow;
          for (int64_t i = 0; i < oh * ow; ++i) Elem<T>::store(oplane + i, acc_t<T>(acc[size_t(i)]));
        }
      });
    }
  });
}

// ---- _resize: ONNX Resize as onnx.reference computes it, the taps of tessera/resize_taps.h

void resize_kernel(const KernelCall& c) {
  using A = op::_resize::attr;
  TempList temps;
  const tessera_tensor_t* x = contiguous_or_copy(c.raw()->inputs[0], temps);
  const tessera_tensor_t* out = c.raw()->outputs[0];
  TESSERA_SDK_CHECK(TensorView(out).is_contiguous(), std::string(c.op_name()) + ": output must be contiguous");
  if (out->numel == 0) return;
  int k = 0;
  c.attr_ints(A::size, &k);
  const std::string mode = c.attr_string(A::mode), coord_s = c.attr_string(A::coordinate_transformation_mode),
                    nearest_s = c.attr_string(A::nearest_mode);
  const bool nearest = mode == "nearest" || mode.empty();
  const resize::Coord coord = resize::coord_mode(coord_s);
  const resize::Nearest nearest_mode = resize::nearest_mode(nearest_s);
  const int nd = x->ndim, first = nd - k;
  TESSERA_SDK_CHECK(k >= 1 && k <= 8, "_resize: resizes 1 to 8 trailing dims, got " + std::to_string(k));
  const std::vector<double> scales = doubles(input_or_null(c, op::_resize::tensor::scales), k, 0.0);
  const double a = c.attr_double(A::cubic_coeff_a);
  const bool exclude_outside = c.attr_bool(A::exclude_outside);
  std::vector<resize::Taps> taps(static_cast<size_t>(k));
  int64_t in_inner = 1, out_inner = 1;
  for (int j = 0; j < k; ++j) {
    const int64_t in = x->sizes[first + j], on = out->sizes[first + j];
    in_inner *= in;
    out_inner *= on;
    double scale = scales[size_t(j)];
    if (scale == 0) scale = double(on) / double(in);
    TESSERA_SDK_CHECK(scale > 0 && std::isfinite(scale), "_resize: scales must be positive and finite, got " +
                                                              std::to_string(scale) + " for resized dim " +
                                                              std::to_string(j));
    taps[size_t(j)] = resize::dim_taps(mode, coord, nearest_mode, in, on, scale, a, exclude_outside);
  }
  const int64_t outer = out->numel / out_inner;
  int64_t combos = 1;
  for (const resize::Taps& t : taps) combos *= t.n;
  visit(x->dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = reinterpret_cast<const T*>(bytes(x));
    T* op = reinterpret_cast<T*>(bytes(out));
    parallel_for(0, outer * out_inner, 4096, [&](int64_t lo, int64_t hi) {
      int64_t pos[8];
      for (int64_t e = lo; e < hi; ++e) {
        const int64_t b = e / out_inner;
        int64_t rem = e % out_inner;
        for (int j = k - 1; j >= 0; --j) {
          pos[j] = rem % out->sizes[first + j];
          rem /= out->sizes[first + j];
        }
        const T* src = xp + b * in_inner;
        if (nearest) {  // a copy: every dtype keeps its values exactly
          int64_t at = 0;
          for (int j = 0; j < k; ++j) at = at * x->sizes[first + j] + taps[size_t(j)].index[size_t(pos[j])];
          op[e] = src[at];
          continue;
        }
        double v = 0;
        for (int64_t combo = 0; combo < combos; ++combo) {
          double wt = 1;
          int64_t at = 0, rest = combo;
          for (int j = k - 1; j >= 0; --j) {
            const resize::Taps& t = taps[size_t(j)];
            const size_t i = size_t(pos[j] * t.n + rest % t.n);
            rest /= t.n;
            wt *= t.weight[i];
          }
          if (wt == 0) continue;
          rest = combo;
          int64_t mul = 1;
          for (int j = k - 1; j >= 0; --j) {
            const resize::Taps& t = taps[size_t(j)];
            at += t.index[size_t(pos[j] * t.n + rest % t.n)] * mul;
            rest /= t.n;
            mul *= x->sizes[first + j];
          }
          v += wt * double(Elem<T>::load(src + at));
        }
        Elem<T>::store(op + e, acc_t<T>(v));
      }
    });
  });
}

// ---- logsumexp, linalg_vector_norm: rows of the reduced dims, in double

// x permuted to [kept dims..., reduced dims...] and converted to float64; rows = output numel.
OwnedTensor reduced_rows(const tessera_tensor_t* x, const int64_t* dims, int count, int64_t* row_len) {
  const int nd = x->ndim;
  check_rank(nd, "the reduction input");
  bool reduced[kMaxDims] = {};
  for (int i = 0; i < count; ++i) {
    const int64_t d = dims[i] < 0 ? dims[i] + std::max(nd, 1) : dims[i];
    TESSERA_SDK_CHECK(d >= 0 && d < std::max(nd, 1), "reduction dim out of range");
    if (nd > 0) reduced[d] = true;
  }
  if (count == 0)
    for (int d = 0; d < nd; ++d) reduced[d] = true;
  int64_t sizes[kMaxDims], strides[kMaxDims];
  int n = 0;
  *row_len = 1;
  for (int pass = 0; pass < 2; ++pass)
    for (int d = 0; d < nd; ++d)
      if (reduced[d] == (pass == 1)) {
        sizes[n] = x->sizes[d], strides[n++] = x->strides[d];
        if (pass == 1) *row_len *= x->sizes[d];
      }
  tessera_tensor_t view = *x;
  view.sizes = sizes;
  view.strides = strides;
  OwnedTensor rows(sizes, nd, TESSERA_DTYPE_FLOAT64);
  copy_tensor(rows.raw(), &view);
  return rows;
}

template <typename F>
void reduce_rows(const KernelCall& c, int dim_attr, F row_fn) {
  const tessera_tensor_t* x = c.raw()->inputs[0];
  const tessera_tensor_t* out = c.raw()->outputs[0];
  TESSERA_SDK_CHECK(TensorView(out).is_contiguous(), "reduction output must be contiguous");
  if (out->numel == 0) return;
  int count = 0;
  const int64_t* dims = c.attr_is_none(dim_attr) ? nullptr : c.attr_ints(dim_attr, &count);
  int64_t len = 1;
  OwnedTensor rows = reduced_rows(x, dims, count, &len);
  const double* rp = reinterpret_cast<const double*>(bytes(rows.raw()));
  visit(out->dtype, [&](auto tag) {
    using T = decltype(tag);
    T* op = reinterpret_cast<T*>(bytes(out));
    parallel_for(0, out->numel, std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) Elem<T>::store(op + r, acc_t<T>(row_fn(rp + r * len, len)));
    });
  });
}

void logsumexp_kernel(const KernelCall& c) {
  reduce_rows(c, op::logsumexp::attr::dim, [](const double* v, int64_t n) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      if (v[i] != v[i]) return v[i];
      m = std::max(m, v[i]);
    }
    if (std::isinf(m)) return m;  // all -inf (or empty): -inf; any +inf: +inf
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(v[i] - m);
    return m + std::log(s);
  });
}

void vector_norm_kernel(const KernelCall& c) {
  using A = op::linalg_vector_norm::attr;
  const double p = c.attr_double(A::ord);
  reduce_rows(c, A::dim, [p](const double* v, int64_t n) {
    if (std::isinf(p)) {
      double r = p > 0 ? 0.0 : std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < n; ++i) {
        const double a = std::fabs(v[i]);
        if (a != a) return a;
        r = p > 0 ? std::max(r, a) : std::min(r, a);
      }
      return r;
    }
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double a = std::fabs(v[i]);
      if (p == 0) s += a != 0 ? 1.0 : 0.0;
      else if (p == 1) s += a;
      else if (p == 2) s += a * a;
      else s += std::pow(a, p);
    }
    if (p == 0 || p == 1) return s;
    return p == 2 ? std::sqrt(s) : std::pow(s, 1.0 / p);
  });
}

}  // namespace

void register_onnx_nn_kernels(Registrar& r) {
  r.add(op::batch_norm::name, kMaskFloat, &guarded_kernel<batch_norm_kernel>);
  r.add(op::group_norm::name, kMaskFloat, &guarded_kernel<group_norm_kernel>);
  r.add(op::conv_transpose2d_input::name, kMaskFloat, &guarded_kernel<conv_transpose2d_kernel>);
  r.add(op::_resize::name, kMaskAll, &guarded_kernel<resize_kernel>);
  r.add(op::logsumexp::name, kMaskFloat, &guarded_kernel<logsumexp_kernel>);
  r.add(op::linalg_vector_norm::name, kMaskFloat, &guarded_kernel<vector_norm_kernel>);
}

}  // namespace tessera::cpu
