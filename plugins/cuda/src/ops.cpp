// Host side of the CUDA kernels: argument checks, launch planning, cuBLASLt calls. See ops.h.
#include "ops.h"

#include "tessera/cuda/cuda_plugin.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "conv_plan.h"
#include "cublaslt_loader.h"
#include "cuda_backend.h"
#include "cudnn_attention.h"
#include "cudnn_loader.h"
#include "half_bits.h"
#include "launch.h"
#include "matmul_layout.h"
#include "reduce_state.h"
#include "scalar_convert.h"
#include "tensor_iter.h"
#include "tessera/fake_quantize.h"
#include "tessera/op_names.h"
#include "tessera/pad_index.h"
#include "tessera/resize_taps.h"
#include "topk_plan.h"

namespace tessera::cuda {
namespace {

using sdk::KernelCall;
using sdk::TensorView;

// Note [No CPU fallback after queued work]: UNIMPLEMENTED sends the call to the CPU fallback,
// which recomputes it from the inputs. That is only sound while this kernel has queued nothing that
// writes a caller's tensor: an in-place op whose kernel was already queued would be applied twice.
// Every such enqueue sets t_queued (reset per call by Launch), and from then on a refusal is an
// INTERNAL error. Conversions into the call's own temporaries do not count.
thread_local bool t_queued = false;
std::atomic<uint64_t> g_kernel_launches{0};
std::atomic<uint64_t> g_cudnn_poolings{0};
std::atomic<uint64_t> g_cudnn_batch_norms{0};

[[noreturn]] void unimplemented(const KernelCall& call, const std::string& what) {
  if (t_queued)
    throw sdk::Error(TESSERA_STATUS_INTERNAL, std::string(call.op_name()) + " on cuda: " + what +
                                                  " (found after work was queued: no CPU fallback)");
  throw sdk::Error(TESSERA_STATUS_UNIMPLEMENTED, std::string(call.op_name()) + " on cuda: " + what);
}

// Checks an enqueue (a launcher's status, cudaMemcpyAsync, ...) and records that work writing a
// caller's tensor may have been queued (unless it only writes a temporary).
void check_enqueue(const KernelCall& call, cudaError_t err, const char* what, bool into_temporary = false) {
  if (!into_temporary) t_queued = true;
  check_cuda(err, std::string(call.op_name()) + " on cuda: " + what);
}

const char* dtype_str(int32_t dt) {
  static const char* names[] = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  return dt >= 0 && dt < 10 ? names[dt] : "?";
}
bool is_float16ish(int32_t dt) { return dt == kDtF16 || dt == kDtBF16; }
bool kernel_float(int32_t dt) { return dt == kDtF32 || is_float16ish(dt); }
bool kernel_dtype(int32_t dt) { return dt >= kDtU8 && dt <= kDtF32; }  // everything but bool and f64
// The elementwise kernels (binary, unary) also take float64, computed in double.
bool elementwise_dtype(int32_t dt) { return kernel_dtype(dt) || dt == kDtF64; }
bool elementwise_float(int32_t dt) { return kernel_float(dt) || dt == kDtF64; }

// A dim argument wrapped into [0, rank) (negative counts from the end); the CPU fallback reports an
// out-of-range one.
int wrapped_dim(const KernelCall& call, int64_t given, int64_t rank) {
  if (given < -rank || given >= rank) unimplemented(call, "dim out of range");
  return int(given < 0 ? given + rank : given);
}

// A tensor of `sizes` seen along dim `dim` as [outer, n, inner] (a 0-dim tensor is [1, 1, 1]).
struct Lanes {
  int64_t outer = 1, n = 1, inner = 1;
};
Lanes lanes_of(const std::vector<int64_t>& sizes, int dim) {
  Lanes l;
  for (int d = 0; d < int(sizes.size()); ++d) (d < dim ? l.outer : d == dim ? l.n : l.inner) *= sizes[size_t(d)];
  return l;
}

// Per-call context: device checks, current device and stream.
struct Launch {
  int device;
  cudaStream_t stream;
  DeviceGuard guard;
  explicit Launch(const KernelCall& call)
      : device(checked_device(call)), stream(static_cast<cudaStream_t>(call.stream())), guard(device) {
    t_queued = false;
    // Every call is checked, so an error pending here was left by code outside the plugin: report
    // it under its own name rather than as this op's launch failure.
    if (const cudaError_t stale = cudaGetLastError(); stale != cudaSuccess)
      sdk::log(TESSERA_LOG_WARNING, "cuda",
               cuda_error_message(stale, std::string("error left pending before ") + call.op_name() + " (cleared)"));
  }
  static int checked_device(const KernelCall& call) {
    Backend::instance().check_device(call.device_index());
    return call.device_index();
  }
};

// Launchers return an error only for a real CUDA failure: what a kernel does not handle is
// refused on the host before anything is queued.
void check_launch(const KernelCall& call, cudaError_t err, bool into_temporary = false) {
  check_enqueue(call, err, "kernel launch", into_temporary);
  g_kernel_launches.fetch_add(1, std::memory_order_relaxed);
}

// A tensor on this device as the kernels see it; may own a temporary copy.
struct DeviceTensor {
  void* data = nullptr;
  int32_t dtype = kDtF32;
  std::vector<int64_t> sizes, strides;
  std::shared_ptr<DeviceBuffer> owner;

  int ndim() const { return int(sizes.size()); }
  Geometry geometry() const { return Geometry{int32_t(sizes.size()), sizes.data(), strides.data()}; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  bool contiguous() const {
    int64_t expected = 1;
    for (int i = ndim() - 1; i >= 0; --i) {
      if (sizes[size_t(i)] != 1 && strides[size_t(i)] != expected) return false;
      expected *= sizes[size_t(i)];
    }
    return true;
  }
  Operand operand() const {
    Operand o;
    o.data = data;
    o.dtype = dtype;
    return o;
  }
};

DeviceTensor view_of(const KernelCall& call, const TensorView& t, const char* what) {
  if (!t.defined()) unimplemented(call, std::string(what) + " is missing");
  if (t.device_type() != TESSERA_DEVICE_CUDA || t.device_index() != call.device_index())
    unimplemented(call, std::string(what) + " is not on cuda:" + std::to_string(call.device_index()));
  DeviceTensor d;
  d.data = static_cast<char*>(t.handle()) + t.byte_offset();
  d.dtype = t.dtype();
  d.sizes.assign(t.sizes(), t.sizes() + t.ndim());
  d.strides.assign(t.strides(), t.strides() + t.ndim());
  return d;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    s[i] = acc;
    acc *= sizes[i] > 0 ? sizes[i] : 1;
  }
  return s;
}

// dst = src (broadcast to dst's shape), converting the dtype.
void device_copy(const KernelCall& call, const DeviceTensor& dst, const DeviceTensor& src, cudaStream_t stream,
                 bool into_temporary = false) {
  if (dst.dtype == src.dtype && dst.sizes == src.sizes && dst.contiguous() && src.contiguous()) {
    check_enqueue(call,
                  cudaMemcpyAsync(dst.data, src.data, size_t(dst.numel()) * sdk::dtype_size(dst.dtype),
                                  cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync", into_temporary);
    return;
  }
  CopyPlan plan;
  if (!plan_copy(dst.geometry(), src.geometry(), &plan))
    unimplemented(call, "copy layout with more than " + std::to_string(kMaxDims) + " non-mergeable dims");
  if (plan.numel == 0) return;
  check_launch(call, launch_copy(plan, dst.data, dst.dtype, src.data, src.dtype, stream), into_temporary);
}

// A contiguous temporary of the call on its stream (freed in stream order when the last holder goes).
DeviceTensor temporary(const Launch& l, int32_t dtype, const std::vector<int64_t>& sizes) {
  DeviceTensor c;
  c.dtype = dtype;
  c.sizes = sizes;
  c.strides = contiguous_strides(sizes);
  c.owner = std::make_shared<DeviceBuffer>(l.device, size_t(c.numel()) * sdk::dtype_size(dtype), l.stream);
  c.data = c.owner->get();
  return c;
}

// `t` itself when it already has `dtype` (and is contiguous, if asked), else a converted copy.
DeviceTensor materialize(const KernelCall& call, const DeviceTensor& t, int32_t dtype, bool need_contiguous,
                         const Launch& l) {
  if (t.dtype == dtype && (!need_contiguous || t.contiguous())) return t;
  DeviceTensor c = temporary(l, dtype, t.sizes);
  device_copy(call, c, t, l.stream, /*into_temporary=*/true);
  return c;
}

// Sets every element of `t` to the value whose bits in t's dtype are `bits` (number_bits).
void fill_with(const KernelCall& call, const Launch& l, const DeviceTensor& t, uint64_t bits,
               bool into_temporary = false) {
  IterShape shape;
  Operand o = t.operand();
  if (!plan_elementwise(t.geometry(), nullptr, 0, &shape, &o)) unimplemented(call, "operand layout");
  check_launch(call, launch_fill(shape, o, bits, l.stream), into_temporary);
}

// ---------------------------------------------------------------- elementwise

int32_t compare_dtype(int32_t a, int32_t b, const DeviceTensor& ta, const DeviceTensor& tb) {
  if (a == b) return a;
  const bool fa = a >= kDtF16, fb = b >= kDtF16;
  if (fa != fb) return fa ? a : b;
  if (ta.ndim() == 0) return b;
  if (tb.ndim() == 0) return a;
  return fa ? (a == kDtF64 || b == kDtF64 ? kDtF64 : kDtF32) : kDtI64;
}

// Note [Wrapped numbers on the GPU]
// A C++ number next to a tensor (the -3 of `x / -3`) reaches a kernel as a 0-dim CPU tensor of
// dtype int64, float64 or bool (Note [Wrapped numbers reach kernels as they are], dispatcher). Its
// memory is host memory: it is never handed to a kernel or to cudaMemcpy as device memory. The
// host reads it and converts it once, straight into the kernel's compute type (to_compute_scalar:
// float for float16/bfloat16/float32 kernels, the integer type for integer kernels), and the value
// travels as a kernel argument. So `float16 [0.001] * 1e5` multiplies by 100000.0f (never by a
// float16 inf), `uint8 [7] / -3` (computed in float32) divides by -3.0f, `uint8 [2] * -3` wraps to
// 250 as in PyTorch. A comparison converts the number to the other operand's dtype first, as
// PyTorch does (`uint8 [44] == 300` is true). Scalar attributes (alpha) take the same conversion.
bool is_host_scalar(const TensorView& t) { return t.defined() && t.device_type() == TESSERA_DEVICE_CPU && t.ndim() == 0; }

HostNumber host_number(const KernelCall& call, const TensorView& t) {
  HostNumber n;
  if (!read_host_number(t.host_ptr<const unsigned char>(), t.dtype(), &n))
    unimplemented(call, std::string("CPU scalar of dtype code ") + std::to_string(t.dtype()));
  return n;
}

// The Scalar attribute `attr` as it was given (integral or floating).
HostNumber attr_number(const KernelCall& call, int attr) {
  return call.attr_is_floating(attr) ? floating_number(call.attr_double(attr)) : integral_number(call.attr_int(attr));
}

// Argument positions come from the contract (tessera/op_names.h). A kernel serving several ops reads
// through one op's indices; the static_assert above it says the others have the same layout.
using Binary = op::add_Tensor;
static_assert(op::sub_Tensor::attr::alpha == int(Binary::attr::alpha) &&
              op::add__Tensor::attr::alpha == int(Binary::attr::alpha) &&
              op::mul_Tensor::tensor::other == int(Binary::tensor::other) &&
              op::eq_Tensor::tensor::other == int(Binary::tensor::other) &&
              op::maximum::tensor::other == int(Binary::tensor::other) &&
              op::pow_Tensor_Tensor::tensor::exponent == int(Binary::tensor::other) &&
              op::_prelu_kernel::tensor::weight == int(Binary::tensor::other) &&
              op::atan2::tensor::other == int(Binary::tensor::other));
// Defined after reduce_into (below): Note [Integer division by zero on the GPU].
void check_integer_divisor(const KernelCall& call, const Launch& l, int scalar_operand,
                           const ComputeScalar& scalar, const DeviceTensor& b, int32_t compute);

// Note [Bool operands on the GPU]
// Bool tensors are bytes holding 0 or 1. A binary op on them runs on those bytes as uint8 with an op
// that keeps every result 0 or 1 and equals the CPU's (int64 arithmetic, stored as `!= 0`):
// add -> or, mul and minimum -> and, maximum -> or, and / or / xor and the comparisons as they are.
// Other ops (sub, PyTorch refuses it; shifts, pow, division) stay with the CPU.
std::optional<BinaryOp> bool_binary_op(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Maximum:
    case BinaryOp::BitOr:
      return BinaryOp::BitOr;
    case BinaryOp::Mul:
    case BinaryOp::Minimum:
    case BinaryOp::BitAnd:
      return BinaryOp::BitAnd;
    case BinaryOp::BitXor:
      return BinaryOp::BitXor;
    default:
      return is_comparison(op) ? std::optional<BinaryOp>(op) : std::nullopt;
  }
}

template <BinaryOp kOp>
void binary_kernel(const KernelCall& call) {
  Launch l(call);
  const TensorView av = call.input(Binary::tensor::self), bv = call.input(Binary::tensor::other);
  const bool a_scalar = is_host_scalar(av), b_scalar = is_host_scalar(bv);
  if (a_scalar && b_scalar) unimplemented(call, "both operands are CPU scalars");
  DeviceTensor out = view_of(call, call.output(0), "output");
  DeviceTensor a, b;
  if (!a_scalar) a = view_of(call, av, "self");
  if (!b_scalar) b = view_of(call, bv, "other");
  BinaryOp op = kOp;
  const bool bool_compute = is_comparison(kOp)
                                ? (a_scalar || a.dtype == kDtBool) && (b_scalar || b.dtype == kDtBool)
                                : out.dtype == kDtBool;
  if (bool_compute) {  // Note [Bool operands on the GPU]: the same bytes as uint8
    const std::optional<BinaryOp> as_bytes = bool_binary_op(kOp);
    if (!as_bytes) unimplemented(call, "bool operands");
    if (kOp == BinaryOp::Add && call.num_attrs() > Binary::attr::alpha &&
        !call.attr_is_none(Binary::attr::alpha) && attr_number(call, Binary::attr::alpha).i != 1)
      unimplemented(call, "bool add with an alpha other than 1");
    op = *as_bytes;
    if (!a_scalar) a.dtype = kDtU8;
    if (!b_scalar) b.dtype = kDtU8;
    if (!is_comparison(kOp)) out.dtype = kDtU8;
  }
  int32_t compute = out.dtype;
  if (is_comparison(kOp)) compute = a_scalar ? b.dtype : (b_scalar ? a.dtype : compare_dtype(a.dtype, b.dtype, a, b));
  if (!elementwise_dtype(compute)) unimplemented(call, std::string("dtype ") + dtype_str(compute));
  if (is_comparison(kOp) ? out.dtype != kDtBool : out.dtype != compute) unimplemented(call, "output dtype");
  // Note [Wrapped numbers on the GPU]
  int scalar_operand = 0;
  ComputeScalar scalar;
  if (a_scalar || b_scalar) {
    scalar_operand = a_scalar ? 1 : 2;
    scalar = to_compute_scalar(host_number(call, a_scalar ? av : bv), compute, is_comparison(kOp));
    (a_scalar ? a : b).dtype = compute;  // a 0-dim operand that is never read
  }
  if (!a_scalar) a = materialize(call, a, compute, false, l);
  if (!b_scalar) b = materialize(call, b, compute, false, l);
  ComputeScalar alpha = to_compute_scalar(integral_number(1), compute);
  constexpr int kAlphaAt = Binary::attr::alpha;
  if ((kOp == BinaryOp::Add || kOp == BinaryOp::Sub) && call.num_attrs() > kAlphaAt &&
      !call.attr_is_none(kAlphaAt))
    alpha = to_compute_scalar(attr_number(call, kAlphaAt), compute);
  if constexpr (kOp == BinaryOp::Remainder || kOp == BinaryOp::Fmod || kOp == BinaryOp::FloorDivide)
    if (!elementwise_float(compute)) check_integer_divisor(call, l, scalar_operand, scalar, b, compute);
  IterShape shape;
  Operand ops[3] = {out.operand(), a.operand(), b.operand()};
  const Geometry ins[2] = {a.geometry(), b.geometry()};
  if (!plan_elementwise(out.geometry(), ins, 2, &shape, ops)) unimplemented(call, "operand layout");
  const uint32_t skip = scalar_operand ? 1u << scalar_operand : 0u;
  check_launch(call, launch_binary(op, compute, shape, ops[0], ops[1], ops[2], scalar_operand, scalar, alpha,
                                   is_dense(shape, ops, 3, skip), l.stream));
}

// The activation parameters of the op being called (UnaryArgs in launch.h), as the CPU kernel
// reads them (plugins/cpu/src/elementwise_onnx.cpp): selu's constants, celu as an elu with
// input_scale 1 / alpha (alpha 0 goes to the CPU, which reports it).
UnaryArgs unary_args(const KernelCall& call) {
  UnaryArgs a;
  const std::string name = call.op_name();
  if (name == op::leaky_relu::name) {
    a.a = call.attr_double(op::leaky_relu::attr::negative_slope);
  } else if (name == op::selu::name) {
    a.b = 1.0507009873554804934193349852946;  // scale
    a.a = 1.6732632423543772848170429916717 * a.b;
    a.c = 1;
  } else if (name == op::celu::name) {
    const double alpha = call.attr_double(op::celu::attr::alpha);
    if (alpha == 0) unimplemented(call, "celu with alpha 0");
    a.a = alpha, a.b = 1, a.c = 1 / alpha;
  } else if (name == op::elu::name) {
    a.b = call.attr_double(op::elu::attr::scale);
    a.a = call.attr_double(op::elu::attr::alpha) * a.b;
    a.c = call.attr_double(op::elu::attr::input_scale);
  } else if (name == op::softplus::name) {
    a.a = call.attr_double(op::softplus::attr::beta);
    a.b = call.attr_double(op::softplus::attr::threshold);
  }
  return a;
}

void unary_into(const KernelCall& call, const Launch& l, UnaryOp op, const DeviceTensor& out, DeviceTensor x,
                const UnaryArgs& args = UnaryArgs{}) {
  x = materialize(call, x, out.dtype, false, l);
  IterShape shape;
  Operand ops[2] = {out.operand(), x.operand()};
  const Geometry in = x.geometry();
  if (!plan_elementwise(out.geometry(), &in, 1, &shape, ops)) unimplemented(call, "operand layout");
  check_launch(call, launch_unary(op, out.dtype, shape, ops[0], ops[1], is_dense(shape, ops, 2), l.stream, args));
}

using Unary = op::neg;
static_assert(op::gelu::tensor::self == int(Unary::tensor::self) &&
              op::exp::tensor::self == int(Unary::tensor::self));

template <UnaryOp kOp>
void unary_kernel(const KernelCall& call) {
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(Unary::tensor::self), "self");
  DeviceTensor out = view_of(call, call.output(0), "output");
  if (!elementwise_dtype(out.dtype)) unimplemented(call, std::string("dtype ") + dtype_str(out.dtype));
  UnaryOp op = kOp;
  constexpr int kApproximateAt = op::gelu::attr::approximate;
  if (op == UnaryOp::Gelu && call.num_attrs() > kApproximateAt && call.attr_string(kApproximateAt) == "tanh")
    op = UnaryOp::GeluTanh;
  const bool integer_ok = op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu || op >= UnaryOp::Floor;
  if (!elementwise_float(out.dtype) && !integer_ok) unimplemented(call, std::string("dtype ") + dtype_str(out.dtype));
  unary_into(call, l, op, out, x, unary_args(call));
}

// prelu(self, weight): x > 0 ? x : w * x with one weight, or one per channel (dim 1), as the
// elementwise Prelu kernel with the weight viewed as [1, C, 1, ...].
void prelu_kernel(const KernelCall& call) {
  using P = op::prelu;
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(P::tensor::self), "self");
  DeviceTensor w = view_of(call, call.input(P::tensor::weight), "weight");
  DeviceTensor out = view_of(call, call.output(0), "output");
  if (!elementwise_float(out.dtype)) unimplemented(call, std::string("dtype ") + dtype_str(out.dtype));
  if (w.ndim() > 1 || (w.numel() != 1 && (x.ndim() < 2 || w.numel() != x.sizes[1]))) unimplemented(call, "the weight's shape");
  x = materialize(call, x, out.dtype, false, l);
  w = materialize(call, w, out.dtype, false, l);
  const int64_t channel_stride = w.ndim() == 1 && w.numel() > 1 ? w.strides[0] : 0;
  w.sizes.assign(size_t(out.ndim()), 1);
  w.strides.assign(size_t(out.ndim()), 0);
  if (channel_stride != 0) {
    w.sizes[1] = x.sizes[1];
    w.strides[1] = channel_stride;
  }
  IterShape shape;
  Operand ops[3] = {out.operand(), x.operand(), w.operand()};
  const Geometry ins[2] = {x.geometry(), w.geometry()};
  if (!plan_elementwise(out.geometry(), ins, 2, &shape, ops)) unimplemented(call, "operand layout");
  check_launch(call, launch_binary(BinaryOp::Prelu, out.dtype, shape, ops[0], ops[1], ops[2], 0, ComputeScalar{},
                                   to_compute_scalar(integral_number(1), out.dtype), is_dense(shape, ops, 3), l.stream));
}

// out = x (op) number, computed in out's dtype (x converted to it first): pow with a number as
// exponent and the two halves of clamp.
void binary_number_into(const KernelCall& call, const Launch& l, BinaryOp op, const DeviceTensor& out, DeviceTensor x,
                        const ComputeScalar& number) {
  x = materialize(call, x, out.dtype, false, l);
  DeviceTensor b;  // a 0-dim operand that is never read
  b.dtype = out.dtype;
  IterShape shape;
  Operand ops[3] = {out.operand(), x.operand(), b.operand()};
  const Geometry ins[2] = {x.geometry(), b.geometry()};
  if (!plan_elementwise(out.geometry(), ins, 2, &shape, ops)) unimplemented(call, "operand layout");
  const ComputeScalar one = to_compute_scalar(integral_number(1), out.dtype);
  check_launch(call, launch_binary(op, out.dtype, shape, ops[0], ops[1], ops[2], 2, number, one,
                                   is_dense(shape, ops, 3, 1u << 2), l.stream));
}

// pow.Tensor_Scalar. x ** 0.5 and x ** -0.5 are sqrt and rsqrt for float32, float64 and bfloat16
// (PyTorch's special case, and the CPU kernel's: pow(-inf, 0.5) is NaN there, not inf); float16
// and the other exponents call pow. A negative integer exponent of an integer tensor was refused
// by the shape rule.
void pow_scalar_kernel(const KernelCall& call) {
  Launch l(call);
  constexpr int kExponent = op::pow_Tensor_Scalar::attr::exponent;
  DeviceTensor x = view_of(call, call.input(op::pow_Tensor_Scalar::tensor::self), "self");
  DeviceTensor out = view_of(call, call.output(0), "output");
  if (!elementwise_dtype(out.dtype)) unimplemented(call, std::string("dtype ") + dtype_str(out.dtype));
  const HostNumber e = attr_number(call, kExponent);
  if (elementwise_float(out.dtype) && out.dtype != kDtF16 && e.floating && std::fabs(e.f) == 0.5)
    return unary_into(call, l, e.f > 0 ? UnaryOp::Sqrt : UnaryOp::Rsqrt, out, x);
  binary_number_into(call, l, BinaryOp::Pow, out, x, to_compute_scalar(e, out.dtype));
}

uint64_t number_bits(const HostNumber& n, int32_t dtype);

// clamp(self, min, max) = minimum(maximum(x, min), max) in the output dtype, two passes with the
// bounds rounded to the dtype first (as the CPU kernel and PyTorch): a NaN element stays NaN, min >
// max gives max, a lone NaN bound changes nothing and two bounds with a NaN give NaN everywhere.
// out = clamp(x, lo, hi) for the bounds given; clamp and hardtanh.
void clamp_into(const KernelCall& call, const Launch& l, const DeviceTensor& x, const DeviceTensor& out,
                std::optional<HostNumber> lo, std::optional<HostNumber> hi) {
  if (!elementwise_dtype(out.dtype)) unimplemented(call, std::string("dtype ") + dtype_str(out.dtype));
  if (!lo && !hi) unimplemented(call, "neither bound given");
  const bool lo_nan = lo && lo->floating && std::isnan(lo->f), hi_nan = hi && hi->floating && std::isnan(hi->f);
  if (elementwise_float(out.dtype) && lo && hi && (lo_nan || hi_nan)) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return fill_with(call, l, out, number_bits(floating_number(nan), out.dtype));
  }
  if (lo_nan || hi_nan) lo = hi = std::nullopt;  // the only bound is NaN
  if (!lo && !hi) {
    device_copy(call, out, materialize(call, x, out.dtype, false, l), l.stream);
    return;
  }
  DeviceTensor src = x;
  if (lo) {
    binary_number_into(call, l, BinaryOp::Maximum, out, src, to_compute_scalar(*lo, out.dtype, true));
    src = out;
  }
  if (hi) binary_number_into(call, l, BinaryOp::Minimum, out, src, to_compute_scalar(*hi, out.dtype, true));
}

