// Int8 linear and conv2d on oneDNN 2.6: uint8 activations (per-tensor affine) x int8 weights
// (per-channel symmetric) -> int32 accumulation inside a matmul or convolution primitive whose
// attributes carry the requantisation (output scales per channel, source and destination zero
// points), the addend of conv2d (a sum post-op) and relu.
#include <emmintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "nn_common.h"
#include "onednn.h"
#include "quantized.h"
#include "../src/isa.h"
#include "tessera/op_names.h"

namespace tessera::cpu {
namespace {

using dnnl::memory;
using nn::Buffer;
using nn::fail;
using nn::shape_str;

// Note [Packed int8 weights] (op_catalogue.cpp) sizes the tensor; this is what the CPU writes in
// it: a header, the per-channel scales at kScalesOffset, then the weights in the layout oneDNN
// chose for them (format_tag::any), with the compensation terms the layout carries for source
// zero points. The header keeps that layout's memory descriptor, so a call rebuilds the
// primitive against the same layout and uses the bytes as they are.
constexpr char kMagic[8] = {'T', 'Q', 'L', 'I', 'N', 'W', '1', '\0'};
constexpr int64_t kHeaderBytes = 4096;
constexpr int64_t kScalesOffset = kHeaderBytes;
// The batch the weights are laid out for; the int8 layouts of oneDNN 2.6 do not depend on it, and
// a call whose primitive wants another layout reorders (logged once).
constexpr int64_t kPackBatchHint = 128;

struct PackHeader {
  char magic[8];
  int64_t n, k;
  int64_t weights_offset, weights_bytes;
  dnnl_memory_desc_t weights_md;
};
static_assert(sizeof(PackHeader) <= kHeaderBytes, "the packed-weight header must fit its reserved bytes");

int64_t weights_offset_for(int64_t n) { return (kScalesOffset + 4 * n + 63) / 64 * 64; }

char* bytes_of(const tessera_tensor_t* t) { return static_cast<char*>(t->data) + t->byte_offset; }

// The primitive attributes shared by packing and running, so both see the same weights layout.
dnnl::primitive_attr qlinear_attr(const float* scales, int64_t n, bool u8_out, bool relu) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_output_scales(2, std::vector<float>(scales, scales + n));
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  if (u8_out) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
  }
  return attr;
}

dnnl::matmul::primitive_desc qlinear_pd(int64_t m, int64_t k, int64_t n, const memory::desc& weights, bool bias,
                                        memory::data_type out, const dnnl::primitive_attr& attr) {
  const memory::desc src({m, k}, memory::data_type::u8, memory::format_tag::ab);
  const memory::desc dst({m, n}, out, memory::format_tag::ab);
  const auto d = bias ? dnnl::matmul::desc(src, weights, memory::desc({1, n}, memory::data_type::f32,
                                                                      memory::format_tag::ab), dst)
                      : dnnl::matmul::desc(src, weights, dst);
  return dnnl::matmul::primitive_desc(d, attr, nn::cpu_engine());
}

// The primitive cache of Note [Primitive cache] (onednn_ops.cpp), for the int8 primitives: keyed
// by the bytes that define them, creation outside the lock, cleared past kMaxPrimitives.
struct QPrimitive {
  dnnl::primitive prim;
  memory::desc scratch;
  memory::desc weights;   // the layout the primitive reads
  memory::desc src, dst;  // the activation layouts it chose (conv2d)
};

class QPrimitiveCache {
 public:
  static constexpr size_t kMaxPrimitives = 256;
  template <typename Make>
  std::shared_ptr<const QPrimitive> get(const std::string& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = map_.find(key); it != map_.end()) return it->second;
    }
    auto created = std::make_shared<const QPrimitive>(make());
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= kMaxPrimitives) map_.clear();
    return map_.emplace(key, std::move(created)).first->second;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const QPrimitive>> map_;
};

QPrimitiveCache& qcache() {
  static QPrimitiveCache c;
  return c;
}

// Note [Reused int8 temporaries]: oneDNN's scratchpad, the activations quantized inside a call and
// the uint8 results dequantized inside a call live in grow-only buffers of the calling thread,
// one per use, instead of fresh allocations: a fresh buffer of a megabyte pays a page fault per
// 4 KiB page on first touch, as much as a 1024-wide int8 layer's arithmetic at batch 256.
enum class Temp { Scratchpad, Input, Output, Other, ConvSrc, ConvDst, ConvWeights, kCount };
void* reused(Temp use, size_t bytes) {
  struct Slot {
    Buffer<char> buf;
    size_t capacity = 0;
  };
  thread_local Slot slots[size_t(Temp::kCount)];
  Slot& s = slots[size_t(use)];
  if (bytes > s.capacity) {
    s.buf.reset(int64_t(bytes));
    s.capacity = bytes;
  }
  return s.buf.get();
}

