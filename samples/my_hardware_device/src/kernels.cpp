#include "kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <tessera/float16.h>
#include <tessera/op_names.h>
#include <tessera/random.h>
#include <tessera/sdk.hpp>

namespace mhd {

Emulator*& emulator() {
  static Emulator* e = nullptr;
  return e;
}

int& current_device() {
  thread_local int index = 0;
  return index;
}

std::function<void()> traced(std::function<void()> task, const char* name, const char* category, int device,
                             const Queue& queue, int64_t bytes) {
  if (!tessera::sdk::profiler_enabled()) return task;
  const uint64_t correlation = tessera::sdk::profiler_correlation_id();  // of the op issuing it, read here
  std::string args = bytes >= 0 ? "{\"bytes\": " + std::to_string(bytes) + "}" : std::string();
  return [task = std::move(task), name = std::string(name), category, device, stream = queue.number(), correlation,
          args = std::move(args)] {
    tessera::sdk::ScopedSpan span(name.c_str(), category, device, stream, correlation,
                                  args.empty() ? nullptr : args.c_str());
    task();
  };
}

namespace {

using tessera::sdk::Error;
using tessera::sdk::KernelCall;
using tessera::sdk::TensorView;

// ---------------------------------------------------------------- element access

bool is_floating(int dt) { return dt == TESSERA_DTYPE_FLOAT32 || dt == TESSERA_DTYPE_FLOAT64 ||
                                  dt == TESSERA_DTYPE_BFLOAT16 || dt == TESSERA_DTYPE_FLOAT16; }

// IEEE binary16 <-> double through float, with the SDK's conversion (tessera/float16.h), so that
// copies and fills take every dtype.
double half_to_double(uint16_t h) { return double(tessera::fp16::half_bits_to_float(h)); }
uint16_t double_to_half(double d) { return tessera::fp16::float_to_half_bits(float(d)); }

// Note [Floating to integral conversion]
// C++ leaves the conversion of NaN, infinities and out-of-range values to an integer undefined.
// The devices convert as PyTorch does on x86-64 (its truncating conversions): to int64, anything
// outside the int64 range (and NaN) becomes INT64_MIN; to int32 and narrower types, the value goes
// through int32, where anything outside the int32 range becomes INT32_MIN, and then wraps.
int64_t double_to_int64(double v) {
  constexpr double kTwo63 = 9223372036854775808.0;
  return v >= -kTwo63 && v < kTwo63 ? int64_t(v) : INT64_MIN;
}
int32_t double_to_int32(double v) {
  return v > -2147483649.0 && v < 2147483648.0 ? int32_t(v) : INT32_MIN;
}

template <typename T>
T read_as(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void write_as(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

double load_f(const std::byte* p, int dt) {
  switch (dt) {
    case TESSERA_DTYPE_BOOL: return read_as<uint8_t>(p) != 0;
    case TESSERA_DTYPE_UINT8: return read_as<uint8_t>(p);
    case TESSERA_DTYPE_INT8: return read_as<int8_t>(p);
    case TESSERA_DTYPE_INT16: return read_as<int16_t>(p);
    case TESSERA_DTYPE_INT32: return read_as<int32_t>(p);
    case TESSERA_DTYPE_INT64: return double(read_as<int64_t>(p));
    case TESSERA_DTYPE_FLOAT16: return half_to_double(read_as<uint16_t>(p));
    case TESSERA_DTYPE_BFLOAT16: return tessera::fp16::bfloat16_bits_to_float(read_as<uint16_t>(p));
    case TESSERA_DTYPE_FLOAT32: return read_as<float>(p);
    case TESSERA_DTYPE_FLOAT64: return read_as<double>(p);
    default: throw Error(TESSERA_STATUS_UNIMPLEMENTED, "dtype " + std::to_string(dt) + " not supported");
  }
}

int64_t load_i(const std::byte* p, int dt) {
  switch (dt) {
    case TESSERA_DTYPE_BOOL: return read_as<uint8_t>(p) != 0;
    case TESSERA_DTYPE_UINT8: return read_as<uint8_t>(p);
    case TESSERA_DTYPE_INT8: return read_as<int8_t>(p);
    case TESSERA_DTYPE_INT16: return read_as<int16_t>(p);
    case TESSERA_DTYPE_INT32: return read_as<int32_t>(p);
    case TESSERA_DTYPE_INT64: return read_as<int64_t>(p);
    default: return double_to_int64(load_f(p, dt));  // truncates toward zero (narrower stores: store_f)
  }
}

void store_i(std::byte* p, int dt, int64_t v);

void store_f(std::byte* p, int dt, double v) {
  switch (dt) {
    case TESSERA_DTYPE_BOOL: write_as<uint8_t>(p, v != 0.0); break;
    case TESSERA_DTYPE_FLOAT16: write_as<uint16_t>(p, double_to_half(v)); break;
    case TESSERA_DTYPE_BFLOAT16: write_as<uint16_t>(p, tessera::fp16::float_to_bfloat16_bits(float(v))); break;
    case TESSERA_DTYPE_FLOAT32: write_as<float>(p, float(v)); break;
    case TESSERA_DTYPE_FLOAT64: write_as<double>(p, v); break;
    case TESSERA_DTYPE_UINT8:
    case TESSERA_DTYPE_INT8:
    case TESSERA_DTYPE_INT16:
    case TESSERA_DTYPE_INT32: store_i(p, dt, double_to_int32(v)); break;
    case TESSERA_DTYPE_INT64: store_i(p, dt, double_to_int64(v)); break;
    default: throw Error(TESSERA_STATUS_UNIMPLEMENTED, "dtype " + std::to_string(dt) + " not supported");
  }
}

void store_i(std::byte* p, int dt, int64_t v) {
  switch (dt) {
    case TESSERA_DTYPE_BOOL: write_as<uint8_t>(p, v != 0); break;
    case TESSERA_DTYPE_UINT8: write_as<uint8_t>(p, uint8_t(v)); break;
    case TESSERA_DTYPE_INT8: write_as<int8_t>(p, int8_t(v)); break;
    case TESSERA_DTYPE_INT16: write_as<int16_t>(p, int16_t(v)); break;
    case TESSERA_DTYPE_INT32: write_as<int32_t>(p, int32_t(v)); break;
    case TESSERA_DTYPE_INT64: write_as<int64_t>(p, v); break;
    default: store_f(p, dt, double(v)); break;
  }
}

// ---------------------------------------------------------------- tensors captured for a task

struct DevTensor {
  BufferRef buffer;
  int64_t byte_offset = 0;
  int dtype = 0;
  size_t itemsize = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t numel = 0;
  std::byte* base() const { return buffer->bytes.data() + byte_offset; }
};

// Captures a kernel argument. A CPU argument (a wrapped scalar such as `x + 2.0`) is staged into a
// private buffer now, while its host memory is valid; device arguments are resolved to their buffer.
DevTensor capture(const TensorView& t) {
  DevTensor d;
  d.dtype = t.dtype();
  d.itemsize = tessera::sdk::dtype_size(t.dtype());
  d.sizes.assign(t.sizes(), t.sizes() + t.ndim());
  d.strides.assign(t.strides(), t.strides() + t.ndim());
  d.numel = t.numel();
  if (t.device_type() == TESSERA_DEVICE_CPU) {
    int64_t lo = 0, hi = 0;  // element extent relative to element (0,...,0)
    for (int i = 0; i < t.ndim(); ++i) {
      if (t.size(i) == 0) { lo = hi = 0; break; }
      const int64_t span = (t.size(i) - 1) * t.stride(i);
      (span < 0 ? lo : hi) += span;
    }
    d.buffer = std::make_shared<Buffer>();
    const size_t n = d.numel == 0 ? 0 : size_t(hi - lo + 1) * d.itemsize;
    d.buffer->bytes.resize(n);
    if (n) std::memcpy(d.buffer->bytes.data(), t.host_ptr<std::byte>() + lo * int64_t(d.itemsize), n);
    d.byte_offset = -lo * int64_t(d.itemsize);
    return d;
  }
  d.buffer = emulator()->resolve(t.handle());
  d.byte_offset = t.byte_offset();
  return d;
}

// Strides of `t` aligned to `out_sizes` (right-aligned; broadcast dims get stride 0).
std::vector<int64_t> broadcast_strides(const DevTensor& t, const std::vector<int64_t>& out_sizes,
                                       const char* op, const char* what) {
  const size_t nd = out_sizes.size();
  std::vector<int64_t> s(nd, 0);
  if (t.sizes.size() > nd) {
    throw Error(TESSERA_STATUS_INVALID_ARGUMENT, std::string(op) + ": " + what + " has more dims (" +
                                                     std::to_string(t.sizes.size()) + ") than the output (" +
                                                     std::to_string(nd) + ")");
  }
  const size_t lead = nd - t.sizes.size();
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    const int64_t in = t.sizes[i], out = out_sizes[lead + i];
    if (in == out) {
      s[lead + i] = t.strides[i];
    } else if (in != 1) {
      throw Error(TESSERA_STATUS_INVALID_ARGUMENT,
                  std::string(op) + ": " + what + " size " + std::to_string(in) + " at dim " + std::to_string(i) +
                      " does not broadcast to output size " + std::to_string(out));
    }
  }
  return s;
}

// Calls f(offsets) for every element of `sizes`, with per-operand element offsets.
template <size_t N, typename F>
void walk(const std::vector<int64_t>& sizes, const std::array<std::vector<int64_t>, N>& strides, F&& f) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  if (numel == 0) return;
  const int nd = int(sizes.size());
  std::vector<int64_t> idx(size_t(nd), 0);
  std::array<int64_t, N> off{};
  for (int64_t i = 0; i < numel; ++i) {
    f(off);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < sizes[size_t(d)]) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][size_t(d)];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][size_t(d)] * (sizes[size_t(d)] - 1);
      idx[size_t(d)] = 0;
    }
  }
}