void clamp_kernel(const KernelCall& call) {
  using A = op::clamp::attr;
  Launch l(call);
  const DeviceTensor x = view_of(call, call.input(op::clamp::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  std::optional<HostNumber> lo, hi;
  if (call.num_attrs() > A::min && !call.attr_is_none(A::min)) lo = attr_number(call, A::min);
  if (call.num_attrs() > A::max && !call.attr_is_none(A::max)) hi = attr_number(call, A::max);
  clamp_into(call, l, x, out, lo, hi);
}

// hardtanh(self, min_val, max_val): clamp with both bounds, in self's dtype. An integral self
// takes the bounds truncated; uint8 with a negative bound goes to the CPU, which refuses it.
void hardtanh_kernel(const KernelCall& call) {
  using A = op::hardtanh::attr;
  Launch l(call);
  const DeviceTensor x = view_of(call, call.input(op::hardtanh::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  const HostNumber lo = attr_number(call, A::min_val), hi = attr_number(call, A::max_val);
  auto negative = [](const HostNumber& n) { return n.floating ? n.f < 0 : n.i < 0; };
  if (out.dtype == kDtU8 && (negative(lo) || negative(hi))) unimplemented(call, "uint8 with a negative bound");
  clamp_into(call, l, x, out, lo, hi);
}

// The fill value in `dtype`'s storage format: rounded once into the dtype (float16/bfloat16 through
// float, like PyTorch's fill_), floating values into integers without undefined behaviour (the
// dispatcher has already refused values out of the dtype's range).
uint64_t number_bits(const HostNumber& n, int32_t dtype) {
  switch (dtype) {
    case kDtF16: return float_to_half_bits(n.floating ? float(n.f) : float(n.i));
    case kDtBF16: return float_to_bf16_bits(n.floating ? float(n.f) : float(n.i));
    case kDtF32: {
      const float f = float(to_compute_scalar(n, kDtF32).f);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return b;
    }
    case kDtF64: {
      const double d = to_compute_scalar(n, kDtF64).f;
      uint64_t b;
      std::memcpy(&b, &d, 8);
      return b;
    }
    default: return uint64_t(to_compute_scalar(n, dtype).i);  // the low bytes are the element
  }
}

uint64_t scalar_bits(const KernelCall& call, int attr, int32_t dtype) {
  return number_bits(attr_number(call, attr), dtype);
}

void fill_kernel(const KernelCall& call) {
  Launch l(call);
  DeviceTensor out = view_of(call, call.output(0), "self");
  fill_with(call, l, out, scalar_bits(call, op::fill_::attr::value, out.dtype));
}

void copy_kernel(const KernelCall& call) {
  Launch l(call);
  DeviceTensor dst = view_of(call, call.output(0), "self");
  const TensorView src_view = call.input(op::copy_::tensor::src);
  if (src_view.device_type() == TESSERA_DEVICE_CUDA && src_view.device_index() != l.device) {
    // Another GPU: peer copy of the bytes, then convert here when needed.
    if (!src_view.is_contiguous()) unimplemented(call, "non-contiguous source on another device");
    DeviceTensor staged;
    staged.dtype = src_view.dtype();
    staged.sizes.assign(src_view.sizes(), src_view.sizes() + src_view.ndim());
    staged.strides = contiguous_strides(staged.sizes);
    const size_t nbytes = size_t(src_view.numel()) * src_view.itemsize();
    staged.owner = std::make_shared<DeviceBuffer>(l.device, nbytes, l.stream);
    staged.data = staged.owner->get();
    check_enqueue(call,
                  Backend::instance().peer_copy(l.device, staged.data, src_view.device_index(),
                                                static_cast<char*>(src_view.handle()) + src_view.byte_offset(), nbytes,
                                                l.stream),
                  "cudaMemcpyPeerAsync", /*into_temporary=*/true);
    device_copy(call, dst, staged, l.stream);
    return;
  }
  device_copy(call, dst, view_of(call, src_view, "src"), l.stream);
}

// uniform_ and normal_ (attributes a, b, seed, offset: one layout), into self in place: a
// non-contiguous self is filled through a contiguous temporary, as on the CPU.
using RandomAttr = op::normal_::attr;
static_assert(op::uniform_::attr::from == int(RandomAttr::mean) && op::uniform_::attr::to == int(RandomAttr::std) &&
              op::uniform_::attr::seed == int(RandomAttr::seed) && op::uniform_::attr::offset == int(RandomAttr::offset) &&
              op::uniform_::tensor::self == int(op::normal_::tensor::self));
template <bool kNormal>
void random_kernel(const KernelCall& call) {
  Launch l(call);
  DeviceTensor self = view_of(call, call.num_outputs() > 0 ? call.output(0) : call.input(op::normal_::tensor::self), "self");
  if (!elementwise_float(self.dtype)) unimplemented(call, std::string("dtype ") + dtype_str(self.dtype));
  if (call.num_attrs() <= RandomAttr::offset) unimplemented(call, "missing attributes");
  const double a = call.attr_double(RandomAttr::mean), b = call.attr_double(RandomAttr::std);
  const uint64_t seed = uint64_t(call.attr_int(RandomAttr::seed)), offset = uint64_t(call.attr_int(RandomAttr::offset));
  const DeviceTensor target = self.contiguous() ? self : temporary(l, self.dtype, self.sizes);
  check_launch(call, launch_random(target.data, self.dtype, target.numel(), kNormal, a, b, seed, offset, l.stream),
               target.data != self.data);
  if (target.data != self.data) device_copy(call, self, target, l.stream);
}

// ---------------------------------------------------------------- copies of views

// expand_copy(self, size): the broadcast copy (the shape rule sized the output, -1 included).
void expand_copy_kernel(const KernelCall& call) {
  Launch l(call);
  device_copy(call, view_of(call, call.output(0), "output"),
              view_of(call, call.input(op::expand_copy::tensor::self), "self"), l.stream);
}

// slice_copy(self, dim, start, end, step): a copy of the strided view self[start:end:step] along
// dim, start as PyTorch takes it (None is 0, negative counts from the end, clamped to [0, size]);
// the shape rule sized the output.
void slice_copy_kernel(const KernelCall& call) {
  using A = op::slice_copy_Tensor::attr;
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(op::slice_copy_Tensor::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (x.ndim() == 0 || out.ndim() != x.ndim()) unimplemented(call, "a 0-dim input");
  const int dim = wrapped_dim(call, call.num_attrs() > A::dim ? call.attr_int(A::dim) : 0, x.ndim());
  const int64_t size = x.sizes[size_t(dim)];
  int64_t start = call.num_attrs() > A::start && !call.attr_is_none(A::start) ? call.attr_int(A::start) : 0;
  const int64_t step = call.num_attrs() > A::step ? call.attr_int(A::step) : 1;
  if (step <= 0) unimplemented(call, "a step that is not positive");
  if (start < 0) start += size;
  start = std::min(std::max<int64_t>(start, 0), size);
  if (out.numel() == 0) return;
  x.data = static_cast<char*>(x.data) + start * x.strides[size_t(dim)] * int64_t(sdk::dtype_size(x.dtype));
  x.sizes[size_t(dim)] = out.sizes[size_t(dim)];
  x.strides[size_t(dim)] *= step;
  if (x.sizes != out.sizes || start + (out.sizes[size_t(dim)] - 1) * step >= size) unimplemented(call, "the output's shape");
  device_copy(call, out, x, l.stream);
}

// repeat(self, repeats): out, seen as [r0, s0, r1, s1, ...] (self padded with leading 1s to
// len(repeats) dims), is self broadcast over the r dims: one broadcast copy.
void repeat_kernel(const KernelCall& call) {
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(op::repeat::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  int n = 0;
  const int64_t* r = call.attr_ints(op::repeat::attr::repeats, &n);
  if (n < x.ndim() || out.ndim() != n) unimplemented(call, "repeats shorter than the rank");
  while (x.ndim() < n) {
    x.sizes.insert(x.sizes.begin(), 1);
    x.strides.insert(x.strides.begin(), 0);
  }
  DeviceTensor dst = out, src = x;
  dst.sizes.clear(), dst.strides.clear(), src.sizes.clear(), src.strides.clear();
  for (int d = 0; d < n; ++d) {
    const int64_t s = x.sizes[size_t(d)];
    if (r[d] < 0 || out.sizes[size_t(d)] != r[d] * s) unimplemented(call, "the output's shape");
    dst.sizes.insert(dst.sizes.end(), {r[d], s});
    dst.strides.insert(dst.strides.end(), {out.strides[size_t(d)] * s, out.strides[size_t(d)]});
    src.sizes.insert(src.sizes.end(), {r[d], s});
    src.strides.insert(src.strides.end(), {0, x.strides[size_t(d)]});
  }
  if (out.numel() == 0) return;
  device_copy(call, dst, src, l.stream);
}

// tril / triu (TriangleParams in launch.h); self converted to the output's dtype first when they
// differ.
template <bool kUpper>
void triangle_kernel(const KernelCall& call) {
  static_assert(op::triu::attr::diagonal == int(op::tril::attr::diagonal) && op::triu::tensor::self == int(op::tril::tensor::self));
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(op::tril::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (x.ndim() < 2 || x.ndim() > kMaxDims || out.sizes != x.sizes) unimplemented(call, "these shapes");
  x = materialize(call, x, out.dtype, false, l);
  TriangleParams p;
  p.ndim = int32_t(x.ndim());
  p.itemsize = int32_t(sdk::dtype_size(out.dtype));
  p.upper = kUpper;
  p.diagonal = call.num_attrs() > op::tril::attr::diagonal ? call.attr_int(op::tril::attr::diagonal) : 0;
  p.numel = out.numel();
  for (int d = 0; d < p.ndim; ++d) {
    p.sizes[d] = out.sizes[size_t(d)];
    p.out_strides[d] = out.strides[size_t(d)];
    p.in_strides[d] = x.strides[size_t(d)];
  }
  p.out = out.data;
  p.in = x.data;
  check_launch(call, launch_triangle(p, l.stream));
}

// cumsum(self, dim, dtype): self converted to the output's dtype and made contiguous, then a scan
// per line (launch_cumsum), into the output or a contiguous temporary copied into it.
void cumsum_kernel(const KernelCall& call) {
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(op::cumsum::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (!elementwise_dtype(out.dtype) || out.sizes != x.sizes) unimplemented(call, std::string("dtype ") + dtype_str(out.dtype));
  const int nd = x.ndim();
  const int dim = nd == 0 ? 0 : wrapped_dim(call, call.attr_int(op::cumsum::attr::dim), nd);
  x = materialize(call, x, out.dtype, true, l);
  const Lanes ln = lanes_of(x.sizes, dim);
  const DeviceTensor target = out.contiguous() ? out : temporary(l, out.dtype, out.sizes);
  check_launch(call, launch_cumsum(x.data, target.data, out.dtype, ln.outer, ln.n, ln.inner, l.stream),
               target.data != out.data);
  if (target.data != out.data) device_copy(call, out, target, l.stream);
}

// isinf(self) -> bool: |x| == inf by the comparison kernel on abs(x) (false for integers).
void isinf_kernel(const KernelCall& call) {
  Launch l(call);
  const DeviceTensor x = view_of(call, call.input(op::isinf::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (out.dtype != kDtBool) unimplemented(call, "an output that is not bool");
  IterShape shape;
  if (!elementwise_float(x.dtype)) return fill_with(call, l, out, 0);  // integers and bool are never infinite
  const DeviceTensor a = temporary(l, x.dtype, out.sizes);
  unary_into(call, l, UnaryOp::Abs, a, x);
  DeviceTensor none;  // the number operand, never read
  none.dtype = x.dtype;
  Operand ops[3] = {out.operand(), a.operand(), none.operand()};
  const Geometry ins[2] = {a.geometry(), none.geometry()};
  if (!plan_elementwise(out.geometry(), ins, 2, &shape, ops)) unimplemented(call, "operand layout");
  const ComputeScalar inf = to_compute_scalar(floating_number(std::numeric_limits<double>::infinity()), x.dtype, true);
  check_launch(call, launch_binary(BinaryOp::Eq, x.dtype, shape, ops[0], ops[1], ops[2], 2, inf,
                                   to_compute_scalar(integral_number(1), x.dtype), is_dense(shape, ops, 3, 1u << 2),
                                   l.stream));
}

// ---------------------------------------------------------------- reductions

// Every reduction's attributes start with its dims (an int list; an int or None for argmax and
// argmin) and end with keepdim; var has its correction between them.
using Reduce = op::sum;
static_assert(op::mean::tensor::self == int(Reduce::tensor::self) && op::var::tensor::self == int(Reduce::tensor::self) &&
              op::argmax::tensor::self == int(Reduce::tensor::self) &&
              op::amax::attr::dim == int(Reduce::attr::dim) && op::mean::attr::dim == int(Reduce::attr::dim) &&
              op::amin::attr::dim == int(Reduce::attr::dim) && op::prod::attr::dim == int(Reduce::attr::dim) &&
              op::var::attr::dim == int(Reduce::attr::dim) && op::argmax::attr::dim == int(Reduce::attr::dim) &&
              op::argmin::attr::dim == int(Reduce::attr::dim) && op::mean::attr::keepdim == int(Reduce::attr::keepdim) &&
              op::amax::attr::keepdim == int(Reduce::attr::keepdim) &&
              op::amin::attr::keepdim == int(Reduce::attr::keepdim) &&
              op::prod::attr::keepdim == int(Reduce::attr::keepdim) &&
              op::argmax::attr::keepdim == int(Reduce::attr::keepdim) &&
              op::argmin::attr::keepdim == int(Reduce::attr::keepdim) && op::var::attr::keepdim == 2 &&
              op::var::attr::correction == 1 && op::logsumexp::attr::dim == int(Reduce::attr::dim) &&
              op::logsumexp::attr::keepdim == int(Reduce::attr::keepdim));

// sum, prod, amax, amin, argmax and argmin on every dtype, mean and var on floating ones (the
// dispatcher refuses integer inputs to them, as PyTorch does). Empty reductions: sum 0, prod 1,
// mean and var NaN; amax, amin, argmax and argmin have no identity and go to the CPU fallback,
// which reports the error.
// The reduced dims of an attribute holding an int list, an int or None (all dims), as a bit mask
// over x's dims; a 0-dim input reduces to itself.
uint64_t reduce_mask(const KernelCall& call, int dim_attr, int ndim) {
  if (ndim > 64) unimplemented(call, "more than 64 dims");
  uint64_t mask = 0;
  if (call.num_attrs() > dim_attr) {
    const tessera_value_t& a = call.attr(dim_attr);
    if (a.kind == TESSERA_VALUE_INT_LIST) {
      for (int j = 0; j < a.count; ++j) mask |= uint64_t(1) << wrapped_dim(call, a.u.ints[j], std::max(ndim, 1));
    } else if (a.kind == TESSERA_VALUE_INT) {
      mask |= uint64_t(1) << wrapped_dim(call, a.u.i, std::max(ndim, 1));
    }
  }
  if (ndim == 0) return 0;
  if (mask == 0) mask = ndim >= 64 ? ~uint64_t(0) : (uint64_t(1) << ndim) - 1;  // empty dim list = all
  return mask;
}

// out = op over x's dims in `mask` (out has x's rank when keepdim), Note [CUDA reduction states].
void reduce_into(const KernelCall& call, const Launch& l, ReduceOp op, const DeviceTensor& x, const DeviceTensor& out,
                 uint64_t mask, bool keepdim, double correction = 1.0) {
  if (keepdim && out.ndim() != x.ndim()) keepdim = false;
  ReducePlan plan;
  if (!plan_reduction(x.geometry(), out.geometry(), mask, keepdim, &plan)) unimplemented(call, "operand layout");
  const bool no_identity = op == ReduceOp::Max || op == ReduceOp::Min || op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  if (plan.reduce_size == 0 && no_identity) unimplemented(call, "empty reduction has no identity");
  const ReduceLaunch how = plan_reduce_launch(plan, Backend::instance().sm_count(l.device));
  std::optional<DeviceBuffer> workspace;
  if (how.splits > 1)
    workspace.emplace(l.device, size_t(plan.num_outputs) * size_t(how.splits) * kReduceStateBytes, l.stream);
  check_launch(call, launch_reduce(op, plan, how, x.data, x.dtype, out.data, out.dtype, correction,
                                   workspace ? workspace->get() : nullptr, l.stream));
}

// Note [Integer division by zero on the GPU]
// Integer remainder, fmod and floor_divide report a zero divisor as the CPU does ("integer division
// by zero"), before anything is written: a number divisor is checked on the host; a tensor divisor
// by eq(b, 0) reduced to one bool on the device and read back, one stream synchronisation (as an
// index check, Note [Index errors on the GPU]). PyTorch's CUDA kernels do not check (their result
// is undefined there); the CPU's error is the rule here on every device.
void check_integer_divisor(const KernelCall& call, const Launch& l, int scalar_operand,
                           const ComputeScalar& scalar, const DeviceTensor& b, int32_t compute) {
  auto refuse = [&call] {
    throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                     std::string(call.op_name()) +
                         ": ZeroDivisionError: integer division by zero (PyTorch raises the "
                         "same); use floating tensors to get inf or NaN instead");
  };
  if (scalar_operand == 2) {
    if (scalar.i == 0) refuse();
    return;
  }
  if (b.numel() == 0) return;
  const DeviceTensor zeros = temporary(l, kDtBool, b.sizes);
  IterShape shape;
  Operand ops[3] = {zeros.operand(), b.operand(), b.operand()};
  const Geometry ins[2] = {b.geometry(), b.geometry()};
  if (!plan_elementwise(zeros.geometry(), ins, 2, &shape, ops)) unimplemented(call, "operand layout");
  const ComputeScalar zero = to_compute_scalar(integral_number(0), compute),
                      one = to_compute_scalar(integral_number(1), compute);
  check_launch(call,
               launch_binary(BinaryOp::Eq, compute, shape, ops[0], ops[1], ops[2], 2, zero, one,
                             is_dense(shape, ops, 3, 1u << 2), l.stream),
               /*into_temporary=*/true);
  const DeviceTensor any = temporary(l, kDtBool, {});
  const uint64_t all_dims = b.ndim() >= 64 ? ~uint64_t(0) : (uint64_t(1) << b.ndim()) - 1;
  reduce_into(call, l, ReduceOp::Max, zeros, any, all_dims, false);
  bool found = false;
  check_enqueue(call, cudaMemcpyAsync(&found, any.data, 1, cudaMemcpyDeviceToHost, l.stream),
                "cudaMemcpyAsync of the zero-divisor check", /*into_temporary=*/true);
  check_cuda(cudaStreamSynchronize(l.stream),
             std::string(call.op_name()) + " on cuda: synchronising for the zero-divisor check");
  if (found) refuse();
}

template <ReduceOp kOp>
void reduce_kernel(const KernelCall& call) {
  constexpr bool kArg = kOp == ReduceOp::ArgMax || kOp == ReduceOp::ArgMin;
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(Reduce::tensor::self), "self");
  DeviceTensor out = view_of(call, call.output(0), "output");
  if ((kOp == ReduceOp::Mean || kOp == ReduceOp::Var || kOp == ReduceOp::LogSumExp) && !elementwise_float(x.dtype))
    unimplemented(call, std::string("dtype ") + dtype_str(x.dtype));
  if (kArg && out.dtype != kDtI64) unimplemented(call, "an index output that is not int64");
  const int keepdim_attr = kOp == ReduceOp::Var ? op::var::attr::keepdim : int(Reduce::attr::keepdim);
  const bool keepdim = call.num_attrs() > keepdim_attr && call.attr(keepdim_attr).kind == TESSERA_VALUE_BOOL &&
                       call.attr_bool(keepdim_attr);
  const uint64_t mask = reduce_mask(call, Reduce::attr::dim, x.ndim());
  double correction = 1.0;
  if (kOp == ReduceOp::Var && call.num_attrs() > op::var::attr::correction) {
    const tessera_value_t& c = call.attr(op::var::attr::correction);
    if (c.kind == TESSERA_VALUE_INT) correction = double(c.u.i);
    else if (c.kind == TESSERA_VALUE_DOUBLE) correction = c.u.d;
  }
  reduce_into(call, l, kOp, x, out, mask, keepdim, correction);
}

// linalg_vector_norm(self, ord, dim, keepdim): composed on the device in fp32 (double for float64),
// as the CPU computes it in double: |x|, then amax / amin for ord +-inf, the count of nonzeros for
// 0, the sum for 1, sqrt of the sum of squares for 2, else the sum of |x|^ord to the 1 / ord; the
// result converted into the output's dtype.
void vector_norm_kernel(const KernelCall& call) {
  using A = op::linalg_vector_norm::attr;
  Launch l(call);
  const DeviceTensor x = view_of(call, call.input(op::linalg_vector_norm::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (!elementwise_float(out.dtype) || !elementwise_float(x.dtype)) unimplemented(call, std::string("dtype ") + dtype_str(x.dtype));
  const double p = call.attr_double(A::ord);
  const bool keepdim = call.num_attrs() > A::keepdim && call.attr(A::keepdim).kind == TESSERA_VALUE_BOOL &&
                       call.attr_bool(A::keepdim);
  const uint64_t mask = reduce_mask(call, A::dim, x.ndim());
  if (std::isinf(p))  // refused before anything is queued: the CPU reports an empty max-norm
    for (int d = 0; d < x.ndim(); ++d)
      if (((mask >> d) & 1u) && x.sizes[size_t(d)] == 0) unimplemented(call, "empty reduction has no identity");
  const int32_t work = out.dtype == kDtF64 ? kDtF64 : kDtF32;
  const DeviceTensor a = temporary(l, work, x.sizes);
  unary_into(call, l, UnaryOp::Abs, a, x);
  const DeviceTensor r = out.dtype == work && out.contiguous() ? out : temporary(l, work, out.sizes);
  const bool into_temporary = r.data != out.data;
  auto number = [&](double v) { return to_compute_scalar(floating_number(v), work); };
  if (std::isinf(p)) {
    reduce_into(call, l, p > 0 ? ReduceOp::Max : ReduceOp::Min, a, r, mask, keepdim);
  } else if (p == 0) {
    DeviceTensor nonzero = temporary(l, kDtBool, x.sizes), none;
    none.dtype = work;
    IterShape shape;
    Operand ops[3] = {nonzero.operand(), a.operand(), none.operand()};
    const Geometry ins[2] = {a.geometry(), none.geometry()};
    if (!plan_elementwise(nonzero.geometry(), ins, 2, &shape, ops)) unimplemented(call, "operand layout");
    check_launch(call, launch_binary(BinaryOp::Ne, work, shape, ops[0], ops[1], ops[2], 2, number(0), number(1),
                                     is_dense(shape, ops, 3, 1u << 2), l.stream),
                 /*into_temporary=*/true);
    reduce_into(call, l, ReduceOp::Sum, nonzero, r, mask, keepdim);
  } else if (p == 1) {
    reduce_into(call, l, ReduceOp::Sum, a, r, mask, keepdim);
  } else {
    const DeviceTensor powered = temporary(l, work, x.sizes);
    binary_number_into(call, l, BinaryOp::Pow, powered, a, number(p == 2 ? 2.0 : p));
    reduce_into(call, l, ReduceOp::Sum, powered, r, mask, keepdim);
    if (p == 2) unary_into(call, l, UnaryOp::Sqrt, r, r);
    else binary_number_into(call, l, BinaryOp::Pow, r, r, number(1.0 / p));
  }
  if (into_temporary) device_copy(call, out, r, l.stream);
}

// ---------------------------------------------------------------- softmax, layer_norm

using Softmax = op::softmax;
static_assert(op::log_softmax::attr::dim == int(Softmax::attr::dim));

template <bool kLog>
void softmax_kernel(const KernelCall& call) {
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(Softmax::tensor::self), "self");
  DeviceTensor out = view_of(call, call.output(0), "output");
  if (!elementwise_float(out.dtype)) unimplemented(call, std::string("dtype ") + dtype_str(out.dtype));
  if (x.numel() > 0 && x.numel() / std::max<int64_t>(x.ndim() ? x.sizes.back() : 1, 1) > 0x7fffffff)
    unimplemented(call, "more than 2^31 - 1 rows");
  x = materialize(call, x, out.dtype, true, l);
  int64_t dim = call.attr_int(Softmax::attr::dim);
  const int nd = x.ndim();
  if (nd == 0) dim = 0;
  else dim = wrapped_dim(call, dim, nd);
  const Lanes ln = lanes_of(x.sizes, int(dim));
  DeviceTensor target = out;
  if (!out.contiguous()) {
    target = materialize(call, out, out.dtype, true, l);  // fresh contiguous buffer (contents overwritten)
  }
  check_launch(call, launch_softmax(kLog, x.data, target.data, out.dtype, ln.outer, ln.n, ln.inner, l.stream));
  if (target.data != out.data) device_copy(call, out, target, l.stream);
}

// layer_norm and rms_norm over the trailing normalized_shape: contiguous rows in the output's dtype.
// rms_norm's eps=None is float32's epsilon for f16/bf16/f32 (the CPU kernel's finfo_eps).
template <bool kRms>
void norm_kernel(const KernelCall& call) {
  using T = op::layer_norm::tensor;
  using A = op::layer_norm::attr;
  static_assert(op::rms_norm::tensor::weight == int(T::weight) && op::rms_norm::attr::eps == int(A::eps) &&
                op::rms_norm::attr::normalized_shape == int(A::normalized_shape));
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(T::input), "input");
  DeviceTensor out = view_of(call, call.output(0), "output");
  if (!elementwise_float(out.dtype)) unimplemented(call, std::string("dtype ") + dtype_str(out.dtype));
  if (call.num_outputs() != 1) unimplemented(call, "only the normalised output is produced");
  int count = 0;
  const int64_t* ns = call.attr_ints(A::normalized_shape, &count);
  double eps = kRms ? double(std::numeric_limits<float>::epsilon()) : 1e-5;
  if (call.num_attrs() > A::eps && call.attr(A::eps).kind == TESSERA_VALUE_DOUBLE)
    eps = call.attr_double(A::eps);
  int64_t n = 1;
  for (int i = 0; i < count; ++i) n *= ns[i];
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  if (rows > 0x7fffffff) unimplemented(call, "more than 2^31 - 1 rows");
  x = materialize(call, x, out.dtype, true, l);
  std::optional<DeviceTensor> w, b;
  if (call.num_inputs() > T::weight && call.input(T::weight).defined())
    w = materialize(call, view_of(call, call.input(T::weight), "weight"), out.dtype, true, l);
  if (!kRms && call.num_inputs() > T::bias && call.input(T::bias).defined())
    b = materialize(call, view_of(call, call.input(T::bias), "bias"), out.dtype, true, l);
  DeviceTensor target = out.contiguous() ? out : materialize(call, out, out.dtype, true, l);
  check_launch(call, launch_layer_norm(x.data, w ? w->data : nullptr, b ? b->data : nullptr, target.data, out.dtype,
                                       rows, n, eps, kRms, l.stream));
  if (target.data != out.data) device_copy(call, out, target, l.stream);
}

// ---------------------------------------------------------------- matmul via cuBLASLt

// A prepared cuBLASLt problem: descriptors, layouts and the chosen algorithm, kept for the life of
// the process (one per distinct problem) so that a repeated matmul only sets the bias pointer and
// enqueues.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulHeuristicResult_t result{};
  std::mutex mutex;  // serialises the bias-pointer update with the enqueue
};
struct LtHandles {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::string, std::unique_ptr<LtPlan>> plans;
};
LtHandles& lt_handles() {
  static LtHandles* h = new LtHandles();
  return *h;
}

cublasLtHandle_t lt_handle(const KernelCall& call, int device) {
  const CublasLtApi& api = cublaslt_api();
  if (!api.loaded) {
    static std::once_flag warned;
    std::call_once(warned, [&] { sdk::log(TESSERA_LOG_WARNING, "cuda", "matmul falls back to the CPU: " + api.error); });
    unimplemented(call, api.error);
  }
  LtHandles& h = lt_handles();
  std::lock_guard<std::mutex> lock(h.mutex);
  auto it = h.handles.find(device);
  if (it != h.handles.end()) return it->second;
  cublasLtHandle_t handle = nullptr;
  const cublasStatus_t st = api.create(&handle);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw sdk::Error(TESSERA_STATUS_INTERNAL, "cublasLtCreate failed with status " + std::to_string(int(st)));
  h.handles.emplace(device, handle);
  return handle;
}

// True when the environment variable `name` is "1" (read through the host: honours setuid rules).
bool env_is_one(const char* name) {
  const char* v = sdk::host_api() && sdk::host_api()->getenv ? sdk::host_api()->getenv(name) : nullptr;
  return v && std::strcmp(v, "1") == 0;
}
bool allow_tf32() { return env_is_one("TESSERA_CUDA_ALLOW_TF32"); }

cudaDataType_t cuda_type(int32_t dt) {
  switch (dt) {
    case kDtF16: return CUDA_R_16F;
    case kDtBF16: return CUDA_R_16BF;
    case kDtF64: return CUDA_R_64F;
    default: return CUDA_R_32F;
  }
}

// What cuBLASLt applies to the product before it stores it (Note [Linear epilogues on CUDA]): an
// activation after the bias, and a residual read as its C matrix (beta = 1, same layout as D).
enum class LtActivation : int32_t { None, Relu, GeluTanh };
struct LtEpilogue {
  LtActivation activation = LtActivation::None;
  const void* residual = nullptr;
};

cublasLtEpilogue_t lt_epilogue_mode(bool bias, LtActivation a) {
  switch (a) {
    case LtActivation::Relu:
      return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case LtActivation::GeluTanh:
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case LtActivation::None:
      break;
  }
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// D[b] (m x n, row-major, ld = out_row_stride) = act(A[b] (m x k) * B[b] (k x n) (+ bias[n])) (+ C).
// Row-major D = A B is column-major D^T = B^T A^T: cuBLASLt's "A" is our B and its "B" is our A.
void lt_matmul(const KernelCall& call, const Launch& l, int32_t dtype, const MatrixOperand& a,
               const MatrixOperand& b, void* out, int64_t out_row_stride, int64_t out_batch_stride,
               int64_t batch, const void* bias, const LtEpilogue& epi = {}) {
  const CublasLtApi& api = cublaslt_api();
  cublasLtHandle_t handle = lt_handle(call, l.device);
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  // Our B as cuBLASLt's A (n x k column-major view).
  const bool b_rowmajor = b.col_stride == 1;
  const cublasOperation_t op_lt_a = b_rowmajor ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int64_t lda = b_rowmajor ? b.row_stride : b.col_stride;
  const uint64_t a_rows = uint64_t(b_rowmajor ? n : k), a_cols = uint64_t(b_rowmajor ? k : n);
  // Our A as cuBLASLt's B (k x m column-major view).
  const bool a_rowmajor = a.col_stride == 1;
  const cublasOperation_t op_lt_b = a_rowmajor ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int64_t ldb = a_rowmajor ? a.row_stride : a.col_stride;
  const uint64_t b_rows = uint64_t(a_rowmajor ? k : m), b_cols = uint64_t(a_rowmajor ? m : k);
  const bool tf32 = dtype == kDtF32 && allow_tf32();

  // Heuristic results depend on the problem and on the pointers' alignment (Note [cuBLASLt
  // alignment]): both are in the key.
  const uint32_t align_a = lt_alignment(b.data), align_b = lt_alignment(a.data), align_d = lt_alignment(out);
  const uint32_t align_c = epi.residual ? lt_alignment(epi.residual) : align_d;
  const cublasLtEpilogue_t mode = lt_epilogue_mode(bias != nullptr, epi.activation);
  auto align_of = [](const void* p) { return lt_alignment(p); };
  const std::string key =
      std::to_string(l.device) + ":" + std::to_string(dtype) + ":" + std::to_string(m) + "," +
      std::to_string(n) + "," + std::to_string(k) + ":" + std::to_string(lda) + "," + std::to_string(ldb) +
      "," + std::to_string(out_row_stride) + ":" + std::to_string(op_lt_a) + std::to_string(op_lt_b) + ":" +
      std::to_string(batch) + "," + std::to_string(b.batch_stride) + "," + std::to_string(a.batch_stride) +
      "," + std::to_string(out_batch_stride) + ":" + (bias ? "b" : "") + (tf32 ? "t" : "") + ":" +
      std::to_string(align_of(a.data)) + std::to_string(align_of(b.data)) + std::to_string(align_of(out)) +
      std::to_string(bias ? align_of(bias) : 0) + ":e" + std::to_string(int(mode)) +
      (epi.residual ? "c" + std::to_string(align_c) : std::string());
  LtPlan* plan = nullptr;
  {
    LtHandles& h = lt_handles();
    std::lock_guard<std::mutex> lock(h.mutex);
    auto it = h.plans.find(key);
    if (it != h.plans.end()) plan = it->second.get();
  }
  if (!plan) {
    auto fresh = std::make_unique<LtPlan>();
    LtPlan& p = *fresh;
    cublasLtMatmulPreference_t pref = nullptr;
    auto cleanup = [&] {
      if (pref) api.preference_destroy(pref);
      if (p.lc) api.matrix_layout_destroy(p.lc);
      if (p.lb) api.matrix_layout_destroy(p.lb);
      if (p.la) api.matrix_layout_destroy(p.la);
      if (p.desc) api.matmul_desc_destroy(p.desc);
    };
    auto check = [&](cublasStatus_t st, const char* what) {
      if (st != CUBLAS_STATUS_SUCCESS) {
        cleanup();
        throw sdk::Error(TESSERA_STATUS_INTERNAL, std::string(call.op_name()) + " on cuda: " + what +
                                                      " failed with cuBLAS status " + std::to_string(int(st)));
      }
    };
    // float64 in double throughout (PyTorch's DGEMM); the rest accumulate in fp32.
    const bool f64 = dtype == kDtF64;
    const cublasComputeType_t compute =
        f64 ? CUBLAS_COMPUTE_64F : (tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
    const cudaDataType_t type = cuda_type(dtype);
    check(api.matmul_desc_create(&p.desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F), "cublasLtMatmulDescCreate");
    check(api.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a, sizeof(op_lt_a)), "TRANSA");
    check(api.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b, sizeof(op_lt_b)), "TRANSB");
    if (mode != CUBLASLT_EPILOGUE_DEFAULT)
      check(api.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &mode, sizeof(mode)),
            "EPILOGUE");
    if (bias)
      check(api.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
            "BIAS_POINTER");
    check(api.matrix_layout_create(&p.la, type, a_rows, a_cols, lda), "layout A");
    check(api.matrix_layout_create(&p.lb, type, b_rows, b_cols, ldb), "layout B");
    check(api.matrix_layout_create(&p.lc, type, uint64_t(n), uint64_t(m), out_row_stride), "layout C");
    if (batch > 1) {
      const int32_t count = int32_t(batch);
      const int64_t sa = b.batch_stride, sb = a.batch_stride, sc = out_batch_stride;
      check(api.matrix_layout_set_attribute(p.la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), "batch A");
      check(api.matrix_layout_set_attribute(p.la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof(sa)), "stride A");
      check(api.matrix_layout_set_attribute(p.lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), "batch B");
      check(api.matrix_layout_set_attribute(p.lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof(sb)), "stride B");
      check(api.matrix_layout_set_attribute(p.lc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), "batch C");
      check(api.matrix_layout_set_attribute(p.lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof(sc)), "stride C");
    }
    constexpr uint64_t kWorkspace = uint64_t(32) << 20;
    check(api.preference_create(&pref), "cublasLtMatmulPreferenceCreate");
    check(api.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace, sizeof(kWorkspace)),
          "workspace");
    check(api.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)),
          "alignment A");
    check(api.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)),
          "alignment B");
    check(api.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                       sizeof(align_c)),
          "alignment C");
    check(api.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                       sizeof(align_d)),
          "alignment D");
    int returned = 0;
    const cublasStatus_t st = api.algo_get_heuristic(handle, p.desc, p.la, p.lb, p.lc, p.lc, pref, 1, &p.result, &returned);
    api.preference_destroy(pref);
    pref = nullptr;
    if (st != CUBLAS_STATUS_SUCCESS || returned == 0) {
      cleanup();
      unimplemented(call, "cuBLASLt has no algorithm for this problem (status " + std::to_string(int(st)) + ")");
    }
    LtHandles& h = lt_handles();
    std::lock_guard<std::mutex> lock(h.mutex);
    if (auto it = h.plans.find(key); it != h.plans.end()) {
      cleanup();  // another thread prepared the same problem first
      plan = it->second.get();
    } else {
      plan = fresh.get();
      h.plans.emplace(key, std::move(fresh));
    }
  }
  DeviceBuffer workspace(l.device, plan->result.workspaceSize, l.stream);
  // The scale type is the compute type's: double for float64, float otherwise.
  const float alpha_f = 1.0f, beta_f = epi.residual ? 1.0f : 0.0f;
  const double alpha_d = 1.0, beta_d = epi.residual ? 1.0 : 0.0;
  const void* alpha = dtype == kDtF64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = dtype == kDtF64 ? static_cast<const void*>(&beta_d) : &beta_f;
  const void* c = epi.residual ? epi.residual : out;
  cublasStatus_t st;
  {
    std::lock_guard<std::mutex> lock(plan->mutex);
    if (bias) {
      st = api.matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
      if (st != CUBLAS_STATUS_SUCCESS)
        throw sdk::Error(TESSERA_STATUS_INTERNAL, std::string(call.op_name()) +
                                                      " on cuda: setting the bias pointer failed with cuBLAS status " +
                                                      std::to_string(int(st)));
    }
    t_queued = true;
    st = api.matmul(handle, plan->desc, alpha, b.data, plan->la, a.data, plan->lb, beta, c, plan->lc, out,
                    plan->lc, &plan->result.algo, workspace.get(), plan->result.workspaceSize, l.stream);
  }
  if (st == CUBLAS_STATUS_SUCCESS) g_kernel_launches.fetch_add(1, std::memory_order_relaxed);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw sdk::Error(TESSERA_STATUS_INTERNAL, std::string(call.op_name()) + " on cuda: cublasLtMatmul failed with status " +
                                                  std::to_string(int(st)));
}