void execute(const QPrimitive& p, std::unordered_map<int, memory>& args) {
  if (const size_t sbytes = p.scratch.get_size())
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratch, nn::cpu_engine(), reused(Temp::Scratchpad, sbytes)));
  thread_local dnnl::stream s(nn::cpu_engine());
  p.prim.execute(s, args);
  s.wait();
}

void key_append(std::string& key, const void* p, size_t n) { key.append(static_cast<const char*>(p), n); }
template <typename T>
void key_value(std::string& key, const T& v) {
  key_append(key, &v, sizeof(v));
}

// (weight int8 [n, k], weight_scale float32 [n]) -> uint8 [n, bytes]
void prepack_kernel(const KernelCall& call) {
  TempList holder;
  const tessera_tensor_t* w = nn::contiguous(call.input(0).raw(), holder);
  const tessera_tensor_t* s = nn::contiguous(call.input(1).raw(), holder);
  const tessera_tensor_t* out = call.output(0).raw();
  if (w->dtype != TESSERA_DTYPE_INT8 || w->ndim != 2 || s->dtype != TESSERA_DTYPE_FLOAT32 || s->ndim != 1 ||
      s->sizes[0] != w->sizes[0])
    fail("_quantized_linear_prepack: expected int8 weight [n, k] and float32 weight_scale [n], got " + shape_str(w) +
         " and " + shape_str(s));
  if (!TensorView(out).is_contiguous()) fail("_quantized_linear_prepack: the output must be contiguous");
  const int64_t n = w->sizes[0], k = w->sizes[1];
  const float* scales = static_cast<const float*>(static_cast<const void*>(bytes_of(s)));
  for (int64_t j = 0; j < n; ++j)
    if (!(std::isfinite(scales[j]) && scales[j] > 0))
      fail("_quantized_linear_prepack: weight_scale[" + std::to_string(j) + "] = " + std::to_string(scales[j]) +
           "; expected finite positive scales");
  const memory::desc any({k, n}, memory::data_type::s8, memory::format_tag::any);
  const auto pd = qlinear_pd(kPackBatchHint, k, n, any, false, memory::data_type::u8,
                             qlinear_attr(scales, n, true, false));
  const memory::desc packed = pd.weights_desc();
  const int64_t woff = weights_offset_for(n), wbytes = int64_t(packed.get_size());
  if (woff + wbytes > out->numel)
    fail("_quantized_linear_prepack: oneDNN's layout for weight " + shape_str(w) + " needs " +
         std::to_string(woff + wbytes) + " bytes, more than the " + std::to_string(out->numel) +
         " the op contract reserves (Note [Packed int8 weights])");
  char* base = bytes_of(out);
  std::memset(base, 0, size_t(kHeaderBytes));
  PackHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.n = n;
  h.k = k;
  h.weights_offset = woff;
  h.weights_bytes = wbytes;
  h.weights_md = packed.data;
  std::memcpy(base, &h, sizeof(h));
  std::memcpy(base + kScalesOffset, scales, size_t(n) * 4);
  // The user's [n, k] row-major weights are the [k, n] matrix in column-major order (tag ba).
  memory user({{k, n}, memory::data_type::s8, memory::format_tag::ba}, nn::cpu_engine(), bytes_of(w));
  memory dst(packed, nn::cpu_engine(), base + woff);
  thread_local dnnl::stream s_(nn::cpu_engine());
  dnnl::reorder(user, dst).execute(s_, user, dst);
  s_.wait();
}

PackHeader read_header(const tessera_tensor_t* pw, int64_t k) {
  if (!TensorView(pw).is_contiguous() || pw->numel < kHeaderBytes)
    fail("_quantized_linear: packed_weight " + shape_str(pw) + " is not the output of _quantized_linear_prepack");
  PackHeader header;
  std::memcpy(&header, bytes_of(pw), sizeof(header));
  const PackHeader* h = &header;
  if (std::memcmp(h->magic, kMagic, sizeof(kMagic)) != 0 || h->n != pw->sizes[0] || h->n <= 0 || h->k <= 0 ||
      h->weights_offset != weights_offset_for(h->n) || h->weights_bytes < 0 ||
      h->weights_offset + h->weights_bytes > pw->numel)
    fail("_quantized_linear: packed_weight " + shape_str(pw) +
         " is not the output of _quantized_linear_prepack (bad header)");
  if (h->k != k)
    fail("_quantized_linear: input has " + std::to_string(k) + " features but the packed weight expects " +
         std::to_string(h->k) + "; expected input [..., " + std::to_string(h->k) + "]");
  return header;
}