int device_of(const KernelCall& call) {
  return call.device_index() >= 0 ? call.device_index() : current_device();
}

// Validates the call, counts it and enqueues `task` on the call's stream.
void launch(const KernelCall& call, int op_id, std::function<void()> task) {
  Emulator* emu = emulator();
  if (!emu) throw Error(TESSERA_STATUS_UNAVAILABLE, "the emulator is shut down");
  const int dev = device_of(call);
  Queue& q = emu->queue(dev, call.stream());
  emu->device(dev).kernel_count(op_id)++;
  q.enqueue(traced(std::move(task), call.op_name(), "kernel", dev, q));
}

// Op ids: index into kSpecs below (also the kernel counter index).
enum OpId { kFill = 0, kCopy, kAdd, kMul, kRelu, kMatmul, kSum, kNormal, kUniform, kFusedAdam, kMultiTensorSgd, kNumOps };
// Backward kernels (kBackwardSpecs) count after the forward ones.
enum BackwardOpId { kReluBackward = kNumOps, kNumCountedOps };

// ---------------------------------------------------------------- kernels

// Argument positions come from the op contract (tessera/op_names.h, installed with the SDK).
namespace op = tessera::op;

void fill_kernel(const KernelCall& call) {
  constexpr int kValue = op::fill_::attr::value;
  DevTensor out = capture(call.output(0));
  const bool floating_value = call.attr_is_floating(kValue);
  const double vf = call.attr_double(kValue);
  const int64_t vi = call.attr_int(kValue);
  launch(call, kFill, [out, floating_value, vf, vi] {
    std::array<std::vector<int64_t>, 1> st{out.strides};
    std::byte* base = out.base();
    walk<1>(out.sizes, st, [&](const std::array<int64_t, 1>& o) {
      std::byte* p = base + o[0] * int64_t(out.itemsize);
      if (floating_value) store_f(p, out.dtype, vf); else store_i(p, out.dtype, vi);
    });
  });
}