// Collapses the batch dims [0, nb) of `t` (broadcast to `batch_sizes`) to one stride. False when the
// strides do not allow it.
bool batch_stride_of(const DeviceTensor& t, int matrix_dims, const std::vector<int64_t>& batch_sizes, int64_t* stride) {
  const int nb = int(batch_sizes.size());
  const int tb = t.ndim() - matrix_dims;  // batch dims of t (right-aligned)
  int64_t expected = -1, span = 1;
  bool all_zero = true;
  std::vector<int64_t> s(size_t(nb), 0);
  for (int d = 0; d < nb; ++d) {
    const int td = d - (nb - tb);
    if (td >= 0 && t.sizes[size_t(td)] != 1) s[size_t(d)] = t.strides[size_t(td)];
  }
  for (int d = 0; d < nb; ++d)
    if (batch_sizes[size_t(d)] != 1 && s[size_t(d)] != 0) all_zero = false;
  if (all_zero) {
    *stride = 0;
    return true;
  }
  for (int d = nb - 1; d >= 0; --d) {
    if (batch_sizes[size_t(d)] == 1) continue;
    if (expected < 0) {
      expected = s[size_t(d)];
      if (expected == 0) return false;
    } else if (s[size_t(d)] != expected * span) {
      return false;
    }
    span *= batch_sizes[size_t(d)];
  }
  *stride = expected < 0 ? 0 : expected;
  return true;
}

// A matmul's problem: vectors made 1 x k / k x 1 matrices (in place), the sizes and the broadcast
// batch dims.
struct MatmulShape {
  int64_t m = 0, k = 0, n = 0, batch = 1;
  std::vector<int64_t> batch_sizes;
};
MatmulShape matmul_shape(const KernelCall& call, DeviceTensor& a, DeviceTensor& b) {
  if (a.ndim() == 1) {
    a.sizes.insert(a.sizes.begin(), 1);
    a.strides.insert(a.strides.begin(), a.sizes[1] * a.strides[0]);
  }
  if (b.ndim() == 1) {
    b.sizes.push_back(1);
    b.strides.push_back(1);
  }
  MatmulShape s;
  s.m = a.sizes[size_t(a.ndim() - 2)];
  s.k = a.sizes[size_t(a.ndim() - 1)];
  s.n = b.sizes[size_t(b.ndim() - 1)];
  if (b.sizes[size_t(b.ndim() - 2)] != s.k) unimplemented(call, "inner dimensions differ");
  const int nb = std::max(a.ndim(), b.ndim()) - 2;
  for (int d = 0; d < nb; ++d) {
    const int da = d - (nb - (a.ndim() - 2)), db = d - (nb - (b.ndim() - 2));
    s.batch_sizes.push_back(std::max(da >= 0 ? a.sizes[size_t(da)] : 1, db >= 0 ? b.sizes[size_t(db)] : 1));
    s.batch *= s.batch_sizes.back();
  }
  return s;
}