// PyTorch's quantize_val to quint8 of n contiguous float32 values, on the CPU's threads: the
// arithmetic of detail::quantize_reference (core/src/quant_params.cpp), whose reasoning holds here:
// clamping x * inv one step beyond the range keeps it below 2^22, where adding and subtracting
// 1.5 * 2^23 rounds half to even; NaN gives 255. Four values at a time with SSE2 (the baseline of
// x86-64; the compiler does not vectorise the NaN select under -ftrapping-math), the same
// operations one at a time for the tail.
void quantize_u8(const float* x, int64_t n, float inv, int32_t zero_point, uint8_t* q) {
  const float zp = float(zero_point), lo = -zp, hi = 255.0f - zp, magic = 12582912.0f;
  auto one = [&](float xv) {
    const float v = xv * inv;
    const float c = std::min(std::max(v, lo - 1.0f), hi + 1.0f);
    const float r = std::min(std::max((c + magic) - magic, lo), hi);
    return uint8_t(std::isnan(v) ? 255.0f : r + zp);
  };
  parallel_for_dynamic(0, n, 1 << 14, [&](int64_t b, int64_t e) {
    const __m128 vinv = _mm_set1_ps(inv), vlo = _mm_set1_ps(lo), vhi = _mm_set1_ps(hi);
    const __m128 vlo1 = _mm_set1_ps(lo - 1.0f), vhi1 = _mm_set1_ps(hi + 1.0f), vmagic = _mm_set1_ps(magic);
    const __m128 vzp = _mm_set1_ps(zp), v255 = _mm_set1_ps(255.0f);
    int64_t i = b;
    for (; i + 16 <= e; i += 16) {
      __m128i packed[4];
      for (int k = 0; k < 4; ++k) {
        const __m128 v = _mm_mul_ps(_mm_loadu_ps(x + i + 4 * k), vinv);
        const __m128 nan = _mm_cmpunord_ps(v, v);
        const __m128 c = _mm_min_ps(_mm_max_ps(v, vlo1), vhi1);
        const __m128 r = _mm_min_ps(_mm_max_ps(_mm_sub_ps(_mm_add_ps(c, vmagic), vmagic), vlo), vhi);
        const __m128 out = _mm_or_ps(_mm_and_ps(nan, v255), _mm_andnot_ps(nan, _mm_add_ps(r, vzp)));
        packed[k] = _mm_cvttps_epi32(out);
      }
      const __m128i lo16 = _mm_packs_epi32(packed[0], packed[1]), hi16 = _mm_packs_epi32(packed[2], packed[3]);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm_packus_epi16(lo16, hi16));
    }
    for (; i < e; ++i) q[i] = one(x[i]);
  });
}

// PyTorch's choose_qparams (MinMaxObserver, quint8 over 0..qmax) for values in [lo, hi]: the range
// widened to include 0, scale = (max - min) / qmax (at least float32 epsilon), zero point
// -round(min / scale) clamped to 0..qmax. tessera::quantization::choose_qparams is the same.
void choose_u8_qparams(float lo, float hi, int32_t qmax, float* scale, int32_t* zero_point) {
  const float min_neg = std::min(lo, 0.0f), max_pos = std::max(hi, 0.0f);
  *scale = std::max((max_pos - min_neg) / float(qmax), std::numeric_limits<float>::epsilon());
  const double zp = -double(std::nearbyint(min_neg / *scale));
  *zero_point = int32_t(std::clamp(zp, 0.0, double(qmax)));
}

// How a call produces its output (Note [Int8 linear outputs]).
enum class OutKind { U8, Dequantized, Float };