void copy_kernel(const KernelCall& call) {
  DevTensor dst = capture(call.output(0));
  DevTensor src = capture(call.input(op::copy_::tensor::src));
  std::array<std::vector<int64_t>, 2> st{dst.strides, broadcast_strides(src, dst.sizes, call.op_name(), "src")};
  launch(call, kCopy, [dst, src, st] {
    std::byte* db = dst.base();
    const std::byte* sb = src.base();
    const bool same = dst.dtype == src.dtype;
    const bool via_float = is_floating(dst.dtype) || is_floating(src.dtype);
    walk<2>(dst.sizes, st, [&](const std::array<int64_t, 2>& o) {
      std::byte* d = db + o[0] * int64_t(dst.itemsize);
      const std::byte* s = sb + o[1] * int64_t(src.itemsize);
      if (same) std::memcpy(d, s, dst.itemsize);
      // To bool: nonzero (NaN and 0.5 included) is true. To integers: Note [Floating to integral conversion].
      else if (via_float) store_f(d, dst.dtype, load_f(s, src.dtype));
      else store_i(d, dst.dtype, load_i(s, src.dtype));
    });
  });
}

template <int Op>
void binary_kernel(const KernelCall& call) {
  DevTensor out = capture(call.output(0));
  static_assert(op::mul_Tensor::tensor::self == int(op::add_Tensor::tensor::self) &&
                op::mul_Tensor::tensor::other == int(op::add_Tensor::tensor::other));
  using Add = op::add_Tensor;
  DevTensor a = capture(call.input(Add::tensor::self));
  DevTensor b = capture(call.input(Add::tensor::other));
  double alpha_f = 1.0;
  int64_t alpha_i = 1;
  if (Op == kAdd && call.num_attrs() > Add::attr::alpha && !call.attr_is_none(Add::attr::alpha)) {
    alpha_f = call.attr_double(Add::attr::alpha);
    alpha_i = call.attr_int(Add::attr::alpha);
    if (out.dtype == TESSERA_DTYPE_BOOL) alpha_i = alpha_i != 0;  // alpha becomes a bool first, as in PyTorch
    if (call.attr_is_floating(Add::attr::alpha) && !is_floating(out.dtype)) {
      throw Error(TESSERA_STATUS_INVALID_ARGUMENT,
                  std::string(call.op_name()) + ": for integral input tensors, argument alpha must not be a floating "
                      "point number (got " + std::to_string(alpha_f) + "); pass an integral alpha or use floating tensors");
    }
  }
  std::array<std::vector<int64_t>, 3> st{out.strides, broadcast_strides(a, out.sizes, call.op_name(), "self"),
                                         broadcast_strides(b, out.sizes, call.op_name(), "other")};
  launch(call, Op, [out, a, b, st, alpha_f, alpha_i] {
    std::byte* ob = out.base();
    const std::byte* ab = a.base();
    const std::byte* bb = b.base();
    const bool floating = is_floating(out.dtype);
    const bool in_double = out.dtype == TESSERA_DTYPE_FLOAT64;
    walk<3>(out.sizes, st, [&](const std::array<int64_t, 3>& o) {
      std::byte* d = ob + o[0] * int64_t(out.itemsize);
      const std::byte* pa = ab + o[1] * int64_t(a.itemsize);
      const std::byte* pb = bb + o[2] * int64_t(b.itemsize);
      if (in_double) {
        const double x = load_f(pa, a.dtype), y = load_f(pb, b.dtype);
        store_f(d, out.dtype, Op == kAdd ? x + alpha_f * y : x * y);
      } else if (floating) {
        // f16/bf16/f32 compute in float (PyTorch's opmath): a number such as 1e300 becomes inf first.
        const float x = float(load_f(pa, a.dtype)), y = float(load_f(pb, b.dtype)), al = float(alpha_f);
        store_f(d, out.dtype, double(Op == kAdd ? x + al * y : x * y));
      } else {
        const int64_t x = load_i(pa, a.dtype), y = load_i(pb, b.dtype);
        store_i(d, out.dtype, Op == kAdd ? int64_t(uint64_t(x) + uint64_t(alpha_i) * uint64_t(y))
                                         : int64_t(uint64_t(x) * uint64_t(y)));
      }
    });
  });
}