// `attempt` counts the retries after making an operand contiguous (at most one per operand).
// `epi`: Note [Linear epilogues on CUDA]; a residual has out's sizes and is contiguous, like out.
void matmul_impl(const KernelCall& call, const Launch& l, DeviceTensor a, DeviceTensor b, DeviceTensor out,
                 const void* bias, const LtEpilogue& epi = {}, int attempt = 0) {
  const int32_t dtype = out.dtype;
  if (!elementwise_float(dtype)) unimplemented(call, std::string("dtype ") + dtype_str(dtype));
  if (a.ndim() == 0 || b.ndim() == 0) unimplemented(call, "0-dim operand");
  a = materialize(call, a, dtype, false, l);
  b = materialize(call, b, dtype, false, l);
  if (!out.contiguous()) unimplemented(call, "non-contiguous output");
  const MatmulShape shape = matmul_shape(call, a, b);
  const int64_t m = shape.m, k = shape.k, n = shape.n, batch = shape.batch;
  const std::vector<int64_t>& batch_sizes = shape.batch_sizes;
  const int nb = int(batch_sizes.size());
  if (out.numel() == 0) return;
  if (k == 0) {  // empty inner dimension: zeros (plus the bias, which needs the GPU fallback path)
    if (bias || epi.residual) unimplemented(call, "bias or residual with an empty inner dimension");
    check_enqueue(call, cudaMemsetAsync(out.data, 0, size_t(out.numel()) * sdk::dtype_size(dtype), l.stream),
                  "cudaMemsetAsync");
    return;
  }

  MatrixOperand ma{a.data, m, k, a.strides[size_t(a.ndim() - 2)], a.strides[size_t(a.ndim() - 1)], 0};
  MatrixOperand mb{b.data, k, n, b.strides[size_t(b.ndim() - 2)], b.strides[size_t(b.ndim() - 1)], 0};
  fix_degenerate(ma);
  fix_degenerate(mb);
  int64_t rows = m, nbatch = batch;
  // b shared by every batch and a's batch + row dims collapsing to one row stride: one big GEMM.
  int64_t b_bs = 0;
  const bool b_shared = batch_stride_of(b, 2, batch_sizes, &b_bs) && b_bs == 0;
  int64_t a_bs = 0;
  if (batch > 1 && b_shared && ma.col_stride == 1 && batch_stride_of(a, 2, batch_sizes, &a_bs) && a_bs == m * ma.row_stride &&
      a.ndim() - 2 == nb) {
    rows = batch * m;
    nbatch = 1;
    ma.rows = rows;
  }
  const bool a_ok = lt_layout_ok(ma) && (nbatch == 1 || batch_stride_of(a, 2, batch_sizes, &ma.batch_stride));
  const bool b_ok = lt_layout_ok(mb) && (nbatch == 1 || batch_stride_of(b, 2, batch_sizes, &mb.batch_stride));
  if (!a_ok || !b_ok) {
    // A contiguous copy always has a usable matrix layout; batch dims that broadcast in only some
    // positions cannot be expressed as one batch stride and go to the CPU fallback.
    if (attempt > 0) unimplemented(call, "batch dims that broadcast partially");
    if (!a_ok) a = materialize(call, a, dtype, true, l);
    if (!b_ok) b = materialize(call, b, dtype, true, l);
    return matmul_impl(call, l, a, b, out, bias, epi, attempt + 1);
  }
  if (nbatch > 0x7fffffff) unimplemented(call, "batch too large");
  lt_matmul(call, l, dtype, ma, mb, out.data, n, m * n, nbatch, bias, epi);
}

// Integer matmul (Note [Integer nn ops] in plugins/cpu/nn/onednn_ops.cpp: every integer dtype,
// exact and wrapping, as PyTorch's CPU matmul): a and b broadcast into contiguous [batch, m, k] and
// [batch, k, n] copies, then launch_integer_matmul (uint64 products and sums, as the CPU kernel).
void integer_matmul(const KernelCall& call, const Launch& l, DeviceTensor a, DeviceTensor b, const DeviceTensor& out) {
  const int32_t dtype = out.dtype;
  if (a.dtype != dtype || b.dtype != dtype || a.ndim() == 0 || b.ndim() == 0 || !out.contiguous())
    unimplemented(call, "operands of another dtype, a 0-dim operand or a non-contiguous output");
  const MatmulShape p = matmul_shape(call, a, b);
  if (out.numel() == 0) return;
  if (p.batch > 65535 || (p.m + 15) / 16 > 65535) unimplemented(call, "more than 65535 matrices or row tiles");
  const int nb = int(p.batch_sizes.size());
  // `t` seen as [batch..., rows, cols] (broadcast batch dims have stride 0), copied contiguous.
  auto packed = [&](const DeviceTensor& t, int64_t rows, int64_t cols) {
    DeviceTensor v = t;
    v.sizes = p.batch_sizes;
    v.strides.assign(size_t(nb), 0);
    for (int d = 0; d < nb; ++d) {
      const int td = d - (nb - (t.ndim() - 2));
      if (td >= 0 && t.sizes[size_t(td)] != 1) v.strides[size_t(d)] = t.strides[size_t(td)];
    }
    v.sizes.push_back(rows);
    v.sizes.push_back(cols);
    v.strides.push_back(t.strides[size_t(t.ndim() - 2)]);
    v.strides.push_back(t.strides[size_t(t.ndim() - 1)]);
    const DeviceTensor c = temporary(l, dtype, v.sizes);
    device_copy(call, c, v, l.stream, /*into_temporary=*/true);
    return c;
  };
  const DeviceTensor ac = packed(a, p.m, p.k), bc = packed(b, p.k, p.n);
  check_launch(call, launch_integer_matmul(ac.data, bc.data, out.data, dtype, p.batch, p.m, p.k, p.n, l.stream));
}

void matmul_kernel(const KernelCall& call) {
  Launch l(call);
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (out.dtype != kDtBool && !elementwise_float(out.dtype))
    return integer_matmul(call, l, view_of(call, call.input(op::matmul::tensor::self), "self"),
                          view_of(call, call.input(op::matmul::tensor::other), "other"), out);
  matmul_impl(call, l, view_of(call, call.input(op::matmul::tensor::self), "self"),
              view_of(call, call.input(op::matmul::tensor::other), "other"), out, nullptr);
}

// target += other (broadcast to target), in the same stream.
void add_into(const KernelCall& call, const Launch& l, const DeviceTensor& target, const DeviceTensor& other,
              bool into_temporary) {
  IterShape shape;
  Operand ops[3] = {target.operand(), target.operand(), other.operand()};
  const Geometry ins[2] = {target.geometry(), other.geometry()};
  if (!plan_elementwise(target.geometry(), ins, 2, &shape, ops)) unimplemented(call, "operand layout");
  check_launch(
      call,
      launch_binary(BinaryOp::Add, target.dtype, shape, ops[0], ops[1], ops[2], 0, ComputeScalar{},
                    to_compute_scalar(integral_number(1), target.dtype), is_dense(shape, ops, 3), l.stream),
      into_temporary);
}

// The activation of _linear_epilogue / _conv2d_epilogue ("none", "relu", "gelu" (erf), "gelu_tanh")
// as the unary op that applies it (none: nullopt); any other name goes to the CPU, which reports it.
std::optional<UnaryOp> epilogue_activation(const KernelCall& call, const std::string& act) {
  if (act == "none") return std::nullopt;
  if (act == "relu") return UnaryOp::Relu;
  if (act == "gelu") return UnaryOp::Gelu;
  if (act == "gelu_tanh") return UnaryOp::GeluTanh;
  unimplemented(call, "activation '" + act + "'");
}

// out = input @ weight^T (+ bias) with `epi` fused by cuBLASLt; float64 has no cuBLASLt epilogue:
// the GEMM, then out += bias broadcast over the rows (the caller applies `epi` itself, see
// linear_epilogue_kernel). Returns whether `epi` was applied.
bool linear_into(const KernelCall& call, const Launch& l, const DeviceTensor& x, const DeviceTensor& w,
                 int bias_at, const DeviceTensor& out, const LtEpilogue& epi = {}) {
  if (w.ndim() != 2) unimplemented(call, "weight must be 2-D");
  // weight^T as a view: [in, out] with swapped strides.
  DeviceTensor wt = w;
  std::swap(wt.sizes[0], wt.sizes[1]);
  std::swap(wt.strides[0], wt.strides[1]);
  std::optional<DeviceTensor> bias;
  if (call.num_inputs() > bias_at && call.input(bias_at).defined()) {
    DeviceTensor b = view_of(call, call.input(bias_at), "bias");
    if (b.ndim() != 1 || b.sizes[0] != w.sizes[0]) unimplemented(call, "bias that is not [out_features]");
    bias = materialize(call, b, out.dtype, true, l);
    if (out.dtype == kDtF64) {
      matmul_impl(call, l, x, wt, out, nullptr);
      if (out.numel() != 0) add_into(call, l, out, *bias, false);
      return false;
    }
    if (lt_bias_needs_copy(bias->data)) {  // Note [cuBLASLt alignment]: a fresh block is 512-byte aligned
      DeviceTensor aligned = *bias;
      aligned.owner = std::make_shared<DeviceBuffer>(l.device, size_t(b.sizes[0]) * sdk::dtype_size(out.dtype), l.stream);
      aligned.data = aligned.owner->get();
      device_copy(call, aligned, *bias, l.stream, /*into_temporary=*/true);
      bias = aligned;
    }
  }
  const bool fused = out.dtype != kDtF64;
  matmul_impl(call, l, x, wt, out, bias ? bias->data : nullptr, fused ? epi : LtEpilogue{});
  return fused;
}

void linear_kernel(const KernelCall& call) {
  Launch l(call);
  using T = op::linear::tensor;
  linear_into(call, l, view_of(call, call.input(T::input), "input"),
              view_of(call, call.input(T::weight), "weight"), T::bias,
              view_of(call, call.output(0), "output"));
}

// Note [Linear epilogues on CUDA]
// _linear_epilogue(input, weight, bias, residual, activation) = residual + act(linear(...)), the op
// tessera::compile fuses linear -> bias add -> relu / gelu -> residual add chains into (Note [Linear
// epilogues]; fuse_linear_epilogues rewrites a CUDA graph when this kernel is registered). cuBLASLt
// applies what it can while the tile is in registers: the bias, relu, the tanh GELU
// (CUBLASLT_EPILOGUE_GELU is the tanh approximation, PyTorch's choice for approximate="tanh" too)
// and, without an activation, the residual as its C matrix (beta = 1). The erf GELU and a residual
// after an activation are one elementwise pass each over the output; float64 (no cuBLASLt epilogues)
// takes the GEMM, the bias add and those passes. Rounded once where fused, as the CPU's oneDNN
// post-ops.
void linear_epilogue_kernel(const KernelCall& call) {
  using T = op::_linear_epilogue::tensor;
  Launch l(call);
  const DeviceTensor x = view_of(call, call.input(T::input), "input");
  const DeviceTensor w = view_of(call, call.input(T::weight), "weight");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  const std::optional<UnaryOp> act =
      epilogue_activation(call, call.attr_string(op::_linear_epilogue::attr::activation));
  std::optional<DeviceTensor> residual;
  if (call.num_inputs() > T::residual && call.input(T::residual).defined()) {
    residual = view_of(call, call.input(T::residual), "residual");
    if (residual->sizes != out.sizes) unimplemented(call, "a residual of another shape");
  }
  if (!out.contiguous()) unimplemented(call, "non-contiguous output");
  LtEpilogue epi;
  epi.activation = act == UnaryOp::Relu       ? LtActivation::Relu
                   : act == UnaryOp::GeluTanh ? LtActivation::GeluTanh
                                              : LtActivation::None;
  const bool residual_in_c = residual && !act && residual->dtype == out.dtype && residual->contiguous();
  if (residual_in_c) epi.residual = residual->data;
  const bool fused = linear_into(call, l, x, w, T::bias, out, epi);
  if (out.numel() == 0) return;
  // The erf GELU is never cuBLASLt's; relu and the tanh GELU are unless float64 took no epilogue.
  if (act && (!fused || *act == UnaryOp::Gelu)) unary_into(call, l, *act, out, out);
  if (residual && (!fused || !residual_in_c)) add_into(call, l, out, *residual, false);
}

// ---------------------------------------------------------------- conv2d via cuDNN

// Note [conv2d on cuDNN]
// conv2d runs cuDNN's convolution forward (the legacy API of cuDNN 9, opened at first use: Note
// [Loading cuDNN]). plan_conv (conv_plan.h) describes the problem: the output's memory format
// (NHWC for a channels-last output, else NCHW) for the input, the filter and the output, re-packing
// what is not packed that way. The algorithm is cuDNN's heuristic choice
// (cudnnGetConvolutionForwardAlgorithm_v7: the first that succeeds within a 1 GiB workspace), kept per
// problem for the life of the process. Math: fp32 accumulation for float16/bfloat16 (tensor cores
// allowed), no TF32 for float32 unless TESSERA_CUDA_ALLOW_TF32=1 (as matmul), double for float64.
// The bias is added by the elementwise kernel after the convolution, in the same stream. Without cuDNN, or
// when cuDNN refuses the problem before anything is queued, conv2d goes to the CPU fallback with
// the reason logged once.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cuDNN 9 marks its legacy convolution API

struct CudnnState {
  std::mutex mutex;  // guards the maps and serialises SetStream + the call on a handle
  std::map<int, cudnnHandle_t> handles;
  std::map<std::string, std::pair<int, size_t>> algos;  // forward or backward-data algorithm, workspace
};
CudnnState& cudnn_state() {
  static CudnnState* s = new CudnnState();
  return *s;
}

cudnnDataType_t cudnn_type(int32_t dt) {
  switch (dt) {
    case kDtF16: return CUDNN_DATA_HALF;
    case kDtBF16: return CUDNN_DATA_BFLOAT16;
    case kDtF64: return CUDNN_DATA_DOUBLE;
    default: return CUDNN_DATA_FLOAT;
  }
}

// Descriptors destroyed with the call.
struct CudnnDescriptors {
  const CudnnApi& api;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t activation = nullptr;
  explicit CudnnDescriptors(const CudnnApi& a) : api(a) {}
  ~CudnnDescriptors() {
    if (activation) api.destroy_activation(activation);
    if (bias) api.destroy_tensor(bias);
    if (conv) api.destroy_conv(conv);
    if (w) api.destroy_filter(w);
    if (y) api.destroy_tensor(y);
    if (x) api.destroy_tensor(x);
  }
};

// A tensor re-packed into `layout` (or only allocated so, when `copy` is false).
DeviceTensor conv_packed(const KernelCall& call, const Launch& l, const DeviceTensor& t, ConvLayout layout, bool copy) {
  DeviceTensor r = temporary(l, t.dtype, t.sizes);
  if (t.ndim() == 4) {
    int64_t sizes[4] = {t.sizes[0], t.sizes[1], t.sizes[2], t.sizes[3]}, strides[4];
    conv_packed_strides(sizes, layout, strides);
    r.strides.assign(strides, strides + 4);
  }
  if (copy) device_copy(call, r, t, l.stream, /*into_temporary=*/true);
  return r;
}

enum class ConvPass { Forward, BackwardData };

// The cuDNN library, or the CPU fallback with the reason logged once.
const CudnnApi& cudnn_or_fallback(const KernelCall& call) {
  const CudnnApi& api = cudnn_api();
  if (!api.loaded) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      sdk::log(TESSERA_LOG_WARNING, "cuda", "conv2d and conv_transpose2d fall back to the CPU: " + api.error);
    });
    unimplemented(call, api.error);
  }
  return api;
}