// Note [Int8 linear outputs]
// oneDNN computes dst = scale[j] * (acc + bias[j]) (then relu, then + dst zero point): the
// requantisation scale s_x * s_w[j] / s_out goes in the scales and the float bias is divided by
// s_x * s_w[j]. U8 writes the requantised uint8 representation. Dequantized writes the same
// representation into a reused buffer and then (q - zp_out) * s_out into the float32 output in one
// parallel pass (the values dequantize() of the quint8 result gives). Float keeps s_x out of the
// primitive (dynamic quantisation changes it every call) and multiplies it in afterwards; relu
// commutes with that positive factor.
void run_qlinear(const tessera_tensor_t* x_u8, const PackHeader& h, const char* base, const float* bias, double in_scale,
                 int32_t in_zp, double out_scale, int32_t out_zp, bool relu, OutKind kind, int64_t m, float* y_f32,
                 uint8_t* y_u8) {
  const int64_t n = h.n, k = h.k;
  const float* wscale = reinterpret_cast<const float*>(base + kScalesOffset);
  const bool requantise = kind != OutKind::Float;
  Buffer<float> scales(n), qbias(bias ? n : 0);
  for (int64_t j = 0; j < n; ++j) {
    scales[j] = requantise ? float(in_scale * double(wscale[j]) / out_scale) : wscale[j];
    if (bias) qbias[j] = float(double(bias[j]) / (in_scale * double(wscale[j])));
  }
  const memory::data_type out_dt = requantise ? memory::data_type::u8 : memory::data_type::f32;
  const memory::desc packed(h.weights_md);
  std::string key = "qlinear";
  key_value(key, m);
  key_value(key, k);
  key_value(key, n);
  key_value(key, int(out_dt));
  key_value(key, relu);
  key_value(key, bias != nullptr);
  key_append(key, &h.weights_md, sizeof(h.weights_md));
  key_append(key, scales.get(), size_t(n) * 4);
  // Note [Grain size]: small products are created and run for the calling thread alone.
  const OmpThreadScope threads(threads_for(OpKind::Matmul, work_product({2, m, k, n})));
  key_value(key, max_threads());
  auto prim = qcache().get(key, [&] {
    const auto attr = qlinear_attr(scales.get(), n, requantise, relu);
    auto pd = qlinear_pd(m, k, n, packed, bias != nullptr, out_dt, attr);
    return QPrimitive{dnnl::matmul(pd), pd.scratchpad_desc(), pd.weights_desc(), pd.src_desc(), pd.dst_desc()};
  });
  if (kind == OutKind::Dequantized) y_u8 = static_cast<uint8_t*>(reused(Temp::Output, size_t(m * n)));
  void* dst = requantise ? static_cast<void*>(y_u8) : static_cast<void*>(y_f32);
  dnnl::engine& eng = nn::cpu_engine();
  std::unordered_map<int, memory> args;
  args.emplace(DNNL_ARG_SRC, memory({{m, k}, memory::data_type::u8, memory::format_tag::ab}, eng, bytes_of(x_u8)));
  args.emplace(DNNL_ARG_WEIGHTS, memory(packed, eng, const_cast<char*>(base + h.weights_offset)));
  args.emplace(DNNL_ARG_DST, memory({{m, n}, out_dt, memory::format_tag::ab}, eng, dst));
  if (bias) args.emplace(DNNL_ARG_BIAS, memory({{1, n}, memory::data_type::f32, memory::format_tag::ab}, eng, qbias.get()));
  int32_t src_zp = in_zp, dst_zp = out_zp;
  args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, memory({{1}, memory::data_type::s32, memory::format_tag::a}, eng, &src_zp));
  if (requantise)
    args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, memory({{1}, memory::data_type::s32, memory::format_tag::a}, eng, &dst_zp));
  execute(*prim, args);
  if (kind == OutKind::Dequantized) {
    const float s = float(out_scale);
    parallel_for_dynamic(0, m * n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y_f32[i] = float(int32_t(y_u8[i]) - out_zp) * s;
    });
  } else if (kind == OutKind::Float) {
    const float sx = float(in_scale);
    parallel_for_dynamic(0, m * n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y_f32[i] *= sx;
    });
  }
}

// The uint8 input of a call: the representation as it is, or float32 values quantized into a
// reused buffer (Note [Reused int8 temporaries]) viewed as a contiguous uint8 tensor.
struct QuantizedInput {
  tessera_tensor_t view;
};
const tessera_tensor_t* quantized_input(const tessera_tensor_t* x, float scale, int32_t zero_point, QuantizedInput& q,
                                        Temp use = Temp::Input) {
  if (x->dtype == TESSERA_DTYPE_UINT8) return x;
  uint8_t* dst = static_cast<uint8_t*>(reused(use, size_t(std::max<int64_t>(x->numel, 1))));
  quantize_u8(static_cast<const float*>(static_cast<const void*>(bytes_of(x))), x->numel, 1.0f / scale, zero_point, dst);
  q.view = *x;
  q.view.dtype = TESSERA_DTYPE_UINT8;
  q.view.data = dst;
  q.view.byte_offset = 0;
  return &q.view;
}

const tessera_tensor_t* contiguous_output(const tessera_tensor_t* y_user, TempList& holder) {
  if (TensorView(y_user).is_contiguous()) return y_user;
  holder.emplace_back(y_user->sizes, y_user->ndim, y_user->dtype);
  return holder.back().raw();
}