void relu_kernel(const KernelCall& call) {
  DevTensor out = capture(call.output(0));
  DevTensor x = capture(call.input(op::relu::tensor::self));
  std::array<std::vector<int64_t>, 2> st{out.strides, broadcast_strides(x, out.sizes, call.op_name(), "self")};
  launch(call, kRelu, [out, x, st] {
    const bool floating = is_floating(out.dtype);
    walk<2>(out.sizes, st, [&](const std::array<int64_t, 2>& o) {
      std::byte* d = out.base() + o[0] * int64_t(out.itemsize);
      const std::byte* s = x.base() + o[1] * int64_t(x.itemsize);
      if (floating) {
        const double v = load_f(s, x.dtype);
        store_f(d, out.dtype, std::isnan(v) ? v : (v > 0 ? v : 0.0));
      } else {
        const int64_t v = load_i(s, x.dtype);
        store_i(d, out.dtype, v > 0 ? v : 0);
      }
    });
  });
}

// The fused backward of relu, registered under the Autograd functionality (Note [Autograd dispatch]
// in the runtime's autograd_dispatch.h): inputs (grad, self), output grad_self = grad where self > 0,
// in one pass on the device instead of the generic formula's compare, select and copies.
void relu_backward_kernel(const KernelCall& call) {
  DevTensor out = capture(call.output(0));
  DevTensor g = capture(call.input(0));
  DevTensor x = capture(call.input(1));
  if (out.dtype != g.dtype || out.dtype != x.dtype || !is_floating(out.dtype))
    throw Error(TESSERA_STATUS_UNIMPLEMENTED, "relu backward: mixed or non-floating dtypes");
  std::array<std::vector<int64_t>, 3> st{out.strides, broadcast_strides(g, out.sizes, call.op_name(), "grad"),
                                         broadcast_strides(x, out.sizes, call.op_name(), "self")};
  launch(call, kReluBackward, [out, g, x, st] {
    walk<3>(out.sizes, st, [&](const std::array<int64_t, 3>& o) {
      const double gv = load_f(g.base() + o[1] * int64_t(g.itemsize), g.dtype);
      const double xv = load_f(x.base() + o[2] * int64_t(x.itemsize), x.dtype);
      store_f(out.base() + o[0] * int64_t(out.itemsize), out.dtype, xv > 0 ? gv : 0.0);
    });
  });
}