// The convolution of `plan` on cuDNN, x / w / y packed in plan.layout: Forward writes y = conv(x, w);
// BackwardData writes x = the transposed convolution of y (conv_transpose2d). The algorithm is
// cuDNN's heuristic choice, the first that succeeds within a 1 GiB workspace, kept per problem.
// `into_temporary`: the written buffer is the call's own temporary.
// `fused_bias` (Forward only; contiguous [K] of the dtype): y = relu(conv(x) + bias) as one
// cudnnConvolutionBiasActivationForward (Note [Conv epilogues on cuDNN]). Returns false, having
// queued nothing, when cuDNN refuses that fused call: the caller then runs the separate passes.
bool cudnn_convolution(const KernelCall& call, const Launch& l, const CudnnApi& api, const ConvPlan& plan,
                       int32_t dtype, ConvPass pass, const void* x, const void* w, const void* y,
                       void* written, bool into_temporary, const void* fused_bias = nullptr) {
  CudnnDescriptors d(api);
  const cudnnDataType_t type = cudnn_type(dtype);
  const cudnnTensorFormat_t format = plan.layout == ConvLayout::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  auto check = [&](cudnnStatus_t st, const char* what) {
    if (st != CUDNN_STATUS_SUCCESS)
      unimplemented(call, std::string("cuDNN ") + what + ": " + api.get_error_string(st));
  };
  int64_t xs[4], ys[4];
  conv_packed_strides(plan.x, plan.layout, xs);
  conv_packed_strides(plan.y, plan.layout, ys);
  auto i32 = [](int64_t v) { return int(v); };  // plan_conv checked the int range
  check(api.create_tensor(&d.x), "cudnnCreateTensorDescriptor");
  check(api.set_tensor_4d_ex(d.x, type, i32(plan.x[0]), i32(plan.x[1]), i32(plan.x[2]), i32(plan.x[3]),
                             i32(xs[0]), i32(xs[1]), i32(xs[2]), i32(xs[3])),
        "input descriptor");
  check(api.create_tensor(&d.y), "cudnnCreateTensorDescriptor");
  check(api.set_tensor_4d_ex(d.y, type, i32(plan.y[0]), i32(plan.y[1]), i32(plan.y[2]), i32(plan.y[3]),
                             i32(ys[0]), i32(ys[1]), i32(ys[2]), i32(ys[3])),
        "output descriptor");
  check(api.create_filter(&d.w), "cudnnCreateFilterDescriptor");
  check(api.set_filter_4d(d.w, type, format, i32(plan.w[0]), i32(plan.w[1]), i32(plan.w[2]), i32(plan.w[3])),
        "filter descriptor");
  check(api.create_conv(&d.conv), "cudnnCreateConvolutionDescriptor");
  check(api.set_conv_2d(d.conv, plan.pad[0], plan.pad[1], plan.stride[0], plan.stride[1], plan.dilation[0],
                        plan.dilation[1], CUDNN_CROSS_CORRELATION,
                        dtype == kDtF64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
        "convolution descriptor");
  check(api.set_group_count(d.conv, plan.groups), "group count");
  const cudnnMathType_t math = is_float16ish(dtype)                 ? CUDNN_TENSOR_OP_MATH
                               : (dtype == kDtF32 && !allow_tf32()) ? CUDNN_FMA_MATH
                                                                    : CUDNN_DEFAULT_MATH;
  check(api.set_math_type(d.conv, math), "math type");
  CudnnState& st = cudnn_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  cudnnHandle_t& handle = st.handles[l.device];
  if (!handle) check(api.create(&handle), "cudnnCreate");
  std::string key;
  for (int64_t v : {int64_t(pass), int64_t(l.device), int64_t(dtype), int64_t(plan.layout), int64_t(math),
                    int64_t(plan.groups)})
    (key += std::to_string(v)) += ':';
  for (const int64_t* v : {plan.x, plan.w, plan.y})
    for (int i = 0; i < 4; ++i) (key += std::to_string(v[i])) += ',';
  for (int i = 0; i < 2; ++i)
    for (int32_t v : {plan.pad[i], plan.stride[i], plan.dilation[i]}) (key += std::to_string(v)) += ';';
  auto it = st.algos.find(key);
  if (it == st.algos.end()) {
    constexpr size_t kMaxWorkspace = size_t(1) << 30;
    int returned = 0, algo = -1;
    size_t memory = 0;
    // The first of cuDNN's ranked answers that succeeds within the workspace limit.
    auto pick = [&](const auto* perf) {
      for (int i = 0; i < returned && algo < 0; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace)
          algo = int(perf[i].algo), memory = perf[i].memory;
    };
    if (pass == ConvPass::Forward) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      check(api.get_forward_algorithm(handle, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                      &returned, perf),
            "cudnnGetConvolutionForwardAlgorithm_v7");
      pick(perf);
    } else {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      check(api.get_backward_data_algorithm(handle, d.w, d.y, d.conv, d.x,
                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf),
            "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      pick(perf);
    }
    if (algo < 0) unimplemented(call, "cuDNN has no algorithm for this convolution");
    it = st.algos.emplace(key, std::make_pair(algo, memory)).first;
  }
  DeviceBuffer workspace(l.device, it->second.second, l.stream);
  check(api.set_stream(handle, l.stream), "cudnnSetStream");
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const bool f64 = dtype == kDtF64;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  if (fused_bias) {
    check(api.create_tensor(&d.bias), "cudnnCreateTensorDescriptor");
    const int k = int(plan.y[1]);
    check(api.set_tensor_4d_ex(d.bias, type, 1, k, 1, 1, k, 1, 1, 1), "bias descriptor");
    check(api.create_activation(&d.activation), "cudnnCreateActivationDescriptor");
    check(api.set_activation(d.activation, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
          "activation descriptor");
    // z = y with alpha2 = 0: nothing is added besides the bias.
    const cudnnStatus_t fused = api.convolution_bias_activation_forward(
        handle, alpha, d.x, x, d.w, w, d.conv, cudnnConvolutionFwdAlgo_t(it->second.first), workspace.get(),
        it->second.second, beta, d.y, written, d.bias, fused_bias, d.activation, d.y, written);
    if (fused != CUDNN_STATUS_SUCCESS) {
      static std::once_flag logged;
      std::call_once(logged, [&] {
        sdk::log(TESSERA_LOG_INFO, "cuda",
                 std::string("cudnnConvolutionBiasActivationForward refused a conv2d epilogue (") +
                     api.get_error_string(fused) + "); such epilogues run as separate passes");
      });
      return false;
    }
    if (!into_temporary) t_queued = true;
    g_kernel_launches.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (!into_temporary) t_queued = true;
  const cudnnStatus_t status =
      pass == ConvPass::Forward
          ? api.convolution_forward(handle, alpha, d.x, x, d.w, w, d.conv,
                                    cudnnConvolutionFwdAlgo_t(it->second.first), workspace.get(),
                                    it->second.second, beta, d.y, written)
          : api.convolution_backward_data(handle, alpha, d.w, w, d.y, y, d.conv,
                                          cudnnConvolutionBwdDataAlgo_t(it->second.first), workspace.get(),
                                          it->second.second, beta, d.x, written);
  if (status != CUDNN_STATUS_SUCCESS)
    throw sdk::Error(TESSERA_STATUS_INTERNAL,
                     std::string(call.op_name()) +
                         " on cuda: cuDNN's convolution failed: " + api.get_error_string(status));
  g_kernel_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// int[2] attributes: one value for both dims, or two; `fallback` when absent.
void conv_pair(const KernelCall& call, int attr, int64_t fallback, int64_t v[2]) {
  int count = 0;
  const int64_t* p = call.num_attrs() > attr ? call.attr_ints(attr, &count) : nullptr;
  v[0] = count > 0 ? p[0] : fallback;
  v[1] = count > 1 ? p[1] : v[0];
}

// The optional bias [channels] as a view broadcast over an output of `ndim` dims (channels at
// ndim - 3), or nothing.
std::optional<DeviceTensor> channel_bias(const KernelCall& call, int at, int64_t channels, int32_t dtype,
                                         int ndim) {
  if (call.num_inputs() <= at || !call.input(at).defined()) return std::nullopt;
  DeviceTensor b = view_of(call, call.input(at), "bias");
  if (b.ndim() != 1 || b.sizes[0] != channels || b.dtype != dtype)
    unimplemented(call, "bias that is not [out_channels]");
  const int64_t channel_stride = b.strides[0];
  b.sizes.assign(size_t(ndim), 1);
  b.strides.assign(size_t(ndim), 0);
  b.sizes[size_t(ndim - 3)] = channels;
  b.strides[size_t(ndim - 3)] = channel_stride;
  return b;
}

// conv2d's and conv_transpose2d's operands (one floating dtype) and the attributes they share.
struct ConvCall {
  DeviceTensor x, w, out;
  int64_t stride[2] = {}, pad[2] = {}, dilation[2] = {};
  int64_t groups = 1;
};
template <typename T, typename A>
ConvCall conv_call(const KernelCall& call) {
  ConvCall c;
  c.x = view_of(call, call.input(T::input), "input");
  c.w = view_of(call, call.input(T::weight), "weight");
  c.out = view_of(call, call.output(0), "output");
  if (!elementwise_float(c.out.dtype) || c.x.dtype != c.out.dtype || c.w.dtype != c.out.dtype)
    unimplemented(call, std::string("dtype ") + dtype_str(c.out.dtype));
  conv_pair(call, A::stride, 1, c.stride);
  conv_pair(call, A::padding, 0, c.pad);
  conv_pair(call, A::dilation, 1, c.dilation);
  c.groups = call.num_attrs() > A::groups ? call.attr_int(A::groups) : 1;
  return c;
}

// conv2d, then (kEpilogue: _conv2d_epilogue) its activation attribute (epilogue_activation's).
template <typename T, typename A, bool kEpilogue>
void conv2d_with(const KernelCall& call) {
  Launch l(call);
  std::optional<UnaryOp> activation;
  if constexpr (kEpilogue) activation = epilogue_activation(call, call.attr_string(A::activation));
  const CudnnApi& api = cudnn_or_fallback(call);
  ConvCall c = conv_call<T, A>(call);
  DeviceTensor &x = c.x, &w = c.w, &out = c.out;
  ConvPlan plan;
  std::string why;
  if (!plan_conv(x.geometry(), w.geometry(), out.geometry(), c.pad, c.stride, c.dilation, c.groups, &plan,
                 &why))
    unimplemented(call, why);
  if (out.numel() == 0) return;
  const std::optional<DeviceTensor> bias = channel_bias(call, T::bias, plan.w[0], out.dtype, out.ndim());
  const DeviceTensor target = plan.copy_y ? conv_packed(call, l, out, plan.layout, false) : out;
  // Zero input channels: the CPU fallback decides (its oneDNN refuses them; PyTorch gives an
  // output of zero channels).
  if (x.numel() == 0 || w.numel() == 0) unimplemented(call, "zero input channels");
  if (plan.copy_x) x = conv_packed(call, l, x, plan.layout, true);
  if (plan.copy_w) w = conv_packed(call, l, w, plan.layout, true);
  // Note [Conv epilogues on cuDNN]: bias + relu in cuDNN's fused call where it takes it.
  if (activation == UnaryOp::Relu && bias) {
    DeviceTensor packed_bias = *bias;
    packed_bias.sizes = {plan.w[0]};
    packed_bias.strides = {bias->strides[size_t(out.ndim() - 3)]};
    packed_bias = materialize(call, packed_bias, out.dtype, true, l);
    if (cudnn_convolution(call, l, api, plan, out.dtype, ConvPass::Forward, x.data, w.data, nullptr,
                          target.data, plan.copy_y, packed_bias.data)) {
      if (plan.copy_y) device_copy(call, out, target, l.stream);
      return;
    }
  }
  cudnn_convolution(call, l, api, plan, out.dtype, ConvPass::Forward, x.data, w.data, nullptr, target.data,
                    plan.copy_y);
  if (bias) add_into(call, l, target, *bias, plan.copy_y);
  if (activation) unary_into(call, l, *activation, target, target);
  if (plan.copy_y) device_copy(call, out, target, l.stream);
}

void conv2d_kernel(const KernelCall& call) {
  conv2d_with<op::conv2d::tensor, op::conv2d::attr, false>(call);
}

// Note [Conv epilogues on cuDNN]
// _conv2d_epilogue(conv2d's arguments, activation) = activation(conv2d(...)), what tessera::compile
// fuses conv2d -> relu / gelu into (Note [Linear epilogues]). With a bias and relu it is one
// cudnnConvolutionBiasActivationForward (relu(conv(x) + bias), NaN propagated); where cuDNN refuses
// that call (logged once) and for the GELUs: the convolution, then the bias add and the activation
// as elementwise passes.
void conv2d_epilogue_kernel(const KernelCall& call) {
  conv2d_with<op::_conv2d_epilogue::tensor, op::_conv2d_epilogue::attr, true>(call);
}

// Note [conv_transpose2d on cuDNN]
// conv_transpose2d(input, weight [C_in, C_out / groups, kh, kw]) is the backward-data pass of the
// convolution that maps its output to its input (plan_conv_transpose, conv_plan.h): cuDNN's
// cudnnConvolutionBackwardData with that convolution's descriptors, the weight as it lies, in the
// output's memory format, then the bias as conv2d adds it. output_padding only makes the output
// larger; cuDNN derives the input size from the output's, which holds while output_padding is below
// the stride (the rest goes to the CPU fallback). Same algorithm cache, math and fallback rules as
// Note [conv2d on cuDNN].
void conv_transpose2d_kernel(const KernelCall& call) {
  using T = op::conv_transpose2d_input::tensor;
  using A = op::conv_transpose2d_input::attr;
  Launch l(call);
  const CudnnApi& api = cudnn_or_fallback(call);
  ConvCall c = conv_call<T, A>(call);
  DeviceTensor &x = c.x, &w = c.w, &out = c.out;
  int64_t output_padding[2];
  conv_pair(call, A::output_padding, 0, output_padding);
  ConvPlan plan;
  std::string why;
  if (!plan_conv_transpose(x.geometry(), w.geometry(), out.geometry(), c.pad, c.stride, output_padding,
                           c.dilation, c.groups, &plan, &why))
    unimplemented(call, why);
  if (out.numel() == 0) return;
  const std::optional<DeviceTensor> bias = channel_bias(call, T::bias, plan.x[1], out.dtype, out.ndim());
  if (x.numel() == 0 || w.numel() == 0) unimplemented(call, "zero input channels");
  // cuDNN's x is the output here, its y the input (plan.copy_x / copy_y name cuDNN's roles).
  const DeviceTensor target = plan.copy_x ? conv_packed(call, l, out, plan.layout, false) : out;
  if (plan.copy_y) x = conv_packed(call, l, x, plan.layout, true);
  if (plan.copy_w) w = conv_packed(call, l, w, plan.layout, true);
  cudnn_convolution(call, l, api, plan, out.dtype, ConvPass::BackwardData, nullptr, w.data, x.data,
                    target.data, plan.copy_x);
  if (bias) add_into(call, l, target, *bias, plan.copy_x);
  if (plan.copy_x) device_copy(call, out, target, l.stream);
}

// One legacy cuDNN call that cuDNN may refuse before it queues anything (pooling, batch_norm): the
// descriptors it makes (destroyed with it), its first failure (later steps are skipped), the first
// refusal of its kind logged, the device's handle on the call's stream under cudnn_state's lock, and
// alpha = 1, beta = 0 in the type cuDNN reads them as (double for float64).
class CudnnCall {
 public:
  // Whether the path is on: the environment variable `env` turns it off with "0".
  static bool enabled(const char* env) {
    const char* mode = sdk::host_api() && sdk::host_api()->getenv ? sdk::host_api()->getenv(env) : nullptr;
    return !(mode && std::string(mode) == "0");
  }

  CudnnCall(const CudnnApi& api, const char* op, std::once_flag& logged) : api_(api), op_(op), logged_(logged) {}
  CudnnCall(const CudnnCall&) = delete;
  CudnnCall& operator=(const CudnnCall&) = delete;
  ~CudnnCall() {
    for (auto it = tensors_.rbegin(); it != tensors_.rend(); ++it) api_.destroy_tensor(*it);
  }

  bool ok() const { return status_ == CUDNN_STATUS_SUCCESS; }
  // Records `st` for `what` when it is the first failure; returns whether the call is still ok.
  bool check(cudnnStatus_t st, const char* what) {
    if (ok() && st != CUDNN_STATUS_SUCCESS) {
      status_ = st;
      what_ = what;
    }
    return ok();
  }
  // A 4-D tensor descriptor (null once the call failed).
  cudnnTensorDescriptor_t tensor(cudnnDataType_t type, const int dims[4], const int strides[4]) {
    cudnnTensorDescriptor_t d = nullptr;
    if (!ok() || !check(api_.create_tensor(&d), "cudnnCreateTensorDescriptor")) return nullptr;
    tensors_.push_back(d);
    check(api_.set_tensor_4d_ex(d, type, dims[0], dims[1], dims[2], dims[3], strides[0], strides[1], strides[2],
                                strides[3]),
          "a tensor descriptor");
    return d;
  }
  // The device's handle set to the call's stream; holds cudnn_state's mutex until the call ends.
  cudnnHandle_t handle(const Launch& l) {
    if (!ok()) return nullptr;
    CudnnState& state = cudnn_state();
    lock_ = std::unique_lock<std::mutex>(state.mutex);
    cudnnHandle_t& handle = state.handles[l.device];
    if (!handle && !check(api_.create(&handle), "cudnnCreate")) {
      handle = nullptr;
      return nullptr;
    }
    return check(api_.set_stream(handle, l.stream), "cudnnSetStream") ? handle : nullptr;
  }
  const void* alpha(bool f64) const { return f64 ? static_cast<const void*>(&one_d_) : &one_f_; }
  const void* beta(bool f64) const { return f64 ? static_cast<const void*>(&zero_d_) : &zero_f_; }
  // The failure as a refusal: logged once for the op, then false (the plugin's own path runs it).
  bool refused() {
    std::call_once(logged_, [&] {
      sdk::log(TESSERA_LOG_INFO, "cuda",
               std::string("cuDNN refused a ") + op_ + " (" + what_ + ": " + api_.get_error_string(status_) +
                   "); such calls run on the plugin's own path");
    });
    return false;
  }

 private:
  const CudnnApi& api_;
  const char* op_;
  std::once_flag& logged_;
  cudnnStatus_t status_ = CUDNN_STATUS_SUCCESS;
  const char* what_ = "";
  std::vector<cudnnTensorDescriptor_t> tensors_;
  std::unique_lock<std::mutex> lock_;
  const float one_f_ = 1.0f, zero_f_ = 0.0f;
  const double one_d_ = 1.0, zero_d_ = 0.0;
};

#pragma GCC diagnostic pop

// ---------------------------------------------------------------- pooling

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cuDNN 9 marks its legacy pooling API

// Note [Pooling on cuDNN] (conv_plan.h): true when cuDNN ran the pooling; false, with nothing queued,
// when the plugin's kernel is to run it. TESSERA_CUDA_CUDNN_POOLING=0 turns the path off.
bool cudnn_pooling(const KernelCall& call, const Launch& l, const PoolParams& p) {
  if (!CudnnCall::enabled("TESSERA_CUDA_CUDNN_POOLING")) return false;
  const CudnnApi& api = cudnn_api();
  if (!api.loaded) return false;  // the device properties say why ("cudnn")
  const int64_t x[4] = {p.n, p.c, p.h, p.w}, y[4] = {p.n, p.c, p.oh, p.ow};
  const int64_t window[2] = {p.kh, p.kw}, padding[2] = {p.ph, p.pw}, stride[2] = {p.sh, p.sw}, dilation[2] = {p.dh, p.dw};
  CudnnPool plan;
  if (!plan_cudnn_pool(p.dtype, x, p.in_strides, y, p.out_strides, window, padding, stride, dilation, &plan).empty())
    return false;
  static std::once_flag logged;
  CudnnCall c(api, "pooling", logged);
  const cudnnDataType_t type = cudnn_type(p.dtype);
  const cudnnTensorDescriptor_t dx = c.tensor(type, plan.x, plan.x_strides), dy = c.tensor(type, plan.y, plan.y_strides);
  struct Pooling {
    const CudnnApi& api;
    cudnnPoolingDescriptor_t d = nullptr;
    ~Pooling() {
      if (d) api.destroy_pooling(d);
    }
  } pool{api};
  if (c.check(api.create_pooling(&pool.d), "cudnnCreatePoolingDescriptor"))
    c.check(api.set_pooling_2d(pool.d, p.is_max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                               CUDNN_PROPAGATE_NAN, plan.window[0], plan.window[1], plan.padding[0], plan.padding[1],
                               plan.stride[0], plan.stride[1]),
            "the pooling descriptor");
  const cudnnHandle_t handle = c.handle(l);
  const bool f64 = p.dtype == kDtF64;
  // cuDNN checks the problem before it launches: a failure here has queued nothing.
  if (!handle || !c.check(api.pooling_forward(handle, pool.d, c.alpha(f64), dx, p.in, c.beta(f64), dy, p.out),
                          "cudnnPoolingForward"))
    return c.refused();
  t_queued = true;
  g_kernel_launches.fetch_add(1, std::memory_order_relaxed);
  g_cudnn_poolings.fetch_add(1, std::memory_order_relaxed);
  (void)call;
  return true;
}

#pragma GCC diagnostic pop

// max_pool2d and avg_pool2d (PoolParams in launch.h). Attributes as the CPU kernel reads them: an
// empty stride is the kernel size; what it refuses (non-positive sizes, padding above half the
// kernel, an output of another shape) goes to the CPU fallback, which reports it. Floating dtypes go
// to cuDNN first (Note [Pooling on cuDNN]).
template <bool kMax>
void pool2d_kernel(const KernelCall& call) {
  using A = op::max_pool2d::attr;
  static_assert(op::avg_pool2d::attr::kernel_size == int(A::kernel_size) && op::avg_pool2d::attr::stride == int(A::stride) &&
                op::avg_pool2d::attr::padding == int(A::padding) &&
                op::avg_pool2d::tensor::self == int(op::max_pool2d::tensor::self));
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(op::max_pool2d::tensor::self), "self");
  DeviceTensor out = view_of(call, call.output(0), "output");
  if (!elementwise_dtype(x.dtype) || out.dtype != x.dtype || (!kMax && !elementwise_float(x.dtype) && x.dtype != kDtI64))
    unimplemented(call, std::string("dtype ") + dtype_str(x.dtype));
  if ((x.ndim() != 3 && x.ndim() != 4) || out.ndim() != x.ndim()) unimplemented(call, "input rank");
  auto pair = [&](int attr, const int64_t* fallback, int64_t v[2]) {
    int count = 0;
    const int64_t* q = call.num_attrs() > attr ? call.attr_ints(attr, &count) : nullptr;
    v[0] = count > 0 ? q[0] : fallback[0];
    v[1] = count > 1 ? q[1] : (count == 1 ? q[0] : fallback[1]);
  };
  const int64_t zero[2] = {0, 0}, one[2] = {1, 1};
  int64_t k[2], s[2], pad[2], d[2] = {1, 1};
  pair(A::kernel_size, zero, k);
  pair(A::stride, k, s);
  pair(A::padding, zero, pad);
  if (kMax) pair(A::dilation, one, d);
  for (int i = 0; i < 2; ++i)
    if (k[i] <= 0 || s[i] <= 0 || d[i] <= 0 || pad[i] < 0 || 2 * pad[i] > k[i]) unimplemented(call, "pooling arguments");
  auto as4 = [](DeviceTensor& t) {
    if (t.ndim() == 3) {
      t.sizes.insert(t.sizes.begin(), 1);
      t.strides.insert(t.strides.begin(), 0);
    }
  };
  as4(x);
  as4(out);
  PoolParams p;
  p.in = x.data;
  p.out = out.data;
  p.dtype = x.dtype;
  p.is_max = kMax;
  p.n = x.sizes[0], p.c = x.sizes[1], p.h = x.sizes[2], p.w = x.sizes[3];
  p.kh = k[0], p.kw = k[1], p.sh = s[0], p.sw = s[1], p.ph = pad[0], p.pw = pad[1], p.dh = d[0], p.dw = d[1];
  p.oh = (p.h + 2 * p.ph - p.dh * (p.kh - 1) - 1) / p.sh + 1;
  p.ow = (p.w + 2 * p.pw - p.dw * (p.kw - 1) - 1) / p.sw + 1;
  if (out.sizes[0] != p.n || out.sizes[1] != p.c || out.sizes[2] != p.oh || out.sizes[3] != p.ow)
    unimplemented(call, "output shape");
  for (int i = 0; i < 4; ++i) {
    p.in_strides[i] = x.strides[size_t(i)];
    p.out_strides[i] = out.strides[size_t(i)];
  }
  p.channels_inner = out.strides[1] == 1 && p.c > 1;
  if (cudnn_pooling(call, l, p)) return;
  check_launch(call, launch_pool2d(p, l.stream));
}

// ---------------------------------------------------------------- attention

// Defined after select_into (below): runs the call on cuDNN when it takes it (Note [SDPA on cuDNN]).
bool cudnn_attention(const KernelCall& call, const Launch& l, const AttentionParams& p);

void sdpa_kernel(const KernelCall& call) {
  Launch l(call);
  using T = op::scaled_dot_product_attention::tensor;
  DeviceTensor q = view_of(call, call.input(T::query), "query");
  DeviceTensor k = view_of(call, call.input(T::key), "key");
  DeviceTensor v = view_of(call, call.input(T::value), "value");
  DeviceTensor out = view_of(call, call.output(0), "output");
  using A = op::scaled_dot_product_attention::attr;
  const bool causal = call.num_attrs() > A::is_causal && call.attr(A::is_causal).kind == TESSERA_VALUE_BOOL &&
                      call.attr_bool(A::is_causal);
  std::optional<double> scale;
  if (call.num_attrs() > A::scale && call.attr(A::scale).kind == TESSERA_VALUE_DOUBLE)
    scale = call.attr_double(A::scale);
  const int nd = out.ndim();
  if (nd < 2 || nd > 4 || q.ndim() > 4 || k.ndim() > 4 || v.ndim() > 4) unimplemented(call, "rank above 4");
  // Leading dims up to [batch, heads]: missing ones are size 1 (stride 0); a 3-D tensor is [batch, L, E].
  auto as4 = [](DeviceTensor& t) {
    if (t.ndim() == 3) {
      t.sizes.insert(t.sizes.begin() + 1, 1);
      t.strides.insert(t.strides.begin() + 1, 0);
    }
    while (t.ndim() < 4) {
      t.sizes.insert(t.sizes.begin(), 1);
      t.strides.insert(t.strides.begin(), 0);
    }
  };
  if (q.ndim() != nd || k.ndim() != nd || v.ndim() != nd) unimplemented(call, "operands of different ranks");
  as4(q);
  as4(k);
  as4(v);
  as4(out);
  const int32_t dtype = q.dtype;
  const int64_t d = q.sizes[3], dv = v.sizes[3];
  if (k.dtype != dtype || v.dtype != dtype || out.dtype != dtype) unimplemented(call, "mixed dtypes");
  if (k.sizes[3] != d || out.sizes[3] != dv) unimplemented(call, "head dims that do not match");
  // Note [CUDA flash attention] for float16/bfloat16 at head dims 64 and 128, else Note [CUDA
  // attention, a warp per query row].
  const bool flash = attention_supported(dtype, d) && dv == d;
  if (!flash && !attention_rows_supported(dtype, d, dv))
    unimplemented(call, std::string("dtype ") + dtype_str(dtype) + " with head dims " + std::to_string(d) + " and " +
                            std::to_string(dv) + " (the CUDA kernels take head dims up to 256)");
  // Batch and head dims broadcast (stride 0) to the output's.
  for (DeviceTensor* t : {&q, &k, &v}) {
    for (int i = 0; i < 2; ++i) {
      if (t->sizes[size_t(i)] == out.sizes[size_t(i)] && t->sizes[size_t(i)] != 1) continue;
      if (t->sizes[size_t(i)] != 1) unimplemented(call, "batch or head dims that do not broadcast");
      t->strides[size_t(i)] = 0;
    }
  }
  if (k.sizes[2] != v.sizes[2] || q.sizes[2] != out.sizes[2]) unimplemented(call, "sequence lengths differ");
  if (q.strides[3] != 1 && q.sizes[3] != 1) q = materialize(call, q, dtype, true, l);
  if (k.strides[3] != 1 && k.sizes[3] != 1) k = materialize(call, k, dtype, true, l);
  if (v.strides[3] != 1 && v.sizes[3] != 1) v = materialize(call, v, dtype, true, l);
  if (out.strides[3] != 1 && out.sizes[3] != 1) unimplemented(call, "output with a non-unit last stride");
  AttentionParams p;
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.out = out.data;
  p.dtype = dtype;
  p.batch = out.sizes[0];
  p.heads = out.sizes[1];
  p.len_q = q.sizes[2];
  p.len_k = k.sizes[2];
  p.head_dim = d;
  p.value_dim = dv;
  for (int i = 0; i < 3; ++i) {
    p.q_strides[i] = q.strides[size_t(i)];
    p.k_strides[i] = k.strides[size_t(i)];
    p.v_strides[i] = v.strides[size_t(i)];
    p.out_strides[i] = out.strides[size_t(i)];
  }
  p.scale_exact = scale ? *scale : 1.0 / std::sqrt(double(d));
  p.scale = float(p.scale_exact);
  p.causal = causal;
  p.tensor_cores = !env_is_one("TESSERA_CUDA_FLASH_SIMT");
  uint32_t grid = 0;
  int64_t rows = 0;
  if (__builtin_mul_overflow(p.batch * p.heads, p.len_q, &rows)) unimplemented(call, "too many query rows");
  if (flash && !plan_attention_grid(p.batch * p.heads, p.len_q, attention_rows_per_block(p.tensor_cores), &p.q_blocks, &grid))
    unimplemented(call, "more than 2^31 - 1 blocks of query rows");
  auto launch = [&] { return flash ? launch_attention(p, l.stream) : launch_attention_rows(p, l.stream); };
  if (out.numel() == 0) return;
  if (p.len_k == 0) return fill_with(call, l, out, 0);  // no key: the weighted sum is empty, zeros like the CPU
  if (call.num_inputs() > T::attn_mask && call.input(T::attn_mask).defined()) {
    DeviceTensor mask = view_of(call, call.input(T::attn_mask), "attn_mask");
    if (mask.dtype != kDtBool && mask.dtype != dtype && mask.dtype != kDtF32) unimplemented(call, "mask dtype");
    if (mask.ndim() > nd) unimplemented(call, "mask rank");
    if (nd == 3 && mask.ndim() == 3) {  // [B, Lq, Lk] against the 4-D view [B, 1, Lq, Lk]
      mask.sizes.insert(mask.sizes.begin() + 1, 1);
      mask.strides.insert(mask.strides.begin() + 1, 0);
    }
    if (nd == 2 && mask.ndim() == 2) {  // [Lq, Lk]
      mask.sizes.insert(mask.sizes.begin(), 2, 1);
      mask.strides.insert(mask.strides.begin(), 2, 0);
    }
    const int64_t full[4] = {p.batch, p.heads, p.len_q, p.len_k};
    for (int i = 0; i < 4; ++i) {
      const int mi = i - (4 - mask.ndim());
      if (mi < 0) continue;
      if (mask.sizes[size_t(mi)] == full[i]) {
        p.mask_strides[i] = mask.sizes[size_t(mi)] == 1 ? 0 : mask.strides[size_t(mi)];
      } else if (mask.sizes[size_t(mi)] != 1) {
        unimplemented(call, "mask does not broadcast to [batch, heads, len_q, len_k]");
      }
    }
    p.mask = mask.data;
    p.mask_dtype = mask.dtype;
  }
  if (cudnn_attention(call, l, p)) return;
  check_launch(call, launch());
}

// ---------------------------------------------------------------- where, logical ops, cat, stack, arange

// One operand of a selection: a tensor on the device in the output's dtype, or a number passed by
// value as the element bits of that dtype.
struct Selected {
  DeviceTensor t;
  bool value = false;
  uint64_t bits = 0;
};
Selected number_operand(uint64_t bits) { return Selected{DeviceTensor{}, true, bits}; }

// out = cond ? a : b through launch_where. into_temporary: out is the call's own temporary.
void select_into(const KernelCall& call, const Launch& l, const DeviceTensor& out, const DeviceTensor& cond, Selected a,
                 Selected b, bool into_temporary = false) {
  if (a.value) a.t.dtype = out.dtype;  // 0-dim operands that are never read
  if (b.value) b.t.dtype = out.dtype;
  IterShape shape;
  Operand ops[4] = {out.operand(), cond.operand(), a.t.operand(), b.t.operand()};
  const Geometry ins[3] = {cond.geometry(), a.t.geometry(), b.t.geometry()};
  if (!plan_elementwise(out.geometry(), ins, 3, &shape, ops)) unimplemented(call, "operand layout");
  const uint32_t value_mask = (a.value ? 2u : 0u) | (b.value ? 4u : 0u);
  check_launch(call, launch_where(shape, ops[0], ops[1], ops[2], ops[3], value_mask, a.bits, b.bits, l.stream),
               into_temporary);
}

// Note [SDPA on cuDNN] (cudnn_attention.h): true when cuDNN ran the call; false, with nothing
// queued, when the plugin's own kernels are to run it. TESSERA_CUDA_CUDNN_ATTENTION: "0" turns the
// path off; "masks" also sends masked attention to cuDNN, which is off by default until a GPU run
// has checked that cuDNN gives a fully masked row 0 as PyTorch does (docs/semantics.md).
bool cudnn_attention(const KernelCall& call, const Launch& l, const AttentionParams& p) {
  if (p.dtype != kDtF16 && p.dtype != kDtBF16) return false;
  const char* mode = sdk::host_api() && sdk::host_api()->getenv
                         ? sdk::host_api()->getenv("TESSERA_CUDA_CUDNN_ATTENTION")
                         : nullptr;
  if (mode && std::strcmp(mode, "0") == 0) return false;
  const CudnnApi& api = cudnn_api();
  if (!api.loaded || !cudnn_attention_built()) {
    static std::once_flag logged;
    std::call_once(logged, [&] {
      sdk::log(TESSERA_LOG_INFO, "cuda",
               "SDPA runs on the plugin's kernels: " +
                   (api.loaded ? validate_cudnn_sdpa(SdpaProblem{}) : api.error));
    });
    return false;
  }
  const bool masks = mode && std::strcmp(mode, "masks") == 0;
  if (p.mask && !masks) return false;
  // A float32 mask next to half queries is added in float32 (PyTorch): rounding it to the inputs'
  // dtype for cuDNN would change the result (64 + x loses x in bfloat16).
  if (p.mask && p.mask_dtype != kDtBool && p.mask_dtype != p.dtype) return false;
  SdpaProblem s;
  s.dtype = p.dtype;
  s.batch = p.batch;
  s.heads = p.heads;
  s.len_q = p.len_q;
  s.len_k = p.len_k;
  s.head_dim = p.head_dim;
  s.value_dim = p.value_dim;
  for (int i = 0; i < 3; ++i) {
    s.q_strides[i] = p.q_strides[i];
    s.k_strides[i] = p.k_strides[i];
    s.v_strides[i] = p.v_strides[i];
    s.o_strides[i] = p.out_strides[i];
  }
  s.q_strides[3] = s.k_strides[3] = s.v_strides[3] = s.o_strides[3] = 1;
  s.causal = p.causal;
  s.scale = p.scale_exact;
  DeviceTensor mask;
  if (p.mask) {
    const int64_t full[4] = {p.batch, p.heads, p.len_q, p.len_k};
    mask.data = const_cast<void*>(p.mask);
    mask.dtype = p.mask_dtype;
    for (int i = 0; i < 4; ++i) {
      mask.sizes.push_back(p.mask_strides[i] == 0 ? 1 : full[i]);
      mask.strides.push_back(p.mask_strides[i]);
    }
    s.has_bias = true;
    for (int i = 0; i < 4; ++i) s.bias_sizes[i] = mask.sizes[size_t(i)];
    const std::vector<int64_t> packed = contiguous_strides(mask.sizes);
    for (int i = 0; i < 4; ++i)
      s.bias_strides[i] = p.mask_dtype == p.dtype ? p.mask_strides[i] : packed[size_t(i)];
  }
  static std::once_flag refusal_logged;
  if (const std::string why = cudnn_sdpa_refusal(s, p.q, p.k, p.v, nullptr, p.out); !why.empty()) {
    std::call_once(refusal_logged,
                   [&] { sdk::log(TESSERA_LOG_INFO, "cuda", "SDPA not on cuDNN (logged once): " + why); });
    return false;
  }
  if (p.mask && p.mask_dtype == kDtBool) {  // the additive mask of the inputs' dtype: 0 keeps, -inf removes
    DeviceTensor additive = temporary(l, p.dtype, mask.sizes);
    const uint64_t zero = 0, minus_inf = p.dtype == kDtF16 ? 0xfc00u : 0xff80u;
    select_into(call, l, additive, mask, number_operand(zero), number_operand(minus_inf), true);
    mask = additive;
  }
  CudnnState& st = cudnn_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  cudnnHandle_t& handle = st.handles[l.device];
  if (!handle && api.create(&handle) != CUDNN_STATUS_SUCCESS) {
    handle = nullptr;
    return false;
  }
  if (api.set_stream(handle, l.stream) != CUDNN_STATUS_SUCCESS) return false;
  const std::string error = run_cudnn_sdpa(handle, l.device, l.stream, s, p.q, p.k, p.v, mask.data, p.out);
  if (!error.empty()) {
    static std::once_flag failed_logged;
    std::call_once(failed_logged, [&] {
      sdk::log(TESSERA_LOG_WARNING, "cuda",
               "SDPA falls back to the plugin's kernels (logged once): " + error);
    });
    return false;
  }
  return true;
}

// where(condition, self, other): self and other converted to the output's dtype (the promotion the
// dispatcher computed), a number next to them (a 0-dim CPU tensor) passed by value in the output's
// storage format (Note [Wrapped numbers on the GPU]), the selection a copy of element bits.
void where_kernel(const KernelCall& call) {
  using W = op::where_self;
  Launch l(call);
  DeviceTensor out = view_of(call, call.output(0), "output");
  DeviceTensor cond = view_of(call, call.input(W::tensor::condition), "condition");
  if (cond.dtype != kDtBool) unimplemented(call, std::string("condition of dtype ") + dtype_str(cond.dtype));
  if (out.dtype > kDtF64) unimplemented(call, "output dtype");
  Selected ab[2];
  const TensorView views[2] = {call.input(W::tensor::self), call.input(W::tensor::other)};
  for (int k = 0; k < 2; ++k) {
    if (is_host_scalar(views[k])) ab[k] = number_operand(number_bits(host_number(call, views[k]), out.dtype));
    else ab[k].t = view_of(call, views[k], k == 0 ? "self" : "other");
  }
  // Converted copies are the call's own temporaries (Note [No CPU fallback after queued work]).
  for (Selected& s : ab)
    if (!s.value) s.t = materialize(call, s.t, out.dtype, false, l);
  select_into(call, l, out, cond, ab[0], ab[1]);
}

// logical_and / or / xor / not: the operands' truth values (a conversion to bool: nonzero is true,
// NaN too, as in PyTorch) selected by the where kernel: and = a ? b : false, or = a ? true : b,
// not = a ? false : true, xor = a ? (not b) : b.
enum class LogicalOp { And, Or, Xor, Not };
static_assert(op::logical_or::tensor::other == int(op::logical_and::tensor::other) &&
              op::logical_xor::tensor::other == int(op::logical_and::tensor::other) &&
              op::logical_not::tensor::self == int(op::logical_and::tensor::self));
template <LogicalOp kOp>
void logical_kernel(const KernelCall& call) {
  Launch l(call);
  DeviceTensor out = view_of(call, call.output(0), "output");
  if (out.dtype != kDtBool) unimplemented(call, "an output that is not bool");
  DeviceTensor a = view_of(call, call.input(op::logical_and::tensor::self), "self"), b;
  if (kOp != LogicalOp::Not) b = view_of(call, call.input(op::logical_and::tensor::other), "other");
  a = materialize(call, a, kDtBool, false, l);
  if (kOp != LogicalOp::Not) b = materialize(call, b, kDtBool, false, l);
  const Selected yes = number_operand(1), no = number_operand(0);
  switch (kOp) {
    case LogicalOp::And: return select_into(call, l, out, a, Selected{b}, no);
    case LogicalOp::Or: return select_into(call, l, out, a, yes, Selected{b});
    case LogicalOp::Not: return select_into(call, l, out, a, no, yes);
    case LogicalOp::Xor: {
      const DeviceTensor not_b = temporary(l, kDtBool, b.sizes);
      select_into(call, l, not_b, b, no, yes, /*into_temporary=*/true);
      return select_into(call, l, out, a, Selected{not_b}, Selected{b});
    }
  }
}

// isnan: x != x by the comparison kernel for floating dtypes; false everywhere for the others.
void isnan_kernel(const KernelCall& call) {
  Launch l(call);
  DeviceTensor out = view_of(call, call.output(0), "output");
  DeviceTensor x = view_of(call, call.input(op::isnan::tensor::self), "self");
  if (out.dtype != kDtBool) unimplemented(call, "an output that is not bool");
  IterShape shape;
  if (!elementwise_float(x.dtype)) return fill_with(call, l, out, 0);
  Operand ops[3] = {out.operand(), x.operand(), x.operand()};
  const Geometry ins[2] = {x.geometry(), x.geometry()};
  if (!plan_elementwise(out.geometry(), ins, 2, &shape, ops)) unimplemented(call, "operand layout");
  const ComputeScalar none, one = to_compute_scalar(integral_number(1), x.dtype);
  check_launch(call, launch_binary(BinaryOp::Ne, x.dtype, shape, ops[0], ops[1], ops[2], 0, none, one,
                                   is_dense(shape, ops, 3), l.stream));
}

// cat and stack: one device copy (converting the dtype where an input's differs) of each input into
// its slice of the output (plan_concat in tensor_iter.h). Every input is checked before the first
// copy is queued.
void concat_into(const KernelCall& call, bool stack) {
  Launch l(call);
  DeviceTensor out = view_of(call, call.output(0), "output");
  const int attr_dim = stack ? int(op::stack::attr::dim) : int(op::cat::attr::dim);
  const int64_t given = call.num_attrs() > attr_dim ? call.attr_int(attr_dim) : 0;
  const int64_t rank = out.ndim();
  const int dim = wrapped_dim(call, given, rank);
  std::vector<DeviceTensor> parts;
  std::vector<int64_t> lengths;
  for (int i = 0; i < call.num_inputs(); ++i) {
    const TensorView v = call.input(i);
    if (!v.defined()) unimplemented(call, "an undefined input");
    if (!stack && v.numel() == 0 && v.ndim() != rank) continue;  // the legacy 1-D empty tensor
    DeviceTensor t = view_of(call, v, "an input");
    if (t.ndim() != (stack ? rank - 1 : rank)) unimplemented(call, "an input's rank");
    lengths.push_back(stack ? 1 : t.sizes[size_t(dim)]);
    parts.push_back(std::move(t));
  }
  std::vector<int64_t> offsets(parts.size());
  if (!plan_concat(out.geometry(), dim, lengths.data(), int(parts.size()), offsets.data()))
    unimplemented(call, "inputs that do not fill the output along the dim");
  const size_t item = sdk::dtype_size(out.dtype);
  for (size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].numel() == 0) continue;
    DeviceTensor slice;
    slice.dtype = out.dtype;
    slice.data = static_cast<char*>(out.data) + offsets[k] * int64_t(item);
    slice.sizes = parts[k].sizes;
    slice.strides = out.strides;
    if (stack) slice.strides.erase(slice.strides.begin() + dim);
    device_copy(call, slice, parts[k], l.stream);
  }
}
void cat_kernel(const KernelCall& call) { concat_into(call, false); }
void stack_kernel(const KernelCall& call) { concat_into(call, true); }

void arange_kernel(const KernelCall& call) {
  using A = op::arange::attr;
  Launch l(call);
  DeviceTensor out = view_of(call, call.output(0), "output");
  if (out.ndim() != 1) unimplemented(call, "an output that is not 1-D");
  if (out.dtype == kDtBool || out.dtype > kDtF64) unimplemented(call, std::string("dtype ") + dtype_str(out.dtype));
  if (call.num_attrs() <= A::step) unimplemented(call, "start, end and step attributes");
  check_launch(call, launch_arange(out.data, out.dtype, out.sizes[0], out.strides[0], call.attr_double(A::start),
                                   call.attr_double(A::step), call.attr_int(A::start), call.attr_int(A::step),
                                   l.stream));
}

// ---------------------------------------------------------------- index_select, embedding, gather

// Note [Index errors on the GPU]
// An index out of range must give the CPU's clear error and leave the process working, which a
// device-side assert (PyTorch's way) does not: it leaves the CUDA context unusable. The kernel
// writes zero bits for a bad index and records it in a two-int64 error slot; the host copies the
// slot back once the launch has run (a synchronisation of the stream: the price of the check, one
// round trip per call) and throws INVALID_ARGUMENT naming the index, as the CPU kernel does. The
// output is the call's fresh tensor, so nothing the caller holds has been written.
// out = src indexed along dim by idx read at index_strides (one per output dim), the element bits
// copied; then the check of Note [Index errors on the GPU]. out and src have the same dtype and rank.
void check_index_slot(const KernelCall& call, const Launch& l, const int64_t* slot, const char* what, int64_t dim_size) {
  int64_t error[2] = {0, 0};
  check_enqueue(call, cudaMemcpyAsync(error, slot, sizeof(error), cudaMemcpyDeviceToHost, l.stream),
                "cudaMemcpyAsync of the index check", /*into_temporary=*/true);
  check_cuda(cudaStreamSynchronize(l.stream), std::string(what) + " on cuda: synchronising for the index check");
  if (error[0] != 0)
    throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, std::string(what) + ": index " + std::to_string(error[1]) +
                                                          " is out of bounds for a dimension of size " +
                                                          std::to_string(dim_size));
}