// The operands of both int8 linear kernels: (input [..., k], packed_weight, bias float32 [n]?) with
// the input and the bias contiguous (copies kept in `holder`), and the packed weight's header
// checked against k.
struct QLinearOperands {
  const tessera_tensor_t* x;
  const tessera_tensor_t* pw;
  const tessera_tensor_t* bias;  // null: none
  const tessera_tensor_t* y_user;
  int64_t k;
  PackHeader h;
};
QLinearOperands qlinear_operands(const KernelCall& call, TempList& holder) {
  QLinearOperands o;
  o.x = nn::contiguous(call.input(0).raw(), holder);
  o.pw = call.input(1).raw();
  o.bias = call.num_inputs() > 2 && call.input(2).defined() ? nn::contiguous(call.input(2).raw(), holder) : nullptr;
  o.y_user = call.output(0).raw();
  o.k = o.x->sizes[o.x->ndim - 1];
  o.h = read_header(o.pw, o.k);
  return o;
}

// (input uint8 or float32 [..., k], packed_weight, bias float32 [n]?; input_scale, input_zero_point,
//  output_scale, output_zero_point, relu, out_dtype)
void qlinear_kernel(const KernelCall& call) {
  TempList holder;
  const auto [x, pw, bias, y_user, k, h] = qlinear_operands(call, holder);
  using A = op::_quantized_linear::attr;
  const double in_scale = call.attr_double(A::input_scale);
  const int32_t in_zp = int32_t(call.attr_int(A::input_zero_point));
  const int64_t out_dtype = call.attr_int(A::out_dtype);
  const OutKind kind = out_dtype == TESSERA_DTYPE_UINT8    ? OutKind::U8
                       : out_dtype == TESSERA_DTYPE_QUINT8 ? OutKind::Dequantized
                                                            : OutKind::Float;
  if (y_user->numel == 0) return;
  const int64_t m = x->numel / k;
  QuantizedInput qx;
  const tessera_tensor_t* xu = quantized_input(x, float(in_scale), in_zp, qx);
  const tessera_tensor_t* y = contiguous_output(y_user, holder);
  run_qlinear(xu, h, bytes_of(pw), bias ? reinterpret_cast<const float*>(bytes_of(bias)) : nullptr, in_scale, in_zp,
              call.attr_double(A::output_scale), int32_t(call.attr_int(A::output_zero_point)), call.attr_bool(A::relu), kind, m,
              reinterpret_cast<float*>(bytes_of(y)), reinterpret_cast<uint8_t*>(bytes_of(y)));
  if (y != y_user) copy_tensor(y_user, y);
}

// (input float32 [..., k], packed_weight, bias float32 [n]?; reduce_range, relu): PyTorch's
// quantized::linear_dynamic. The input's scale and zero point come from its min and max in this
// call, over 0..127 with reduce_range (PyTorch's x86 default, which also keeps u8 x s8 pair sums
// clear of saturation without VNNI) or 0..255.
void qlinear_dynamic_kernel(const KernelCall& call) {
  TempList holder;
  const auto [x, pw, bias, y_user, k, h] = qlinear_operands(call, holder);
  if (y_user->numel == 0) return;
  const int64_t m = x->numel / k;
  const float* xp = static_cast<const float*>(static_cast<const void*>(bytes_of(x)));
  float l = std::numeric_limits<float>::infinity(), u = -l;
  bool finite = true;
  std::mutex mu;
  parallel_for(0, x->numel, 1 << 14, [&](int64_t b, int64_t e) {
    // Vectorisable: x * 0 is 0 for finite x and NaN for inf and NaN, so `zero` stays 0 exactly
    // when every value is finite.
    float cl = std::numeric_limits<float>::infinity(), cu = -cl, zero = 0;
    for (int64_t i = b; i < e; ++i) {
      cl = std::min(cl, xp[i]);
      cu = std::max(cu, xp[i]);
      zero += xp[i] * 0.0f;
    }
    std::lock_guard<std::mutex> lock(mu);
    l = std::min(l, cl);
    u = std::max(u, cu);
    finite = finite && zero == 0.0f;
  });
  if (!finite)
    fail("_quantized_linear_dynamic: the input " + shape_str(x) +
         " holds non-finite values (inf or NaN); dynamic quantisation needs a finite range");
  float scale = 1;
  int32_t zp = 0;
  choose_u8_qparams(l, u, call.attr_bool(op::_quantized_linear_dynamic::attr::reduce_range) ? 127 : 255, &scale, &zp);
  QuantizedInput qx;
  const tessera_tensor_t* xu = quantized_input(x, scale, zp, qx);
  const tessera_tensor_t* y = contiguous_output(y_user, holder);
  run_qlinear(xu, h, bytes_of(pw), bias ? reinterpret_cast<const float*>(bytes_of(bias)) : nullptr, scale, zp, 1.0, 0,
              call.attr_bool(op::_quantized_linear_dynamic::attr::relu), OutKind::Float, m, reinterpret_cast<float*>(bytes_of(y)), nullptr);
  if (y != y_user) copy_tensor(y_user, y);
}