// The optimizer's fused update (Note [Fused optimizer step] in tessera/nn.h): one Adam or AdamW step
// of one parameter in a single pass on the device. Without this kernel the runtime would run the
// op's composite here (about a dozen device ops per parameter); with it, Adam and AdamW on this
// device make one launch per parameter and no optimizer code of the device's own is needed.
void fused_adam_kernel(const KernelCall& call) {
  using A = op::_fused_adam_::attr;
  DevTensor p = capture(call.input(0)), m = capture(call.input(1)), v = capture(call.input(2));
  DevTensor g = capture(call.input(3));
  const double lr = call.attr_double(A::lr), b1 = call.attr_double(A::beta1), b2 = call.attr_double(A::beta2);
  const double wd = call.attr_double(A::weight_decay), eps = call.attr_double(A::eps);
  const double bc1 = call.attr_double(A::bias_correction1), bc2 = call.attr_double(A::bias_correction2);
  const bool decoupled = call.attr_bool(A::decoupled_weight_decay);
  launch(call, kFusedAdam, [=] {
    std::array<std::vector<int64_t>, 4> st{p.strides, m.strides, v.strides, g.strides};
    walk<4>(p.sizes, st, [&](const std::array<int64_t, 4>& o) {
      std::byte* pp = p.base() + o[0] * int64_t(p.itemsize);
      std::byte* mp = m.base() + o[1] * int64_t(m.itemsize);
      std::byte* vp = v.base() + o[2] * int64_t(v.itemsize);
      double pv = load_f(pp, p.dtype), gv = load_f(g.base() + o[3] * int64_t(g.itemsize), g.dtype);
      if (wd != 0 && decoupled) pv *= 1 - lr * wd;
      if (wd != 0 && !decoupled) gv += pv * wd;
      const double mv = load_f(mp, m.dtype) * b1 + gv * (1 - b1);
      const double vv = load_f(vp, v.dtype) * b2 + gv * gv * (1 - b2);
      store_f(pp, p.dtype, pv - lr / bc1 * mv / (std::sqrt(vv / bc2) + eps));
      store_f(mp, m.dtype, mv);
      store_f(vp, v.dtype, vv);
    });
  });
}