// `trusted`: the plugin made the indices (flip's reversed range, pad's tables), so no stream
// synchronisation reads the error slot back (Note [Index errors on the GPU]).
void run_index_select(const KernelCall& call, const Launch& l, const DeviceTensor& out, const DeviceTensor& src,
                      int dim, const DeviceTensor& idx, const std::vector<int64_t>& index_strides, const char* what,
                      bool trusted = false) {
  IndexSelectParams p;
  p.ndim = int32_t(src.ndim());
  p.dim = dim;
  p.itemsize = int32_t(sdk::dtype_size(out.dtype));
  p.index_dtype = idx.dtype;
  p.numel = out.numel();
  p.src_dim_size = src.sizes[size_t(dim)];
  for (int d = 0; d < src.ndim(); ++d) {
    p.sizes[d] = out.sizes[size_t(d)];
    p.out_strides[d] = out.strides[size_t(d)];
    p.src_strides[d] = src.strides[size_t(d)];
    p.index_strides[d] = index_strides[size_t(d)];
  }
  p.out = out.data;
  p.src = src.data;
  p.index = idx.data;
  DeviceBuffer slot(l.device, 2 * sizeof(int64_t), l.stream);
  p.error = static_cast<int64_t*>(slot.get());
  check_launch(call, launch_index_select(p, l.stream));
  if (!trusted) check_index_slot(call, l, p.error, what, p.src_dim_size);
}

bool index_dtype(int32_t dt) { return dt == kDtI64 || dt == kDtI32; }

// The operands of index_select and gather (output, self, index) and the dim they index, checked
// before anything is queued.
struct IndexedOperands {
  DeviceTensor out, src, idx;
  int dim = 0;
};
IndexedOperands indexed_operands(const KernelCall& call, int self_at, int index_at, int dim_attr) {
  IndexedOperands o{view_of(call, call.output(0), "output"), view_of(call, call.input(self_at), "self"),
                    view_of(call, call.input(index_at), "index")};
  if (!index_dtype(o.idx.dtype)) unimplemented(call, std::string("an index of dtype ") + dtype_str(o.idx.dtype));
  const int64_t rank = o.src.ndim(), given = call.attr_int(dim_attr);
  if (rank == 0 || rank > kMaxDims || o.out.ndim() != rank) unimplemented(call, "these ranks");
  o.dim = wrapped_dim(call, given, rank);
  return o;
}

void index_select_kernel(const KernelCall& call) {
  using I = op::index_select;
  Launch l(call);
  IndexedOperands o = indexed_operands(call, I::tensor::self, I::tensor::index, I::attr::dim);
  if (o.idx.ndim() > 1) unimplemented(call, "an index of rank above 1");
  for (int d = 0; d < o.src.ndim(); ++d)
    if (o.out.sizes[size_t(d)] != (d == o.dim ? o.idx.numel() : o.src.sizes[size_t(d)]))
      unimplemented(call, "the output's shape");
  o.src = materialize(call, o.src, o.out.dtype, false, l);  // the call's own temporary when the dtypes differ
  std::vector<int64_t> index_strides(size_t(o.src.ndim()), 0);  // the index moves along dim only
  index_strides[size_t(o.dim)] = o.idx.ndim() == 1 ? o.idx.strides[0] : 0;
  run_index_select(call, l, o.out, o.src, o.dim, o.idx, index_strides, "index_select");
}

// embedding(weight [rows, d], indices [...]) -> [..., d]: index_select of weight's rows by the
// indices flattened (made contiguous first when they are not) into the output seen as [n, d].
void embedding_kernel(const KernelCall& call) {
  using E = op::embedding;
  Launch l(call);
  DeviceTensor out = view_of(call, call.output(0), "output");
  DeviceTensor w = view_of(call, call.input(E::tensor::weight), "weight");
  DeviceTensor idx = view_of(call, call.input(E::tensor::indices), "indices");
  if (!index_dtype(idx.dtype)) unimplemented(call, std::string("indices of dtype ") + dtype_str(idx.dtype));
  if (w.ndim() != 2) unimplemented(call, "a weight that is not 2-D");
  if (!out.contiguous() || out.numel() != idx.numel() * w.sizes[1]) unimplemented(call, "the output's layout");
  idx = materialize(call, idx, idx.dtype, /*need_contiguous=*/true, l);
  w = materialize(call, w, out.dtype, false, l);
  DeviceTensor rows = out;
  rows.sizes = {idx.numel(), w.sizes[1]};
  rows.strides = {w.sizes[1], 1};
  run_index_select(call, l, rows, w, 0, idx, {1, 0}, "embedding");
}

// gather(self, dim, index): out[c] = self[c with c[dim] = index[c]]; index and output have one
// shape, self at least index's size in every other dim (the shape rule checked it).
void gather_kernel(const KernelCall& call) {
  using G = op::gather;
  Launch l(call);
  IndexedOperands o = indexed_operands(call, G::tensor::self, G::tensor::index, G::attr::dim);
  if (o.idx.ndim() != o.src.ndim() || o.out.sizes != o.idx.sizes) unimplemented(call, "these shapes");
  for (int d = 0; d < o.src.ndim(); ++d)
    if (d != o.dim && o.idx.sizes[size_t(d)] > o.src.sizes[size_t(d)]) unimplemented(call, "an index larger than self");
  o.src = materialize(call, o.src, o.out.dtype, false, l);
  run_index_select(call, l, o.out, o.src, o.dim, o.idx, o.idx.strides, "gather");
}

// scatter(self, dim, index, src): out = self, then out[c with c[dim] = index[c]] = src[c] for every
// position c of the index (index no larger than src anywhere, nor than self off dim: the CPU
// fallback reports other shapes). ScatterParams in launch.h. scatter_reduce folds instead (Note
// [scatter_reduce on the GPU] in index.cu).
using ScatterOp = op::scatter_src;
static_assert(op::scatter_reduce_two::tensor::self == int(ScatterOp::tensor::self) &&
              op::scatter_reduce_two::tensor::index == int(ScatterOp::tensor::index) &&
              op::scatter_reduce_two::tensor::src == int(ScatterOp::tensor::src) &&
              op::scatter_reduce_two::attr::dim == int(ScatterOp::attr::dim));
void run_scatter(const KernelCall& call, ScatterReduce reduce, bool include_self) {
  using S = ScatterOp;
  Launch l(call);
  IndexedOperands o = indexed_operands(call, S::tensor::self, S::tensor::index, S::attr::dim);
  DeviceTensor values = view_of(call, call.input(S::tensor::src), "src");
  const int rank = o.src.ndim();
  if (o.idx.ndim() != rank || values.ndim() != rank || o.out.sizes != o.src.sizes) unimplemented(call, "these shapes");
  for (int d = 0; d < rank; ++d)
    if (o.idx.sizes[size_t(d)] > values.sizes[size_t(d)] || (d != o.dim && o.idx.sizes[size_t(d)] > o.src.sizes[size_t(d)]))
      unimplemented(call, "an index larger than src or self");
  ScatterParams p;
  if (reduce != ScatterReduce::None) {
    if (!elementwise_dtype(o.out.dtype)) unimplemented(call, std::string("dtype ") + dtype_str(o.out.dtype));
    if (!o.out.contiguous()) unimplemented(call, "a non-contiguous output");
    if (o.idx.numel() > std::numeric_limits<int32_t>::max()) unimplemented(call, "more than 2^31 - 1 index elements");
    p.reduce = reduce;
    p.include_self = include_self;
    p.dtype = o.out.dtype;
    p.out_numel = o.out.numel();
  }
  values = materialize(call, values, o.out.dtype, false, l);
  std::optional<DeviceBuffer> counts;
  if (reduce == ScatterReduce::Mean && o.idx.numel() > 0) {
    counts.emplace(l.device, size_t(p.out_numel) * sizeof(int32_t), l.stream);
    p.counts = static_cast<int32_t*>(counts->get());
    IterShape shape;
    shape.ndim = 1;
    shape.numel = shape.sizes[0] = p.out_numel;
    Operand c;
    c.data = p.counts;
    c.dtype = kDtI32;
    c.strides[0] = 1;
    check_launch(call, launch_fill(shape, c, include_self ? 1u : 0u, l.stream), /*into_temporary=*/true);
  }
  device_copy(call, o.out, o.src, l.stream);
  IndexSelectParams& g = p.geometry;
  g.ndim = rank;
  g.dim = o.dim;
  g.itemsize = int32_t(sdk::dtype_size(o.out.dtype));
  g.index_dtype = o.idx.dtype;
  g.numel = o.idx.numel();
  g.src_dim_size = o.out.sizes[size_t(o.dim)];
  for (int d = 0; d < rank; ++d) {
    g.sizes[d] = o.idx.sizes[size_t(d)];
    g.out_strides[d] = values.strides[size_t(d)];  // read at each index position
    g.src_strides[d] = o.out.strides[size_t(d)];   // written, dim chosen by the index
    g.index_strides[d] = o.idx.strides[size_t(d)];
  }
  g.index = o.idx.data;
  p.out = o.out.data;
  p.values = values.data;
  DeviceBuffer slot(l.device, 2 * sizeof(int64_t), l.stream);
  g.error = static_cast<int64_t*>(slot.get());
  check_launch(call, launch_scatter(p, l.stream));
  check_index_slot(call, l, g.error, call.op_name(), g.src_dim_size);
}