// Note [Int8 conv weights]: the int8 weights of a convolution reordered into its primitive's layout,
// kept under the weight storage's version (Note [Storage version] in tessera/tensor.h: drawn from
// one process-wide counter, it changes on every write), its offset and the two layouts. A lowered
// program's constant weights are then reordered once; a weight written in place gets a new version
// and is reordered again. At most kMaxEntries entries and kMaxBytes bytes; cleared when full.
class QWeightCache {
 public:
  static constexpr size_t kMaxEntries = 64;
  static constexpr size_t kMaxBytes = size_t(256) << 20;
  struct Entry {
    Buffer<char> data;
    size_t bytes = 0;
  };
  template <typename Pack>
  std::shared_ptr<const Entry> get(const std::string& key, size_t bytes, Pack&& pack) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = map_.find(key); it != map_.end()) return it->second;
    }
    auto e = std::make_shared<Entry>();
    e->data.reset(int64_t(bytes));
    e->bytes = bytes;
    pack(e->data.get());
    if (bytes > kMaxBytes) return e;
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= kMaxEntries || held_ + bytes > kMaxBytes) {
      map_.clear();
      held_ = 0;
    }
    auto [it, inserted] = map_.emplace(key, std::move(e));
    if (inserted) held_ += bytes;
    return it->second;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Entry>> map_;
  size_t held_ = 0;
};

QWeightCache& qweight_cache() {
  static QWeightCache c;
  return c;
}