// SGD with momentum over the whole parameter list in one launch (_multi_tensor_sgd_: params,
// momentum buffers, grads; Note [Fused optimizer step]): what a device whose launches are costly
// registers, where the per-parameter _fused_sgd_ would launch once per parameter.
void multi_tensor_sgd_kernel(const KernelCall& call) {
  using A = op::_multi_tensor_sgd_::attr;
  const int n = call.num_inputs() / 3;
  std::vector<DevTensor> t;
  for (int i = 0; i < 3 * n; ++i) t.push_back(capture(call.input(i)));
  const double lr = call.attr_double(A::lr), mom = call.attr_double(A::momentum);
  const double keep = 1 - call.attr_double(A::dampening), wd = call.attr_double(A::weight_decay);
  const bool nesterov = call.attr_bool(A::nesterov), first = call.attr_bool(A::first_step);
  launch(call, kMultiTensorSgd, [=] {
    for (int i = 0; i < n; ++i) {
      const DevTensor &p = t[size_t(i)], &buf = t[size_t(n + i)], &g = t[size_t(2 * n + i)];
      std::array<std::vector<int64_t>, 3> st{p.strides, buf.strides, g.strides};
      walk<3>(p.sizes, st, [&](const std::array<int64_t, 3>& o) {
        std::byte* pp = p.base() + o[0] * int64_t(p.itemsize);
        std::byte* bp = buf.base() + o[1] * int64_t(buf.itemsize);
        const double pv = load_f(pp, p.dtype);
        const double d = load_f(g.base() + o[2] * int64_t(g.itemsize), g.dtype) + (wd != 0 ? pv * wd : 0.0);
        const double b = first ? d : load_f(bp, buf.dtype) * mom + d * keep;
        store_f(bp, buf.dtype, b);
        store_f(pp, p.dtype, pv - lr * (nesterov ? d + b * mom : b));
      });
    }
  });
}

// 2-D x 2-D, and batched: [b, m, k] x [k, n], [m, k] x [b, k, n], [b, m, k] x [b, k, n]
// (a 2-D operand is shared by every batch). Vectors and deeper batches answer UNIMPLEMENTED, which
// the runtime resolves like a missing kernel (CPU fallback).
void matmul_kernel(const KernelCall& call) {
  const TensorView av = call.input(op::matmul::tensor::self), bv = call.input(op::matmul::tensor::other),
                   ov = call.output(0);
  if (av.ndim() < 2 || av.ndim() > 3 || bv.ndim() < 2 || bv.ndim() > 3 || ov.ndim() != std::max(av.ndim(), bv.ndim())) {
    throw Error(TESSERA_STATUS_UNIMPLEMENTED, std::string(call.op_name()) + ": the emulated device implements 2-D and 3-D "
                                                  "operands only (got " + std::to_string(av.ndim()) + "-D x " +
                                                  std::to_string(bv.ndim()) + "-D)");
  }
  if (av.size(-1) != bv.size(-2)) {
    throw Error(TESSERA_STATUS_INVALID_ARGUMENT, std::string(call.op_name()) + ": inner sizes differ (" +
                                                     std::to_string(av.size(-1)) + " vs " + std::to_string(bv.size(-2)) + ")");
  }
  if (av.ndim() == 3 && bv.ndim() == 3 && av.size(0) != bv.size(0)) {
    throw Error(TESSERA_STATUS_UNIMPLEMENTED, std::string(call.op_name()) + ": broadcast batch sizes are not implemented");
  }
  DevTensor out = capture(ov);
  DevTensor a = capture(av);
  DevTensor b = capture(bv);
  launch(call, kMatmul, [out, a, b] {
    const size_t ad = a.sizes.size(), bd = b.sizes.size(), od = out.sizes.size();
    const int64_t batch = od == 3 ? out.sizes[0] : 1;
    const int64_t m = a.sizes[ad - 2], k = a.sizes[ad - 1], n = b.sizes[bd - 1];
    const int64_t as0 = ad == 3 ? a.strides[0] : 0, bs0 = bd == 3 ? b.strides[0] : 0, os0 = od == 3 ? out.strides[0] : 0;
    const int64_t as_m = a.strides[ad - 2], as_k = a.strides[ad - 1];
    const int64_t bs_k = b.strides[bd - 2], bs_n = b.strides[bd - 1];
    const int64_t os_m = out.strides[od - 2], os_n = out.strides[od - 1];
    const bool floating = is_floating(out.dtype);
    for (int64_t z = 0; z < batch; ++z) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double accf = 0;
          int64_t acci = 0;
          for (int64_t p = 0; p < k; ++p) {
            const std::byte* pa = a.base() + (z * as0 + i * as_m + p * as_k) * int64_t(a.itemsize);
            const std::byte* pb = b.base() + (z * bs0 + p * bs_k + j * bs_n) * int64_t(b.itemsize);
            if (floating) accf += load_f(pa, a.dtype) * load_f(pb, b.dtype);
            else acci = int64_t(uint64_t(acci) + uint64_t(load_i(pa, a.dtype)) * uint64_t(load_i(pb, b.dtype)));
          }
          std::byte* d = out.base() + (z * os0 + i * os_m + j * os_n) * int64_t(out.itemsize);
          if (floating) store_f(d, out.dtype, accf); else store_i(d, out.dtype, acci);
        }
      }
    }
  });
}