void scatter_kernel(const KernelCall& call) { run_scatter(call, ScatterReduce::None, true); }

void scatter_reduce_kernel(const KernelCall& call) {
  using A = op::scatter_reduce_two::attr;
  const std::string r = call.attr_string(A::reduce);
  const ScatterReduce reduce = r == "sum"    ? ScatterReduce::Sum
                               : r == "prod" ? ScatterReduce::Prod
                               : r == "mean" ? ScatterReduce::Mean
                               : r == "amax" ? ScatterReduce::Max
                               : r == "amin" ? ScatterReduce::Min
                                             : ScatterReduce::None;
  if (reduce == ScatterReduce::None) unimplemented(call, "reduce '" + r + "'");  // the CPU reports it
  const bool include_self = call.num_attrs() <= A::include_self || call.attr(A::include_self).kind != TESSERA_VALUE_BOOL ||
                            call.attr_bool(A::include_self);
  run_scatter(call, reduce, include_self);
}

// flip(self, dims): one index_select per flipped dim (of size above 1) with the index size-1 .. 0
// made on the device (trusted: no index check), through temporaries; the last pass writes the output.
void flip_kernel(const KernelCall& call) {
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(op::flip::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (out.sizes != x.sizes || x.ndim() > kMaxDims) unimplemented(call, "these shapes");
  int count = 0;
  const int64_t* given = call.attr_ints(op::flip::attr::dims, &count);
  std::vector<int> dims;
  for (int i = 0; i < count; ++i) {
    const int d = wrapped_dim(call, given[i], std::max(x.ndim(), 1));
    if (x.ndim() > 0 && x.sizes[size_t(d)] > 1 && std::find(dims.begin(), dims.end(), d) == dims.end()) dims.push_back(d);
  }
  x = materialize(call, x, out.dtype, false, l);
  if (dims.empty() || out.numel() == 0) {
    device_copy(call, out, x, l.stream);
    return;
  }
  DeviceTensor src = x;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int d = dims[k];
    const int64_t size = src.sizes[size_t(d)];
    const DeviceTensor idx = temporary(l, kDtI64, {size});
    check_launch(call, launch_arange(idx.data, kDtI64, size, 1, double(size - 1), -1.0, size - 1, -1, l.stream),
                 /*into_temporary=*/true);
    const DeviceTensor dst = k + 1 == dims.size() ? out : temporary(l, out.dtype, out.sizes);
    std::vector<int64_t> index_strides(size_t(src.ndim()), 0);
    index_strides[size_t(d)] = 1;
    run_index_select(call, l, dst, src, d, idx, index_strides, "flip", /*trusted=*/true);
    src = dst;
  }
}

// out = a (op) b for two device tensors broadcast to out's shape, computed in out's dtype.
void binary_tensors_into(const KernelCall& call, const Launch& l, BinaryOp op, const DeviceTensor& out, DeviceTensor a,
                         DeviceTensor b) {
  a = materialize(call, a, out.dtype, false, l);
  b = materialize(call, b, out.dtype, false, l);
  IterShape shape;
  Operand ops[3] = {out.operand(), a.operand(), b.operand()};
  const Geometry ins[2] = {a.geometry(), b.geometry()};
  if (!plan_elementwise(out.geometry(), ins, 2, &shape, ops)) unimplemented(call, "operand layout");
  check_launch(call, launch_binary(op, out.dtype, shape, ops[0], ops[1], ops[2], 0, ComputeScalar{},
                                   to_compute_scalar(integral_number(1), out.dtype), is_dense(shape, ops, 3), l.stream));
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cuDNN 9 marks its legacy batch-norm API

// Note [batch_norm on cuDNN] (conv_plan.h): true when cuDNN ran it; false, with only the call's
// temporaries written, when the plugin's path is to run it. The [C] vectors as they lie.
bool cudnn_batch_norm(const KernelCall& call, const Launch& l, const DeviceTensor& x, const DeviceTensor& out,
                      const std::optional<DeviceTensor>& weight, const std::optional<DeviceTensor>& bias,
                      const DeviceTensor& mean, const DeviceTensor& var, double eps) {
  if (!CudnnCall::enabled("TESSERA_CUDA_CUDNN_BATCH_NORM")) return false;
  const CudnnApi& api = cudnn_api();
  if (!api.loaded) return false;  // the device properties say why ("cudnn")
  CudnnBatchNorm plan;
  if (!plan_cudnn_batch_norm(out.dtype, x.sizes, x.strides, out.strides, &plan).empty()) return false;
  // The statistics in float (double for float64), contiguous; an absent weight is ones, bias zeros.
  const int32_t pd = out.dtype == kDtF64 ? kDtF64 : kDtF32;
  const int64_t channels = x.sizes[1];
  auto vector = [&](const std::optional<DeviceTensor>& v, double absent) {
    if (v) return materialize(call, *v, pd, true, l);
    DeviceTensor t = temporary(l, pd, {channels});
    fill_with(call, l, t, number_bits(floating_number(absent), pd), /*into_temporary=*/true);
    return t;
  };
  const DeviceTensor w = vector(weight, 1.0), b = vector(bias, 0.0), m = vector(mean, 0.0), v = vector(var, 1.0);
  static std::once_flag logged;
  CudnnCall c(api, "batch_norm", logged);
  const cudnnDataType_t type = cudnn_type(out.dtype);
  const int bn[4] = {1, plan.x[1], 1, 1}, bn_strides[4] = {plan.x[1], 1, 1, 1};
  const cudnnTensorDescriptor_t dx = c.tensor(type, plan.x, plan.x_strides), dy = c.tensor(type, plan.x, plan.y_strides);
  const cudnnTensorDescriptor_t dbn = c.tensor(cudnn_type(pd), bn, bn_strides);
  const cudnnHandle_t handle = c.handle(l);
  const bool f64 = out.dtype == kDtF64;
  // cuDNN checks the problem before it launches: a failure here has queued nothing.
  if (!handle || !c.check(api.batch_norm_forward_inference(handle, CUDNN_BATCHNORM_SPATIAL, c.alpha(f64), c.beta(f64),
                                                           dx, x.data, dy, out.data, dbn, w.data, b.data, m.data,
                                                           v.data, eps),
                          "cudnnBatchNormalizationForwardInference"))
    return c.refused();
  t_queued = true;
  g_kernel_launches.fetch_add(1, std::memory_order_relaxed);
  g_cudnn_batch_norms.fetch_add(1, std::memory_order_relaxed);
  return true;
}

#pragma GCC diagnostic pop

// batch_norm in inference mode, as the CPU kernel: per channel scale = weight / sqrt(running_var +
// eps) and shift = bias - running_mean * scale, computed in double (an absent weight is 1, an
// absent bias 0), then y = x * scale + shift in fp32 (double for float64), the [C]
// vectors broadcast as [1, C, 1, ...]. training=True goes to the CPU, which refuses it too.
void batch_norm_kernel(const KernelCall& call) {
  using T = op::batch_norm::tensor;
  using A = op::batch_norm::attr;
  Launch l(call);
  if (call.attr_bool(A::training)) unimplemented(call, "training=True");
  const DeviceTensor x = view_of(call, call.input(T::input), "input");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (!elementwise_float(out.dtype) || x.ndim() < 2 || out.sizes != x.sizes) unimplemented(call, "these operands");
  const int64_t c = x.sizes[1];
  const double eps = call.attr_double(A::eps);
  auto channel_vector = [&](int at, const char* what) -> std::optional<DeviceTensor> {
    if (call.num_inputs() <= at || !call.input(at).defined()) return std::nullopt;
    DeviceTensor v = view_of(call, call.input(at), what);
    if (v.ndim() != 1 || v.sizes[0] != c) unimplemented(call, std::string(what) + " that is not [channels]");
    return v;
  };
  const auto given_weight = channel_vector(T::weight, "weight"), given_bias = channel_vector(T::bias, "bias");
  const auto given_mean = channel_vector(T::running_mean, "running_mean");
  const auto given_var = channel_vector(T::running_var, "running_var");
  if (out.numel() == 0) return;
  if (!given_mean || !given_var) unimplemented(call, "no running statistics");  // the dispatcher requires them
  if (cudnn_batch_norm(call, l, x, out, given_weight, given_bias, *given_mean, *given_var, eps)) return;
  auto in_double = [&](const std::optional<DeviceTensor>& v) -> std::optional<DeviceTensor> {
    if (!v) return std::nullopt;
    return materialize(call, *v, kDtF64, false, l);
  };
  const auto weight = in_double(given_weight), bias = in_double(given_bias);
  const auto mean = in_double(given_mean), var = in_double(given_var);
  auto number = [](double v) { return to_compute_scalar(floating_number(v), kDtF64); };
  // scale = weight / sqrt(var + eps) (1 / sqrt(...) without a weight); shift = bias - mean * scale.
  const DeviceTensor scale = temporary(l, kDtF64, {c}), shift = temporary(l, kDtF64, {c});
  binary_number_into(call, l, BinaryOp::Add, scale, *var, number(eps));
  unary_into(call, l, UnaryOp::Sqrt, scale, scale);
  if (weight) binary_tensors_into(call, l, BinaryOp::Div, scale, *weight, scale);
  else unary_into(call, l, UnaryOp::Reciprocal, scale, scale);
  binary_tensors_into(call, l, BinaryOp::Mul, shift, *mean, scale);
  if (bias) binary_tensors_into(call, l, BinaryOp::Sub, shift, *bias, shift);
  else unary_into(call, l, UnaryOp::Neg, shift, shift);
  // y = x * scale + shift in the compute type, the vectors seen as [1, C, 1, ...].
  const int32_t work = out.dtype == kDtF64 ? kDtF64 : kDtF32;
  auto broadcast = [&](const DeviceTensor& v) {
    DeviceTensor b = materialize(call, v, work, false, l);
    b.sizes.assign(size_t(x.ndim()), 1);
    b.strides.assign(size_t(x.ndim()), 0);
    b.sizes[1] = c;
    b.strides[1] = 1;
    return b;
  };
  const DeviceTensor y = work == out.dtype ? out : temporary(l, work, out.sizes);
  binary_tensors_into(call, l, BinaryOp::Mul, y, x, broadcast(scale));
  binary_tensors_into(call, l, BinaryOp::Add, y, y, broadcast(shift));
  if (y.data != out.data) device_copy(call, out, y, l.stream);
}

// group_norm(input, num_groups, weight, bias, eps): the layer_norm kernel over each (sample, group)
// row of the input made contiguous in fp32 (double for float64), then the per-channel weight and
// bias as [1, C, 1, ...] broadcasts; the CPU computes it all in double.
void group_norm_kernel(const KernelCall& call) {
  using T = op::group_norm::tensor;
  using A = op::group_norm::attr;
  Launch l(call);
  const DeviceTensor x = view_of(call, call.input(T::input), "input");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (!elementwise_float(out.dtype) || x.ndim() < 2 || out.sizes != x.sizes) unimplemented(call, "these operands");
  const int64_t n = x.sizes[0], c = x.sizes[1], groups = call.attr_int(A::num_groups);
  if (groups <= 0 || c % groups != 0) unimplemented(call, "channels not divisible into the groups");
  if (out.numel() == 0) return;
  const int64_t rows = n * groups, per_group = x.numel() / rows;
  if (rows > 0x7fffffff) unimplemented(call, "more than 2^31 - 1 groups");
  const int32_t work = out.dtype == kDtF64 ? kDtF64 : kDtF32;
  const DeviceTensor xw = materialize(call, x, work, true, l);
  const DeviceTensor y = work == out.dtype && out.contiguous() ? out : temporary(l, work, out.sizes);
  check_launch(call, launch_layer_norm(xw.data, nullptr, nullptr, y.data, work, rows, per_group, call.attr_double(A::eps),
                                       false, l.stream),
               y.data != out.data);
  auto per_channel = [&](int at, const char* what, BinaryOp op) {
    if (call.num_inputs() <= at || !call.input(at).defined()) return;
    DeviceTensor v = view_of(call, call.input(at), what);
    if (v.ndim() != 1 || v.sizes[0] != c) unimplemented(call, std::string(what) + " that is not [channels]");
    const int64_t stride = v.strides[0];
    v.sizes.assign(size_t(x.ndim()), 1);
    v.strides.assign(size_t(x.ndim()), 0);
    v.sizes[1] = c;
    v.strides[1] = stride;
    binary_tensors_into(call, l, op, y, y, v);
  };
  per_channel(T::weight, "weight", BinaryOp::Mul);
  per_channel(T::bias, "bias", BinaryOp::Add);
  if (y.data != out.data) device_copy(call, out, y, l.stream);
}

// A host table copied into a fresh temporary of the call (index tables, weights, parameters). From
// pageable memory cudaMemcpyAsync returns once `v` is staged, so `v` may go out of scope.
template <typename V>
DeviceTensor upload(const KernelCall& call, const Launch& l, const std::vector<V>& v, int32_t dtype) {
  const DeviceTensor d = temporary(l, dtype, {int64_t(v.size())});
  if (!v.empty())
    check_enqueue(call,
                  cudaMemcpyAsync(d.data, v.data(), v.size() * sizeof(V), cudaMemcpyHostToDevice, l.stream),
                  "cudaMemcpyAsync of a table", /*into_temporary=*/true);
  return d;
}

// A small tensor of the call's device read back to the host as `V` (converted to `dtype` first):
// one stream synchronisation (fake_quantize's parameters, _resize's scales).
template <typename V>
std::vector<V> read_back(const KernelCall& call, const Launch& l, const DeviceTensor& t, int32_t dtype) {
  const DeviceTensor c = materialize(call, t, dtype, true, l);
  std::vector<V> host(size_t(c.numel()));
  if (host.empty()) return host;
  check_enqueue(
      call, cudaMemcpyAsync(host.data(), c.data, host.size() * sizeof(V), cudaMemcpyDeviceToHost, l.stream),
      "cudaMemcpyAsync to the host", /*into_temporary=*/true);
  check_cuda(cudaStreamSynchronize(l.stream),
             std::string(call.op_name()) + " on cuda: reading parameters back");
  return host;
}

// pad(self, pad, mode, value), every dtype.
// - "constant": the output filled with the value (0 for None; converted to the dtype as the CPU
//   does), then the part of self that stays (negative pads crop) copied into its place.
// - "reflect", "replicate", "circular": one index_select per padded dim, whose index table
//   (tessera::pad_source, the CPU kernel's rule) is made on the host and copied to the device, through
//   temporaries; the last pass writes the output. A pad too large for its dim is an error naming it,
//   as on the CPU.
void pad_kernel(const KernelCall& call) {
  using A = op::pad::attr;
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(op::pad::tensor::self), "self");
  DeviceTensor out = view_of(call, call.output(0), "output");
  if (out.dtype != x.dtype || out.ndim() != x.ndim() || x.ndim() > kMaxDims) unimplemented(call, "these operands");
  const std::string mode =
      call.num_attrs() > A::mode && !call.attr_string(A::mode).empty() ? call.attr_string(A::mode) : "constant";
  int count = 0;
  const int64_t* pads = call.attr_ints(A::pad, &count);
  if (count % 2 != 0 || count / 2 > x.ndim()) unimplemented(call, "the pad list");
  if (mode != "constant") {
    const std::optional<tessera::PadMode> pm = tessera::pad_mode(mode);
    if (!pm) unimplemented(call, "pad mode '" + mode + "'");
    if (out.numel() == 0) return;
    DeviceTensor src = x;
    std::vector<int> dims;
    for (int k = 0; k < count / 2; ++k)
      if (pads[2 * k] != 0 || pads[2 * k + 1] != 0) dims.push_back(x.ndim() - 1 - k);
    if (dims.empty()) return device_copy(call, out, x, l.stream);
    for (size_t j = 0; j < dims.size(); ++j) {
      const int d = dims[j];
      const int k = x.ndim() - 1 - d;
      const int64_t n = x.sizes[size_t(d)], m = out.sizes[size_t(d)];
      std::vector<int64_t> table(static_cast<size_t>(m), 0);
      for (int64_t o = 0; o < m; ++o) {
        table[size_t(o)] = tessera::pad_source(o, pads[2 * k], pads[2 * k + 1], n, *pm);
        if (table[size_t(o)] < 0 || table[size_t(o)] >= n)
          throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                           "pad: padding too large for dimension " + std::to_string(d) + " (size " + std::to_string(n) +
                               ", mode " + mode + ")");
      }
      const DeviceTensor idx = upload(call, l, table, kDtI64);
      std::vector<int64_t> sizes = src.sizes;
      sizes[size_t(d)] = m;
      const DeviceTensor dst = j + 1 == dims.size() ? out : temporary(l, out.dtype, sizes);
      if (j + 1 == dims.size() && dst.sizes != sizes) unimplemented(call, "the output's shape");
      std::vector<int64_t> index_strides(size_t(src.ndim()), 0);
      index_strides[size_t(d)] = 1;
      run_index_select(call, l, dst, src, d, idx, index_strides, "pad", /*trusted=*/true);
      src = dst;
    }
    return;
  }
  const double value = call.num_attrs() > A::value && !call.attr_is_none(A::value) ? call.attr_double(A::value) : 0.0;
  IterShape shape;
  Operand o = out.operand();
  if (!plan_elementwise(out.geometry(), nullptr, 0, &shape, &o)) unimplemented(call, "output layout");
  if (out.numel() == 0) return;
  const size_t item = sdk::dtype_size(out.dtype);
  bool empty = false;
  for (int k = 0; k < count / 2; ++k) {
    const size_t d = size_t(x.ndim() - 1 - k);
    const int64_t lo = pads[2 * k], hi = pads[2 * k + 1];
    const int64_t extent = x.sizes[d] - std::max<int64_t>(-lo, 0) - std::max<int64_t>(-hi, 0);
    if (extent != out.sizes[d] - std::max<int64_t>(lo, 0) - std::max<int64_t>(hi, 0) && extent > 0)
      unimplemented(call, "the output's shape");
    if (extent <= 0) {
      empty = true;
      continue;
    }
    x.data = static_cast<char*>(x.data) + std::max<int64_t>(-lo, 0) * x.strides[d] * int64_t(item);
    out.data = static_cast<char*>(out.data) + std::max<int64_t>(lo, 0) * out.strides[d] * int64_t(item);
    x.sizes[d] = out.sizes[d] = extent;
  }
  if (!empty && x.sizes != out.sizes) unimplemented(call, "the output's shape");
  check_launch(call, launch_fill(shape, o, number_bits(floating_number(value), out.dtype), l.stream));
  if (!empty) device_copy(call, out, x, l.stream);
}

// ---------------------------------------------------------------- topk, _resize, fake_quantize

// Note [topk on the GPU]
// topk sorts every row (the (outer, inner) lines of dim) whole: each element becomes a 64-bit order
// key (topk_plan.h: by value, NaN above every number, -0 equal to +0; reversed for largest) with its
// index, the row is padded to a power of two with keys that sort last, and a bitonic network sorts
// (key, index) pairs (tiles of 2048 in shared memory, longer strides across tiles in global memory,
// launched per stage). Equal keys are ordered by index, so the first k pairs are exactly the CPU's
// partial sort (ties by ascending index), sorted=False included. The work is O(n log^2 n) per row
// whatever k is; PyTorch's radix select is faster for small k on long rows.
void topk_kernel(const KernelCall& call) {
  using At = op::topk::attr;
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(op::topk::tensor::self), "self");
  const DeviceTensor values = view_of(call, call.output(0), "values");
  const DeviceTensor indices = view_of(call, call.output(1), "indices");
  if (!elementwise_dtype(x.dtype) || values.dtype != x.dtype || indices.dtype != kDtI64)
    unimplemented(call, std::string("dtype ") + dtype_str(x.dtype));
  const int nd = x.ndim();
  const int dim = nd == 0 ? 0 : wrapped_dim(call, call.attr_int(At::dim), nd);
  const int64_t k = call.attr_int(At::k);
  const auto [outer, n, inner] = lanes_of(x.sizes, dim);
  if (k < 0 || k > n) unimplemented(call, "k out of range");
  if (values.numel() == 0) return;
  const int64_t padded = topk_padded(n);
  int64_t entries = 0, bytes = 0;
  if (padded == 0 || __builtin_mul_overflow(outer * inner, padded, &entries) ||
      __builtin_mul_overflow(entries, int64_t(sizeof(uint64_t) + sizeof(int64_t)), &bytes))
    unimplemented(call, "rows too long to sort");
  x = materialize(call, x, x.dtype, true, l);
  DeviceBuffer workspace(l.device, size_t(bytes), l.stream);
  const DeviceTensor vt = values.contiguous() ? values : temporary(l, values.dtype, values.sizes);
  const DeviceTensor it = indices.contiguous() ? indices : temporary(l, kDtI64, indices.sizes);
  TopkParams p;
  p.in = x.data;
  p.dtype = x.dtype;
  p.outer = outer;
  p.n = n;
  p.inner = inner;
  p.k = k;
  p.padded = padded;
  p.largest = call.attr_bool(At::largest);
  p.keys = static_cast<uint64_t*>(workspace.get());
  p.idx = reinterpret_cast<int64_t*>(p.keys + entries);
  p.values = vt.data;
  p.indices = static_cast<int64_t*>(it.data);
  check_launch(call, launch_topk(p, l.stream), vt.data != values.data && it.data != indices.data);
  if (vt.data != values.data) device_copy(call, values, vt, l.stream);
  if (it.data != indices.data) device_copy(call, indices, it, l.stream);
}