// Note [Int8 conv2d]
// (input uint8 or float32 [N, C, H, W], weight int8 [O, C/g, kH, kW], weight_scale [O], bias?,
// other?; stride, padding, dilation, groups, input_scale, input_zero_point, other_scale,
// other_zero_point, output_scale, output_zero_point, relu, out_dtype). One oneDNN convolution with
// the layouts it picks (format_tag::any: nhwc or blocked for int8); activations are reordered in
// and out through reused buffers (Note [Reused int8 temporaries]) and the weights are reordered
// into the primitive's layout once per version (Note [Int8 conv weights]). Requantisation as Note
// [Int8 linear outputs] (output scales s_x * s_w[o] / s_out per channel, the bias over
// s_x * s_w[o], runtime zero points); the addend enters as a sum post-op: the destination is filled with other's representation first and
// the primitive adds (s_other / s_out) * (dst - zp_other) before relu and the destination zero
// point, which is PyTorch's add_relu of two quint8 tensors done in float32 before one rounding.
void qconv_kernel(const KernelCall& call) {
  TempList holder;
  const tessera_tensor_t* x = nn::contiguous(call.input(0).raw(), holder);
  const tessera_tensor_t* w = nn::contiguous(call.input(1).raw(), holder);
  const tessera_tensor_t* ws = nn::contiguous(call.input(2).raw(), holder);
  auto optional_input = [&](int i) {
    return call.num_inputs() > i && call.input(i).defined() ? nn::contiguous(call.input(i).raw(), holder) : nullptr;
  };
  const tessera_tensor_t* bias = optional_input(3);
  const tessera_tensor_t* other = optional_input(4);
  const tessera_tensor_t* y_user = call.output(0).raw();
  int64_t s[2], p[2], d[2];
  const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
  using A = op::_quantized_conv2d::attr;
  nn::attr_pair(call, A::stride, "stride", s, one);
  nn::attr_pair(call, A::padding, "padding", p, zero);
  nn::attr_pair(call, A::dilation, "dilation", d, one);
  const int64_t g = call.attr_int(A::groups);
  const double in_scale = call.attr_double(A::input_scale), other_scale = call.attr_double(A::other_scale),
               out_scale = call.attr_double(A::output_scale);
  const int32_t in_zp = int32_t(call.attr_int(A::input_zero_point)), other_zp = int32_t(call.attr_int(A::other_zero_point)),
                out_zp = int32_t(call.attr_int(A::output_zero_point));
  const bool relu = call.attr_bool(A::relu);
  const bool dequantized = call.attr_int(A::out_dtype) == TESSERA_DTYPE_QUINT8;
  const int64_t nb = x->sizes[0], c = x->sizes[1], h = x->sizes[2], wd = x->sizes[3];
  const int64_t oc = w->sizes[0], kh = w->sizes[2], kw = w->sizes[3];
  const int64_t oh = y_user->sizes[2], ow = y_user->sizes[3];
  if (g <= 0 || c % g != 0 || oc % g != 0 || w->sizes[1] != c / g)
    fail("_quantized_conv2d: weight " + shape_str(w) + " with groups=" + std::to_string(g) + " does not fit the input " +
         shape_str(x) + "; expected weight [out_channels, in_channels/groups, kH, kW]");
  if (y_user->numel == 0) return;
  QuantizedInput qx, qo;
  const tessera_tensor_t* xu = quantized_input(x, float(in_scale), in_zp, qx);
  const tessera_tensor_t* ou = other ? quantized_input(other, float(other_scale), other_zp, qo, Temp::Other) : nullptr;
  const float* wscale = static_cast<const float*>(static_cast<const void*>(bytes_of(ws)));
  Buffer<float> scales(oc), qbias(bias ? oc : 0);
  for (int64_t o = 0; o < oc; ++o) {
    if (!(std::isfinite(wscale[o]) && wscale[o] > 0))
      fail("_quantized_conv2d: weight_scale[" + std::to_string(o) + "] = " + std::to_string(wscale[o]) +
           "; expected finite positive scales");
    scales[o] = float(in_scale * double(wscale[o]) / out_scale);
    if (bias) qbias[o] = float(double(reinterpret_cast<const float*>(bytes_of(bias))[o]) / (in_scale * double(wscale[o])));
  }
  const float sum_scale = float(other_scale / out_scale);
  const memory::desc src_md({nb, c, h, wd}, memory::data_type::u8, memory::format_tag::nchw);
  const memory::desc dst_md({nb, oc, oh, ow}, memory::data_type::u8, memory::format_tag::nchw);
  const memory::desc wei_md = g == 1 ? memory::desc({oc, c, kh, kw}, memory::data_type::s8, memory::format_tag::oihw)
                                     : memory::desc({g, oc / g, c / g, kh, kw}, memory::data_type::s8,
                                                    memory::format_tag::goihw);
  const memory::desc bias_md({oc}, memory::data_type::f32, memory::format_tag::x);
  std::string key = "qconv2d";
  const int64_t geo[] = {nb, c, h, wd, oc, kh, kw, s[0], s[1], p[0], p[1], d[0], d[1], g, bias != nullptr,
                         other != nullptr, other_zp, relu};
  key_append(key, geo, sizeof(geo));
  key_value(key, sum_scale);
  key_append(key, scales.get(), size_t(oc) * 4);
  const OmpThreadScope threads(threads_for(OpKind::Conv, work_product({2, nb, oc, oh, ow, c / g, kh, kw})));
  key_value(key, max_threads());
  auto prim = qcache().get(key, [&] {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_output_scales(2, std::vector<float>(scales.get(), scales.get() + oc));
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::post_ops po;
    if (other) po.append_sum(sum_scale, other_zp, memory::data_type::u8);
    if (relu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    attr.set_post_ops(po);
    const memory::dims strides = {s[0], s[1]}, dil = {d[0] - 1, d[1] - 1}, pad = {p[0], p[1]};
    const memory::desc src_any({nb, c, h, wd}, memory::data_type::u8, memory::format_tag::any);
    const memory::desc dst_any({nb, oc, oh, ow}, memory::data_type::u8, memory::format_tag::any);
    const memory::desc wei_any = g == 1 ? memory::desc({oc, c, kh, kw}, memory::data_type::s8, memory::format_tag::any)
                                        : memory::desc({g, oc / g, c / g, kh, kw}, memory::data_type::s8,
                                                       memory::format_tag::any);
    const auto desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                             dnnl::algorithm::convolution_direct, src_any, wei_any,
                                                             bias_md, dst_any, strides, dil, pad, pad)
                           : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                             dnnl::algorithm::convolution_direct, src_any, wei_any,
                                                             dst_any, strides, dil, pad, pad);
    dnnl::convolution_forward::primitive_desc pd(desc, attr, nn::cpu_engine());
    return QPrimitive{dnnl::convolution_forward(pd), pd.scratchpad_desc(), pd.weights_desc(), pd.src_desc(),
                      pd.dst_desc()};
  });
  dnnl::engine& eng = nn::cpu_engine();
  thread_local dnnl::stream strm(eng);
  auto reordered = [&](const memory::desc& from_md, void* from, const memory::desc& to_md, Temp use) {
    memory src_mem(from_md, eng, from);
    if (to_md == from_md) return src_mem;
    memory to(to_md, eng, reused(use, to_md.get_size()));
    dnnl::reorder(src_mem, to).execute(strm, src_mem, to);
    return to;
  };
  std::unordered_map<int, memory> args;
  args.emplace(DNNL_ARG_SRC, reordered(src_md, bytes_of(xu), prim->src, Temp::ConvSrc));
  std::shared_ptr<const QWeightCache::Entry> cached;
  const uint64_t version = w == call.input(1).raw() ? nn::tensor_version(w) : 0;
  if (version != 0 && prim->weights != wei_md) {
    std::string wkey;
    key_value(wkey, version);
    key_value(wkey, w->byte_offset);
    key_append(wkey, &wei_md.data, sizeof(wei_md.data));
    key_append(wkey, &prim->weights.data, sizeof(prim->weights.data));
    cached = qweight_cache().get(wkey, prim->weights.get_size(), [&](void* out) {
      memory from(wei_md, eng, bytes_of(w)), to(prim->weights, eng, out);
      dnnl::reorder(from, to).execute(strm, from, to);
      strm.wait();
    });
    args.emplace(DNNL_ARG_WEIGHTS, memory(prim->weights, eng, cached->data.get()));
  } else {
    args.emplace(DNNL_ARG_WEIGHTS, reordered(wei_md, bytes_of(w), prim->weights, Temp::ConvWeights));
  }
  // The destination in the primitive's layout: other's representation when there is an addend.
  const tessera_tensor_t* y = contiguous_output(y_user, holder);
  uint8_t* y_u8 = dequantized ? static_cast<uint8_t*>(reused(Temp::Output, size_t(y->numel))) : reinterpret_cast<uint8_t*>(bytes_of(y));
  memory dst_user(dst_md, eng, y_u8);
  memory dst = prim->dst == dst_md ? dst_user : memory(prim->dst, eng, reused(Temp::ConvDst, prim->dst.get_size()));
  if (ou) {
    memory other_user(dst_md, eng, bytes_of(ou));
    dnnl::reorder(other_user, dst).execute(strm, other_user, dst);
  }
  strm.wait();
  args.emplace(DNNL_ARG_DST, dst);
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(bias_md, eng, qbias.get()));
  int32_t src_zp = in_zp, dst_zp = out_zp;
  args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, memory({{1}, memory::data_type::s32, memory::format_tag::a}, eng, &src_zp));
  args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, memory({{1}, memory::data_type::s32, memory::format_tag::a}, eng, &dst_zp));
  execute(*prim, args);
  if (dst != dst_user) {
    dnnl::reorder(dst, dst_user).execute(strm, dst, dst_user);
    strm.wait();
  }
  if (dequantized) {
    float* yf = reinterpret_cast<float*>(bytes_of(y));
    const float sc = float(out_scale);
    parallel_for_dynamic(0, y->numel, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) yf[i] = float(int32_t(y_u8[i]) - out_zp) * sc;
    });
  }
  if (y != y_user) copy_tensor(y_user, y);
}