// sum over `dims` (attr dim: int list; None or empty = every dim); keepdim is read off the output rank.
void sum_kernel(const KernelCall& call) {
  DevTensor out = capture(call.output(0));
  constexpr int kDim = op::sum::attr::dim;
  DevTensor x = capture(call.input(op::sum::tensor::self));
  const int nd = int(x.sizes.size());
  std::vector<bool> reduced(size_t(nd), true);
  if (call.num_attrs() > kDim && call.attr(kDim).kind == TESSERA_VALUE_INT_LIST) {
    int count = 0;
    const int64_t* dims = call.attr_ints(kDim, &count);
    if (count > 0) {
      reduced.assign(size_t(nd), false);
      for (int i = 0; i < count; ++i) {
        // A 0-dim tensor has one reducible dim, 0 (or -1), as in PyTorch.
        const int64_t rank = std::max(nd, 1);
        const int64_t d = dims[i] < 0 ? dims[i] + rank : dims[i];
        if (nd == 0 && d == 0) continue;
        if (d < 0 || d >= nd) {
          throw Error(TESSERA_STATUS_INVALID_ARGUMENT, std::string(call.op_name()) + ": dim " + std::to_string(dims[i]) +
                                                           " out of range for a " + std::to_string(nd) + "-D tensor");
        }
        reduced[size_t(d)] = true;
      }
    }
  }
  // Output element offset for each input dim: 0 on reduced dims.
  std::vector<int64_t> out_strides(size_t(nd), 0);
  const bool keepdim = int(out.sizes.size()) == nd && nd > 0;
  for (int d = 0, od = 0; d < nd; ++d) {
    if (keepdim) {
      out_strides[size_t(d)] = reduced[size_t(d)] ? 0 : out.strides[size_t(d)];
    } else if (!reduced[size_t(d)]) {
      out_strides[size_t(d)] = out.strides[size_t(od++)];
    }
  }
  launch(call, kSum, [out, x, out_strides] {
    const bool floating = is_floating(out.dtype);
    // Accumulate in double / int64 keyed by output offset, then store once.
    std::vector<int64_t> offsets;
    std::vector<double> accf;
    std::vector<int64_t> acci;
    std::array<std::vector<int64_t>, 1> ost{out.strides};
    walk<1>(out.sizes, ost, [&](const std::array<int64_t, 1>& o) { offsets.push_back(o[0]); });
    int64_t max_off = 0;
    for (int64_t o : offsets) max_off = std::max(max_off, o);
    accf.assign(size_t(max_off + 1), 0.0);
    acci.assign(size_t(max_off + 1), 0);
    std::array<std::vector<int64_t>, 2> st{x.strides, out_strides};
    walk<2>(x.sizes, st, [&](const std::array<int64_t, 2>& o) {
      const std::byte* s = x.base() + o[0] * int64_t(x.itemsize);
      if (floating) accf[size_t(o[1])] += load_f(s, x.dtype);
      else acci[size_t(o[1])] = int64_t(uint64_t(acci[size_t(o[1])]) + uint64_t(load_i(s, x.dtype)));
    });
    for (int64_t o : offsets) {
      std::byte* d = out.base() + o * int64_t(out.itemsize);
      if (floating) store_f(d, out.dtype, accf[size_t(o)]); else store_i(d, out.dtype, acci[size_t(o)]);
    }
  });
}