// Note [_resize on the GPU]
// _resize takes its taps from tessera/resize_taps.h, the rule the CPU kernel uses, one resized dim
// at a time (the weights of the dims multiply, so N 1-D passes are the N-d resize): nearest is an
// index_select per dim with the plugin's own (trusted) index table, exact for every dtype; linear
// and cubic run launch_resize_taps per dim in float32 (float64 for float64 data) with the weights and
// indices uploaded as tables, then one conversion into the output. `scales` on the device are read
// back (one synchronisation); the CPU kernel accumulates all dims at once in double, so the results
// agree within float32 rounding.
void resize_kernel(const KernelCall& call) {
  using A = op::_resize::attr;
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(op::_resize::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  int k = 0;
  call.attr_ints(A::size, &k);
  const int nd = x.ndim(), first = nd - k;
  if (out.dtype != x.dtype || out.ndim() != nd || k < 1 || k > 8 || k > nd ||
      !(elementwise_dtype(x.dtype) || x.dtype == kDtBool))
    unimplemented(call, "these operands");
  const std::string mode = call.attr_string(A::mode);
  const bool nearest = mode == "nearest" || mode.empty();
  if (!nearest && !elementwise_float(x.dtype))
    unimplemented(call, std::string("dtype ") + dtype_str(x.dtype));
  if (out.numel() == 0) return;
  std::vector<double> scales(size_t(k), 0.0);
  if (call.num_inputs() > op::_resize::tensor::scales && call.input(op::_resize::tensor::scales).defined()) {
    const DeviceTensor st = view_of(call, call.input(op::_resize::tensor::scales), "scales");
    if (st.numel() != k) unimplemented(call, "scales of another length");
    scales = read_back<double>(call, l, st, kDtF64);
  }
  const resize::Coord coord = resize::coord_mode(call.attr_string(A::coordinate_transformation_mode));
  const resize::Nearest nearest_mode = resize::nearest_mode(call.attr_string(A::nearest_mode));
  const double a = call.attr_double(A::cubic_coeff_a);
  const bool exclude_outside = call.attr_bool(A::exclude_outside);
  const int32_t compute = nearest ? x.dtype : (x.dtype == kDtF64 ? kDtF64 : kDtF32);
  DeviceTensor cur = nearest ? x : materialize(call, x, compute, true, l);
  for (int j = 0; j < k; ++j) {
    const int d = first + j;
    const int64_t n_in = x.sizes[size_t(d)], n_out = out.sizes[size_t(d)];
    double scale = scales[size_t(j)];
    if (scale == 0) scale = double(n_out) / double(n_in);
    if (!(scale > 0 && std::isfinite(scale)))
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, "_resize: scales must be positive and finite, got " +
                                                            std::to_string(scale) + " for resized dim " +
                                                            std::to_string(j));
    const resize::Taps t =
        resize::dim_taps(mode, coord, nearest_mode, n_in, n_out, scale, a, exclude_outside);
    std::vector<int64_t> sizes = cur.sizes;
    sizes[size_t(d)] = n_out;
    if (nearest) {
      const DeviceTensor idx = upload(call, l, t.index, kDtI64);
      const DeviceTensor dst = temporary(l, compute, sizes);
      std::vector<int64_t> index_strides(size_t(nd), 0);
      index_strides[size_t(d)] = 1;
      run_index_select(call, l, dst, cur, d, idx, index_strides, "_resize", /*trusted=*/true);
      cur = dst;
      continue;
    }
    ResizeTapsParams p;
    const DeviceTensor idx = upload(call, l, t.index, kDtI64), weight = upload(call, l, t.weight, kDtF64);
    const DeviceTensor dst = temporary(l, compute, sizes);
    p.in = cur.data;
    p.out = dst.data;
    p.dtype = compute;
    const Lanes ln = lanes_of(cur.sizes, d);
    p.outer = ln.outer;
    p.inner = ln.inner;
    p.n_in = n_in;
    p.n_out = n_out;
    p.taps = t.n;
    p.index = static_cast<const int64_t*>(idx.data);
    p.weight = static_cast<const double*>(weight.data);
    check_launch(call, launch_resize_taps(p, l.stream), /*into_temporary=*/true);
    cur = dst;
  }
  if (cur.sizes != out.sizes) unimplemented(call, "the output's shape");
  device_copy(call, out, cur, l.stream);
}

// fake_quantize_per_tensor_affine / _per_channel_affine (Note [Fake quantize]): the scale and zero
// point are read back and checked on the host as the CPU kernel checks them (one synchronisation),
// then one kernel applies fake_quantize_value (tessera/fake_quantize.h), the CPU's rule, bit for bit.
template <bool kPerChannel>
void fake_quantize_kernel(const KernelCall& call) {
  using PerTensor = op::fake_quantize_per_tensor_affine::attr;
  using PerChannel = op::fake_quantize_per_channel_affine::attr;
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(0), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (x.dtype != kDtF32 || out.dtype != kDtF32 || out.sizes != x.sizes) unimplemented(call, "these operands");
  const int64_t qmin = call.attr_int(kPerChannel ? int(PerChannel::quant_min) : int(PerTensor::quant_min));
  const int64_t qmax = call.attr_int(kPerChannel ? int(PerChannel::quant_max) : int(PerTensor::quant_max));
  const int axis = kPerChannel ? wrapped_dim(call, call.attr_int(PerChannel::axis), x.ndim()) : -1;
  const int64_t channels = axis < 0 ? 1 : x.sizes[size_t(axis)];
  const DeviceTensor s = view_of(call, call.input(1), "scale"),
                     z = view_of(call, call.input(2), "zero_point");
  if (s.numel() != channels || z.numel() != channels)
    unimplemented(call, "scale or zero_point of another length");
  const std::vector<float> scale = read_back<float>(call, l, s, kDtF32);
  const std::vector<int64_t> zero_point = read_back<int64_t>(call, l, z, kDtI64);
  std::vector<float> inv_scale(scale.size());
  for (size_t c = 0; c < scale.size(); ++c) {
    const std::string error =
        fake_quantize_param_error(scale[c], zero_point[c], int64_t(c), channels, qmin, qmax);
    if (!error.empty()) throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, error);
    inv_scale[c] = 1.0f / scale[c];
  }
  if (out.numel() == 0) return;
  const DeviceTensor ds = upload(call, l, scale, kDtF32), dinv = upload(call, l, inv_scale, kDtF32),
                     dz = upload(call, l, zero_point, kDtI64);
  x = materialize(call, x, kDtF32, true, l);
  const DeviceTensor target = out.contiguous() ? out : temporary(l, kDtF32, out.sizes);
  FakeQuantizeParams p;
  p.in = static_cast<const float*>(x.data);
  p.out = static_cast<float*>(target.data);
  p.numel = out.numel();
  if (axis >= 0) p.inner = lanes_of(x.sizes, axis).inner;
  p.channels = channels;
  p.quant_min = qmin;
  p.quant_max = qmax;
  p.scale = static_cast<const float*>(ds.data);
  p.inv_scale = static_cast<const float*>(dinv.data);
  p.zero_point = static_cast<const int64_t*>(dz.data);
  check_launch(call, launch_fake_quantize(p, l.stream), target.data != out.data);
  if (target.data != out.data) device_copy(call, out, target, l.stream);
}

// bitwise_not and sign on bool (Note [Bool operands on the GPU]): not is xor with 1 on the bytes,
// sign of a bool is the bool; other dtypes take the unary kernel.
void bitwise_not_kernel(const KernelCall& call) {
  if (call.output(0).dtype() != TESSERA_DTYPE_BOOL) return unary_kernel<UnaryOp::BitwiseNot>(call);
  Launch l(call);
  DeviceTensor x = view_of(call, call.input(Unary::tensor::self), "self");
  DeviceTensor out = view_of(call, call.output(0), "output");
  if (x.dtype != kDtBool) unimplemented(call, "a bool output of a non-bool input");
  x.dtype = out.dtype = kDtU8;
  binary_number_into(call, l, BinaryOp::BitXor, out, x, to_compute_scalar(integral_number(1), kDtU8));
}
void sign_kernel(const KernelCall& call) {
  if (call.output(0).dtype() != TESSERA_DTYPE_BOOL) return unary_kernel<UnaryOp::Sign>(call);
  Launch l(call);
  const DeviceTensor x = view_of(call, call.input(Unary::tensor::self), "self");
  const DeviceTensor out = view_of(call, call.output(0), "output");
  if (x.dtype != kDtBool) unimplemented(call, "a bool output of a non-bool input");
  device_copy(call, out, x, l.stream);
}

// ---------------------------------------------------------------- registration

constexpr uint64_t kFloat = TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT16) |
                            TESSERA_DTYPE_BIT(TESSERA_DTYPE_BFLOAT16);
constexpr uint64_t kHalfTypes = TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT16) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_BFLOAT16);
constexpr uint64_t kIntegral = TESSERA_DTYPE_MASK_INTEGRAL;
constexpr uint64_t kAll = TESSERA_DTYPE_MASK_ALL;
constexpr uint64_t kNumeric = kFloat | kIntegral;
constexpr uint64_t kF64 = TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT64);
constexpr uint64_t kBool = TESSERA_DTYPE_BIT(TESSERA_DTYPE_BOOL);
constexpr uint64_t kF32Only = TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32);

}  // namespace

uint64_t g_kernel_launches_total() { return g_kernel_launches.load(std::memory_order_relaxed); }
uint64_t cudnn_poolings_total() { return g_cudnn_poolings.load(std::memory_order_relaxed); }
uint64_t cudnn_batch_norms_total() { return g_cudnn_batch_norms.load(std::memory_order_relaxed); }

void register_kernels(const sdk::Host& host) {
  // binary
  host.register_kernel(op::add_Tensor::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Add>));
  host.register_kernel(op::add__Tensor::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Add>));
  host.register_kernel(op::sub_Tensor::name, kNumeric | kF64, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Sub>));
  host.register_kernel(op::mul_Tensor::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Mul>));
  host.register_kernel(op::mul__Tensor::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Mul>));
  host.register_kernel(op::div_Tensor::name, kFloat | kF64, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Div>));
  host.register_kernel(op::maximum::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Maximum>));
  host.register_kernel(op::minimum::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Minimum>));
  host.register_kernel(op::pow_Tensor_Tensor::name, kNumeric | kF64, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Pow>));
  host.register_kernel(op::pow_Tensor_Scalar::name, kNumeric | kF64, TESSERA_SDK_KERNEL(pow_scalar_kernel));
  host.register_kernel(op::clamp::name, kNumeric | kF64, TESSERA_SDK_KERNEL(clamp_kernel));
  host.register_kernel(op::hardtanh::name, kNumeric | kF64, TESSERA_SDK_KERNEL(hardtanh_kernel));
  host.register_kernel(op::remainder_Tensor::name, kFloat | kF64 | kIntegral,
                       TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Remainder>));
  host.register_kernel(op::fmod_Tensor::name, kFloat | kF64 | kIntegral,
                       TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Fmod>));
  host.register_kernel(op::floor_divide::name, kFloat | kF64 | kIntegral,
                       TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::FloorDivide>));
  host.register_kernel(op::atan2::name, kFloat | kF64, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Atan2>));
  host.register_kernel(op::_prelu_kernel::name, kFloat | kF64, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Prelu>));
  host.register_kernel(op::prelu::name, kFloat | kF64, TESSERA_SDK_KERNEL(prelu_kernel));
  host.register_kernel(op::bitwise_and_Tensor::name, kIntegral | kBool,
                       TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::BitAnd>));
  host.register_kernel(op::bitwise_or_Tensor::name, kIntegral | kBool,
                       TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::BitOr>));
  host.register_kernel(op::bitwise_xor_Tensor::name, kIntegral | kBool,
                       TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::BitXor>));
  host.register_kernel(op::bitwise_left_shift_Tensor::name, kIntegral,
                       TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::LeftShift>));
  host.register_kernel(op::bitwise_right_shift_Tensor::name, kIntegral,
                       TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::RightShift>));
  host.register_kernel(op::eq_Tensor::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Eq>));
  host.register_kernel(op::ne_Tensor::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Ne>));
  host.register_kernel(op::lt_Tensor::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Lt>));
  host.register_kernel(op::le_Tensor::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Le>));
  host.register_kernel(op::gt_Tensor::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Gt>));
  host.register_kernel(op::ge_Tensor::name, kAll, TESSERA_SDK_KERNEL(binary_kernel<BinaryOp::Ge>));
  // unary
  host.register_kernel(op::neg::name, kNumeric | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Neg>));
  host.register_kernel(op::abs::name, kNumeric | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Abs>));
  host.register_kernel(op::relu::name, kNumeric | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Relu>));
  host.register_kernel(op::exp::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Exp>));
  host.register_kernel(op::log::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Log>));
  host.register_kernel(op::sqrt::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Sqrt>));
  host.register_kernel(op::rsqrt::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Rsqrt>));
  host.register_kernel(op::sin::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Sin>));
  host.register_kernel(op::cos::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Cos>));
  host.register_kernel(op::tanh::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Tanh>));
  host.register_kernel(op::sigmoid::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Sigmoid>));
  host.register_kernel(op::gelu::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Gelu>));
  host.register_kernel(op::silu::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Silu>));
  host.register_kernel(op::erf::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Erf>));
  // docs/pointwise-ops.md
  host.register_kernel(op::tan::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Tan>));
  host.register_kernel(op::asin::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Asin>));
  host.register_kernel(op::acos::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Acos>));
  host.register_kernel(op::atan::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Atan>));
  host.register_kernel(op::sinh::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Sinh>));
  host.register_kernel(op::cosh::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Cosh>));
  host.register_kernel(op::asinh::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Asinh>));
  host.register_kernel(op::acosh::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Acosh>));
  host.register_kernel(op::atanh::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Atanh>));
  host.register_kernel(op::log1p::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Log1p>));
  host.register_kernel(op::expm1::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Expm1>));
  host.register_kernel(op::reciprocal::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Reciprocal>));
  host.register_kernel(op::softsign::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Softsign>));
  host.register_kernel(op::mish::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Mish>));
  host.register_kernel(op::hardsigmoid::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Hardsigmoid>));
  host.register_kernel(op::hardswish::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Hardswish>));
  host.register_kernel(op::leaky_relu::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::LeakyRelu>));
  host.register_kernel(op::elu::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Elu>));
  host.register_kernel(op::selu::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Elu>));
  host.register_kernel(op::celu::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Elu>));
  host.register_kernel(op::softplus::name, kFloat | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Softplus>));
  host.register_kernel(op::floor::name, kNumeric | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Floor>));
  host.register_kernel(op::ceil::name, kNumeric | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Ceil>));
  host.register_kernel(op::trunc::name, kNumeric | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Trunc>));
  host.register_kernel(op::round::name, kNumeric | kF64, TESSERA_SDK_KERNEL(unary_kernel<UnaryOp::Round>));
  host.register_kernel(op::sign::name, kAll, TESSERA_SDK_KERNEL(sign_kernel));
  host.register_kernel(op::bitwise_not::name, kIntegral | kBool, TESSERA_SDK_KERNEL(bitwise_not_kernel));
  host.register_kernel(op::isinf::name, kAll, TESSERA_SDK_KERNEL(isinf_kernel));
  host.register_kernel(op::expand_copy::name, kAll, TESSERA_SDK_KERNEL(expand_copy_kernel));
  host.register_kernel(op::slice_copy_Tensor::name, kAll, TESSERA_SDK_KERNEL(slice_copy_kernel));
  host.register_kernel(op::repeat::name, kAll, TESSERA_SDK_KERNEL(repeat_kernel));
  host.register_kernel(op::tril::name, kAll, TESSERA_SDK_KERNEL(triangle_kernel<false>));
  host.register_kernel(op::flip::name, kAll, TESSERA_SDK_KERNEL(flip_kernel));
  host.register_kernel(op::batch_norm::name, kFloat | kF64, TESSERA_SDK_KERNEL(batch_norm_kernel));
  host.register_kernel(op::group_norm::name, kFloat | kF64, TESSERA_SDK_KERNEL(group_norm_kernel));
  host.register_kernel(op::pad::name, kAll, TESSERA_SDK_KERNEL(pad_kernel));
  host.register_kernel(op::cumsum::name, kNumeric | kF64, TESSERA_SDK_KERNEL(cumsum_kernel));
  host.register_kernel(op::triu::name, kAll, TESSERA_SDK_KERNEL(triangle_kernel<true>));
  // creation and copies
  host.register_kernel(op::fill_::name, kAll, TESSERA_SDK_KERNEL(fill_kernel));
  host.register_kernel(op::copy_::name, kAll, TESSERA_SDK_KERNEL(copy_kernel));
  host.register_kernel(op::where_self::name, kAll, TESSERA_SDK_KERNEL(where_kernel));
  host.register_kernel(op::logical_and::name, kAll, TESSERA_SDK_KERNEL(logical_kernel<LogicalOp::And>));
  host.register_kernel(op::logical_or::name, kAll, TESSERA_SDK_KERNEL(logical_kernel<LogicalOp::Or>));
  host.register_kernel(op::logical_xor::name, kAll, TESSERA_SDK_KERNEL(logical_kernel<LogicalOp::Xor>));
  host.register_kernel(op::logical_not::name, kAll, TESSERA_SDK_KERNEL(logical_kernel<LogicalOp::Not>));
  host.register_kernel(op::isnan::name, kAll, TESSERA_SDK_KERNEL(isnan_kernel));
  host.register_kernel(op::cat::name, kAll, TESSERA_SDK_KERNEL(cat_kernel));
  host.register_kernel(op::stack::name, kAll, TESSERA_SDK_KERNEL(stack_kernel));
  host.register_kernel(op::index_select::name, kAll, TESSERA_SDK_KERNEL(index_select_kernel));
  host.register_kernel(op::embedding::name, kAll, TESSERA_SDK_KERNEL(embedding_kernel));
  host.register_kernel(op::scatter_src::name, kAll, TESSERA_SDK_KERNEL(scatter_kernel));
  host.register_kernel(op::scatter_reduce_two::name, kNumeric | kF64, TESSERA_SDK_KERNEL(scatter_reduce_kernel));
  host.register_kernel(op::gather::name, kAll, TESSERA_SDK_KERNEL(gather_kernel));
  host.register_kernel(op::uniform_::name, kFloat | kF64, TESSERA_SDK_KERNEL(random_kernel<false>));
  host.register_kernel(op::normal_::name, kFloat | kF64, TESSERA_SDK_KERNEL(random_kernel<true>));
  host.register_kernel(op::arange::name, kNumeric | kF64, TESSERA_SDK_KERNEL(arange_kernel));
  // reductions
  host.register_kernel(op::sum::name, kAll, TESSERA_SDK_KERNEL(reduce_kernel<ReduceOp::Sum>));
  host.register_kernel(op::mean::name, kFloat | kF64, TESSERA_SDK_KERNEL(reduce_kernel<ReduceOp::Mean>));
  host.register_kernel(op::amax::name, kAll, TESSERA_SDK_KERNEL(reduce_kernel<ReduceOp::Max>));
  host.register_kernel(op::amin::name, kAll, TESSERA_SDK_KERNEL(reduce_kernel<ReduceOp::Min>));
  host.register_kernel(op::prod::name, kAll, TESSERA_SDK_KERNEL(reduce_kernel<ReduceOp::Prod>));
  host.register_kernel(op::var::name, kFloat | kF64, TESSERA_SDK_KERNEL(reduce_kernel<ReduceOp::Var>));
  host.register_kernel(op::argmax::name, kAll, TESSERA_SDK_KERNEL(reduce_kernel<ReduceOp::ArgMax>));
  host.register_kernel(op::logsumexp::name, kFloat | kF64, TESSERA_SDK_KERNEL(reduce_kernel<ReduceOp::LogSumExp>));
  host.register_kernel(op::linalg_vector_norm::name, kFloat | kF64, TESSERA_SDK_KERNEL(vector_norm_kernel));
  host.register_kernel(op::argmin::name, kAll, TESSERA_SDK_KERNEL(reduce_kernel<ReduceOp::ArgMin>));
  // nn
  host.register_kernel(op::softmax::name, kFloat | kF64, TESSERA_SDK_KERNEL(softmax_kernel<false>));
  host.register_kernel(op::log_softmax::name, kFloat | kF64, TESSERA_SDK_KERNEL(softmax_kernel<true>));
  host.register_kernel(op::layer_norm::name, kFloat | kF64, TESSERA_SDK_KERNEL(norm_kernel<false>));
  host.register_kernel(op::rms_norm::name, kFloat | kF64, TESSERA_SDK_KERNEL(norm_kernel<true>));
  host.register_kernel(op::matmul::name, kNumeric | kF64, TESSERA_SDK_KERNEL(matmul_kernel));
  host.register_kernel(op::linear::name, kFloat | kF64, TESSERA_SDK_KERNEL(linear_kernel));
  host.register_kernel(op::conv2d::name, kFloat | kF64, TESSERA_SDK_KERNEL(conv2d_kernel));
  host.register_kernel(op::max_pool2d::name, kNumeric | kF64, TESSERA_SDK_KERNEL(pool2d_kernel<true>));
  host.register_kernel(op::avg_pool2d::name, kFloat | kF64 | TESSERA_DTYPE_BIT(TESSERA_DTYPE_INT64),
                       TESSERA_SDK_KERNEL(pool2d_kernel<false>));
  host.register_kernel(op::scaled_dot_product_attention::name, kFloat | kF64, TESSERA_SDK_KERNEL(sdpa_kernel));
  host.register_kernel(op::conv_transpose2d_input::name, kFloat | kF64,
                       TESSERA_SDK_KERNEL(conv_transpose2d_kernel));
  host.register_kernel(op::_linear_epilogue::name, kFloat | kF64, TESSERA_SDK_KERNEL(linear_epilogue_kernel));
  host.register_kernel(op::_conv2d_epilogue::name, kFloat | kF64, TESSERA_SDK_KERNEL(conv2d_epilogue_kernel));
  // Note [topk on the GPU], Note [_resize on the GPU], Note [Fake quantize]
  host.register_kernel(op::topk::name, kNumeric | kF64, TESSERA_SDK_KERNEL(topk_kernel));
  host.register_kernel(op::_resize::name, kAll, TESSERA_SDK_KERNEL(resize_kernel));
  host.register_kernel(op::fake_quantize_per_tensor_affine::name, kF32Only,
                       TESSERA_SDK_KERNEL(fake_quantize_kernel<false>));
  host.register_kernel(op::fake_quantize_per_channel_affine::name, kF32Only,
                       TESSERA_SDK_KERNEL(fake_quantize_kernel<true>));
}

}  // namespace tessera::cuda

extern "C" TESSERA_PLUGIN_EXPORT uint64_t tessera_cuda_kernel_launches(void) {
  return tessera::cuda::g_kernel_launches_total();
}