// Note [Int8 without VNNI]: without VNNI (AVX512-VNNI or AVX-VNNI) oneDNN multiplies u8 x s8 with
// vpmaddubsw, whose 16-bit pair sums saturate: large activations times large weights lose bits
// (PyTorch #144434; its x86 quantizer narrows activations to 7 bits for that). The kernels stay
// correct for 7-bit activations and are slower; a one-time warning says so. The level honours
// TESSERA_CPU_CAPABILITY: below avx2 the plugin counts as without VNNI.
bool cpu_has_vnni() {
  const CpuFeatures f = detect_cpu_features();  // the SDK's probe (tessera/cpu_features.h)
  const Capability level = capability();
  return (f.avx512vnni && level == Capability::AVX512) || (f.avx_vnni && level != Capability::Default);
}

}  // namespace

void register_quantized_kernels(const sdk::Host& host) {
  if (!cpu_has_vnni())
    sdk::log(TESSERA_LOG_WARNING, "cpu",
             std::string("int8 kernels: no VNNI at ISA level ") + capability_name(capability()) +
                 " (TESSERA_CPU_CAPABILITY); u8 x s8 products saturate in 16 bits, so int8 is slower and "
                 "activations should use 7 bits (Note [Int8 without VNNI])");
  host.register_kernel(op::_quantized_linear_prepack::name, TESSERA_DTYPE_BIT(TESSERA_DTYPE_INT8),
                       TESSERA_SDK_KERNEL(prepack_kernel));
  host.register_kernel(op::_quantized_linear::name,
                       TESSERA_DTYPE_BIT(TESSERA_DTYPE_UINT8) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32),
                       TESSERA_SDK_KERNEL(qlinear_kernel));
  host.register_kernel(op::_quantized_conv2d::name,
                       TESSERA_DTYPE_BIT(TESSERA_DTYPE_UINT8) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32),
                       TESSERA_SDK_KERNEL(qconv_kernel));
  host.register_kernel(op::_quantized_linear_dynamic::name, TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32),
                       TESSERA_SDK_KERNEL(qlinear_dynamic_kernel));
}

}  // namespace tessera::cpu