// normal_(self, mean, std, seed, offset) / uniform_(self, from, to, seed, offset): element i (in
// row-major order of self) is a pure function of (seed, offset + i), so the device draws exactly the
// numbers the CPU would (Note [Reproducible random numbers] in tessera/random.h).
template <int Op>
void random_kernel(const KernelCall& call) {
  DevTensor out = capture(call.output(0));
  // normal_ (mean, std) and uniform_ (from, to) have one layout: (a, b, seed, offset).
  using A = op::normal_::attr;
  static_assert(op::uniform_::attr::from == int(A::mean) && op::uniform_::attr::to == int(A::std) &&
                op::uniform_::attr::seed == int(A::seed) && op::uniform_::attr::offset == int(A::offset));
  const double a = call.attr_double(A::mean), b = call.attr_double(A::std);
  const uint64_t seed = uint64_t(call.attr_int(A::seed)), offset = uint64_t(call.attr_int(A::offset));
  launch(call, Op, [out, a, b, seed, offset] {
    std::array<std::vector<int64_t>, 1> st{out.strides};
    uint64_t i = 0;
    walk<1>(out.sizes, st, [&](const std::array<int64_t, 1>& o) {
      const uint64_t n = offset + i++;
      const double v = Op == kNormal ? a + b * double(tessera::philox::normal(seed, n))
                                     : a + (b - a) * double(tessera::philox::uniform(seed, n));
      store_f(out.base() + o[0] * int64_t(out.itemsize), out.dtype, v);
    });
  });
}

// ---------------------------------------------------------------- table

constexpr uint64_t bit(int d) { return uint64_t(1) << d; }
constexpr uint64_t kMaskF = bit(TESSERA_DTYPE_FLOAT32) | bit(TESSERA_DTYPE_FLOAT64);
constexpr uint64_t kMaskFI = kMaskF | bit(TESSERA_DTYPE_INT32) | bit(TESSERA_DTYPE_INT64);
// Copies and fills take every dtype (a device must at least hold and convert what it is given);
// compute kernels take fewer, and the rest goes to the CPU fallback.
constexpr uint64_t kMaskCopy = TESSERA_DTYPE_MASK_ALL;

const KernelSpec kSpecs[] = {
    {op::fill_::name, kMaskCopy, TESSERA_SDK_KERNEL(fill_kernel)},
    {op::copy_::name, kMaskCopy, TESSERA_SDK_KERNEL(copy_kernel)},
    {op::add_Tensor::name, kMaskFI, TESSERA_SDK_KERNEL(binary_kernel<kAdd>)},
    {op::mul_Tensor::name, kMaskFI, TESSERA_SDK_KERNEL(binary_kernel<kMul>)},
    {op::relu::name, kMaskFI, TESSERA_SDK_KERNEL(relu_kernel)},
    {op::matmul::name, kMaskFI, TESSERA_SDK_KERNEL(matmul_kernel)},
    {op::sum::name, kMaskFI, TESSERA_SDK_KERNEL(sum_kernel)},
    {op::normal_::name, kMaskF, TESSERA_SDK_KERNEL(random_kernel<kNormal>)},
    {op::uniform_::name, kMaskF, TESSERA_SDK_KERNEL(random_kernel<kUniform>)},
    {op::_fused_adam_::name, kMaskF, TESSERA_SDK_KERNEL(fused_adam_kernel)},
    {op::_multi_tensor_sgd_::name, kMaskF, TESSERA_SDK_KERNEL(multi_tensor_sgd_kernel)},
};
static_assert(sizeof(kSpecs) / sizeof(kSpecs[0]) == kNumOps, "one spec per OpId, in order");
const KernelSpec kBackwardSpecs[] = {
    {op::relu::name, kMaskF, TESSERA_SDK_KERNEL(relu_backward_kernel)},
};
static_assert(kNumOps + sizeof(kBackwardSpecs) / sizeof(kBackwardSpecs[0]) == kNumCountedOps,
              "one backward spec per BackwardOpId, in order");
static_assert(kNumCountedOps <= kMaxCountedOps, "raise kMaxCountedOps");

}  // namespace

const KernelSpec* kernel_specs(int* count) {
  *count = kNumOps;
  return kSpecs;
}

const KernelSpec* backward_kernel_specs(int* count) {
  *count = int(kNumCountedOps) - int(kNumOps);
  return kBackwardSpecs;
}

}  // namespace mhd
