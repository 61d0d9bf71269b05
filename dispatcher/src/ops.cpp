// The application API (ops.h): factories, devices and the core op set as free functions. Every op
// goes through the unboxed call (op_registry.h); the entry of each op is looked up once.
#include "tessera/ops.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include <unistd.h>

#include "host_api.h"
#include "op_registry.h"
#include "pinned_memory.h"
#include "shape_rules.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"

namespace tessera {
namespace {

OperatorEntry& op_named(const char* name) { return Dispatcher::instance().op(name); }
#define TESSERA_OP(var, name) static OperatorEntry& var = op_named(name)

const TensorImpl* impl_of(const Tensor& t, const char* op, const char* arg) {
  TESSERA_CHECK(t.defined(), op, ": argument '", arg, "' is an undefined tensor");
  return t.impl();
}
const TensorImpl* opt_impl(const std::optional<Tensor>& t) { return t && t->defined() ? t->impl() : nullptr; }

Tensor call1(OperatorEntry& op, std::initializer_list<const TensorImpl*> ts,
             std::initializer_list<tessera_value_t> as, const Device* device = nullptr) {
  CallFrame f{ts.begin(), int(ts.size()), as.begin(), int(as.size()), device};
  return call_unboxed_one(op, f);
}

void normalize_pair(IntArrayRef in, int64_t out[2], const char* op, const char* name) {
  TESSERA_CHECK(in.size() == 1 || in.size() == 2, op, ": ", name, " must have 1 or 2 values, got ", in);
  out[0] = in[0];
  out[1] = in.size() == 2 ? in[1] : in[0];
}


}  // namespace

// Internal: a 0-dim tensor for a C++ number next to `like` (Note [Wrapped numbers reach kernels as
// they are]): a CPU tensor of the number's own kind (int64, float64 or bool), marked as a wrapped
// number, so that promotion treats it as a scalar and the kernel converts its exact value.
Tensor wrapped_scalar(const Scalar& s, const Tensor& like) {
  TESSERA_CHECK(like.defined(), "operator: the tensor operand is undefined");
  Tensor t = make_tensor({}, s.dtype(), Device(DeviceType::CPU));
  if (s.is_bool())
    *static_cast<uint8_t*>(t.raw_data_ptr()) = s.to_bool() ? 1 : 0;
  else if (s.is_integral())
    *t.data_ptr<int64_t>() = s.to_int();
  else
    *t.data_ptr<double>() = s.to_double();
  t.impl()->set_wrapped_number(true);
  return t;
}

// ---- factories

// A factory's output: on options.device(), or in pinned host memory (TensorOptions::pinned_memory).
static Tensor factory_output(IntArrayRef sizes, DType dt, const TensorOptions& options) {
  if (const std::optional<Device> accelerator = options.pinned_for()) {
    TESSERA_CHECK(options.device().is_cpu(),
                  "pinned_memory: pinned memory is host memory, but the options ask for device ",
                  options.device().str(), "; leave the device at cpu (the tensor is pinned for ",
                  accelerator->str(), ")");
    return detail::make_pinned_tensor(sizes, dt, *accelerator);
  }
  return make_tensor(sizes, dt, options.device());
}

Tensor empty(IntArrayRef sizes, TensorOptions options) {
  return factory_output(sizes, options.dtype_or(default_dtype()), options);
}
Tensor empty_strided(IntArrayRef sizes, IntArrayRef strides, TensorOptions options) {
  return make_tensor_strided(sizes, strides, options.dtype_or(default_dtype()), options.device());
}
Tensor zeros(IntArrayRef sizes, TensorOptions options) {
  return full(sizes, 0, options.dtype(options.dtype_or(default_dtype())));
}
Tensor ones(IntArrayRef sizes, TensorOptions options) {
  return full(sizes, 1, options.dtype(options.dtype_or(default_dtype())));
}
Tensor full(IntArrayRef sizes, const Scalar& value, TensorOptions options) {
  DType dt = options.dtype_or(value.is_bool() ? kBool : (value.is_integral() ? kInt64 : default_dtype()));
  check_scalar_fits(value, dt, "full");
  Tensor t = factory_output(sizes, dt, options);
  t.fill_(value);
  return t;
}
// Note [Factories of a traced size] (op_catalogue.cpp): the op full_like, not a factory of t.sizes().
Tensor zeros_like(const Tensor& t) {
  TESSERA_OP(op, "full_like");
  return call1(op, {impl_of(t, "zeros_like", "self")}, {value_int(0), value_none()});
}
Tensor ones_like(const Tensor& t) {
  TESSERA_OP(op, "full_like");
  return call1(op, {impl_of(t, "ones_like", "self")}, {value_int(1), value_none()});
}
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), dtype(t.dtype()).device(t.device())); }

Tensor arange(const Scalar& end, TensorOptions options) { return arange(0, end, 1, options); }
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions options) {
  TESSERA_OP(op, "arange");
  bool floating = start.is_floating() || end.is_floating() || step.is_floating();
  DType dt = options.dtype_or(floating ? default_dtype() : kInt64);
  Device dev = options.device();
  return call1(op, {}, {value_scalar(start), value_scalar(end), value_scalar(step), value_dtype(dt)}, &dev);
}

// Fills `t` through `op` (uniform_ or normal_: attributes a, b, seed, offset) from `generator`, or
// from the default generator of t's device (Note [Generators] in tessera/generator.h).
Tensor& random_fill(OperatorEntry& op, Tensor& t, double a, double b, const Generator* generator) {
  TESSERA_CHECK(t.defined(), "random fill: the tensor is undefined");
  const GeneratorState s = detail::reserve_for(t, generator);
  call1(op, {t.impl()},
        {value_double(a), value_double(b), value_int(int64_t(s.seed)), value_int(int64_t(s.offset))});
  return t;
}

Tensor rand(IntArrayRef sizes, TensorOptions options) {
  TESSERA_OP(op, "uniform_");
  Tensor t = empty(sizes, options);
  return random_fill(op, t, 0.0, 1.0, nullptr);
}
Tensor randn(IntArrayRef sizes, TensorOptions options) {
  TESSERA_OP(op, "normal_");
  Tensor t = empty(sizes, options);
  return random_fill(op, t, 0.0, 1.0, nullptr);
}
Tensor rand(IntArrayRef sizes, const Generator& generator, TensorOptions options) {
  TESSERA_OP(op, "uniform_");
  Tensor t = empty(sizes, options);
  return random_fill(op, t, 0.0, 1.0, &generator);
}
Tensor randn(IntArrayRef sizes, const Generator& generator, TensorOptions options) {
  TESSERA_OP(op, "normal_");
  Tensor t = empty(sizes, options);
  return random_fill(op, t, 0.0, 1.0, &generator);
}
Tensor& uniform_(Tensor& self, double from, double to, const std::optional<Generator>& generator) {
  TESSERA_OP(op, "uniform_");
  TESSERA_CHECK(from <= to, "uniform_: expected from <= to, got from=", from, " to=", to);
  return random_fill(op, self, from, to, generator ? &*generator : nullptr);
}
Tensor& normal_(Tensor& self, double mean, double std, const std::optional<Generator>& generator) {
  TESSERA_OP(op, "normal_");
  TESSERA_CHECK(std >= 0.0, "normal_: expected std >= 0, got ", std);
  return random_fill(op, self, mean, std, generator ? &*generator : nullptr);
}

Tensor scalar_tensor(const Scalar& value, TensorOptions options) {
  return full({}, value, options.dtype(options.dtype_or(default_dtype())));
}

Tensor tensor_from_buffer(const void* data, DType dtype, size_t count, IntArrayRef sizes,
                          TensorOptions options) {
  std::vector<int64_t> shape = sizes.empty() ? std::vector<int64_t>{int64_t(count)} : sizes.vec();
  TESSERA_CHECK(compute_numel(shape) == int64_t(count), "tensor: ", count, " values do not fill shape ",
                IntArrayRef(shape), " (", compute_numel(shape),
                " elements); give as many values as the shape holds");
  Tensor t = make_tensor(shape, dtype, Device(DeviceType::CPU));
  if (count) std::memcpy(t.raw_data_ptr(), data, count * itemsize(dtype));
  if (options.dtype_opt() && *options.dtype_opt() != dtype) t = t.to(*options.dtype_opt());
  if (!options.device().is_cpu()) t = t.to(options.device());
  return t;
}

// ---- devices

std::vector<DeviceInfo> devices() {
  load_plugins_of_kind("backend");
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]
  std::vector<DeviceInfo> out;
  for (int i = 0; i < kNumDeviceTypes; ++i) {
    DeviceType type = DeviceType(i);
    const BackendDevice* b = backend_device_if_loaded(type);
    if (!b && type == DeviceType::CPU) b = &backend_device(DeviceType::CPU);  // the host's own
    if (!b || !b->iface || !b->iface->device_count) continue;
    char reason[512] = {0};
    int32_t n = b->iface->device_count(b->self, reason, sizeof(reason));
    for (int32_t d = 0; d < n; ++d) {
      DeviceInfo info{Device(type, d), device_type_name(type) + ":" + std::to_string(d), b->plugin, "{}"};
      if (b->iface->device_properties) {
        std::string buf(1024, '\0');
        // The length returned excludes the NUL (plugin_abi.h); plugins built before that was
        // written may count it, so the text ends at the first NUL either way.
        size_t need = b->iface->device_properties(b->self, d, buf.data(), buf.size());
        if (need >= buf.size() && need < (size_t(1) << 24)) {
          buf.assign(need + 1, '\0');
          need = b->iface->device_properties(b->self, d, buf.data(), buf.size());
        }
        buf.resize(::strnlen(buf.data(), std::min(need, buf.size() - 1)));
        if (!buf.empty()) info.properties = buf;
      }
      out.push_back(std::move(info));
    }
  }
  return out;
}

// Throws naming the device when no plugin provides its type or its index is out of range.
void check_device_index(const char* what, Device device) {
  TESSERA_CHECK(device.type() != DeviceType::Meta, what, ": the meta device holds no memory");
  const int64_t index = device.index() < 0 ? 0 : device.index();
  if (device.is_cpu()) {
    TESSERA_CHECK(index == 0, what, ": device index ", index,
                  " of 'cpu' is out of range: the CPU is device 0");
    return;
  }
  PluginCallGuard in_flight;                               // Note [In-flight plugin calls]
  const BackendDevice& b = backend_device(device.type());  // throws naming why no plugin provides the type
  char reason[256] = {0};
  const int64_t count =
      b.iface && b.iface->device_count ? b.iface->device_count(b.self, reason, sizeof reason) : 0;
  TESSERA_CHECK(index < count, what, ": device index ", index, " of '", device_type_name(device.type()),
                "' is out of range: ",
                count == 0 ? "plugin '" + b.plugin + "' reports no device (" + std::string(reason) + ")"
                           : "plugin '" + b.plugin + "' reports " + std::to_string(count) +
                                 " device(s), 0.." + std::to_string(count - 1));
}

MemoryStats memory_stats(Device device) {
  MemoryStats out;
  check_device_index("memory_stats", device);
  if (device.is_cpu()) {
    // CPU tensors come from the host's caching allocator (Note [Caching CPU allocator]), never
    // from the cpu plugin's memory_allocate: the host answers for the CPU.
    const CpuAllocatorStats s = cpu_allocator_stats();
    out.reported = true;
    out.allocated_bytes = s.allocated_bytes;
    out.reserved_bytes = s.allocated_bytes + s.cached_bytes;
    out.peak_allocated_bytes = s.peak_allocated_bytes;
    out.num_allocations = s.num_allocations;
    // What the loaded cpu plugin holds itself (prepacked weights) counts as reserved too.
    const BackendDevice* b = backend_device_if_loaded(DeviceType::CPU);
    if (b && b->iface && TESSERA_ABI_HAS_FIELD(b->iface, tessera_device_interface_t, memory_stats) &&
        b->iface->memory_stats) {
      tessera_memory_stats_t ps{};
      ps.struct_size = sizeof(ps);
      if (tessera_status_t st = b->iface->memory_stats(b->self, 0, &ps)) {
        bool unimplemented = false;
        throw_status(st, "memory_stats(cpu)", &unimplemented);
      } else {
        out.reserved_bytes += ps.reserved_bytes;
      }
    }
    return out;
  }
  const BackendDevice& b = backend_device(device.type());
  // Note [ABI versioning]: the loader zeroed the slots a 1.0 plugin lacks; the host default is
  // "not reported".
  if (!b.iface || !TESSERA_ABI_HAS_FIELD(b.iface, tessera_device_interface_t, memory_stats) || !b.iface->memory_stats)
    return out;
  tessera_memory_stats_t s{};
  s.struct_size = sizeof(s);
  tessera_status_t st = b.iface->memory_stats(b.self, device.index() < 0 ? 0 : device.index(), &s);
  bool unimplemented = false;
  throw_status(st, "memory_stats(" + device.str() + ")", &unimplemented);
  if (unimplemented) return out;
  out.reported = true;
  out.allocated_bytes = s.allocated_bytes;
  out.reserved_bytes = s.reserved_bytes;
  out.peak_allocated_bytes = s.peak_allocated_bytes;
  out.num_allocations = s.num_allocations;
  return out;
}

MemoryInfo memory_info(Device device) {
  check_device_index("memory_info", device);
  MemoryInfo out;
  if (device.is_cpu()) {
    // The host answers for the CPU: available and total RAM.
    const long page = ::sysconf(_SC_PAGESIZE), avail = ::sysconf(_SC_AVPHYS_PAGES),
               total = ::sysconf(_SC_PHYS_PAGES);
    TESSERA_CHECK_CODE(page > 0 && avail >= 0 && total > 0, ErrorCode::Unavailable,
                       "memory_info(cpu): the system does not report its memory (sysconf failed)");
    out.free_bytes = uint64_t(avail) * uint64_t(page);
    out.total_bytes = uint64_t(total) * uint64_t(page);
    return out;
  }
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]
  const BackendDevice& b = backend_device(device.type());
  const std::string unreported = "memory_info: device '" + device.str() + "' (plugin '" + b.plugin +
                                 "') does not report free/total memory (no memory_info slot, ABI 1.3); check "
                                 "tessera::device_capabilities(device).memory_info first";
  TESSERA_CHECK_CODE(b.iface && TESSERA_ABI_HAS_FIELD(b.iface, tessera_device_interface_t, memory_info) &&
                         b.iface->memory_info,
                     ErrorCode::Unimplemented, unreported);
  tessera_status_t st = b.iface->memory_info(b.self, device.index() < 0 ? 0 : device.index(), &out.free_bytes,
                                             &out.total_bytes);
  bool unimplemented = false;
  throw_status(st, "memory_info(" + device.str() + ")", &unimplemented);
  TESSERA_CHECK_CODE(!unimplemented, ErrorCode::Unimplemented, unreported);
  TESSERA_CHECK_CODE(out.free_bytes <= out.total_bytes, ErrorCode::Internal, "memory_info(", device.str(),
                     "): plugin '", b.plugin, "' reports ", out.free_bytes, " free bytes of ",
                     out.total_bytes, " in all (free must not exceed total)");
  return out;
}

uint64_t empty_cache(Device device) {
  const BackendDevice& b = backend_device(device.type());
  auto fn = plugin_extension<tessera_ext_empty_cache_fn_t>(b.plugin, TESSERA_EXT_EMPTY_CACHE);
  return fn ? fn(b.self, device.index()) : 0;
}

int64_t device_count(DeviceType type) {
  const BackendDevice* b = backend_device_if_loaded(type);
  if (!b) {
    ensure_backend_loaded(type);
    b = backend_device_if_loaded(type);
  }
  if (!b && type == DeviceType::CPU) return 1;
  if (!b || !b->iface || !b->iface->device_count) return 0;
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]
  return b->iface->device_count(b->self, nullptr, 0);
}
int64_t device_count(std::string_view type_name) { return device_count(device_type_from_name(type_name)); }

void synchronize(Device device) {
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]
  const BackendDevice& b = backend_device(device.type());
  if (!b.iface || !b.iface->device_synchronize) return;
  throw_status(b.iface->device_synchronize(b.self, device.index() < 0 ? 0 : device.index()),
               "synchronize(" + device.str() + ")");
}

// ---- the plain ops of the contract (tessera/ops_generated.h)

#include "ops_generated.inc"

// ---- reductions

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  TESSERA_OP(op, "argmax");
  const TensorImpl* self = impl_of(x, "argmax", "self");
  if (dim && x.numel() == 0) {
    // Over a non-empty dim of an empty tensor the result is empty too (PyTorch). The shape rule
    // alone (on a meta tensor) checks the call and sizes the result; no kernel needs to see it.
    Tensor shape_only = make_tensor(x.sizes(), x.dtype(), Device(DeviceType::Meta));
    Tensor r = call1(op, {shape_only.impl()}, {value_int(*dim), value_bool(keepdim)});
    return make_tensor(r.sizes(), r.dtype(), x.device());
  }
  return call1(op, {self}, {dim ? value_int(*dim) : value_none(), value_bool(keepdim)});
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  TESSERA_OP(op, "topk");
  const TensorImpl* self = impl_of(x, "topk", "self");
  const tessera_value_t attrs[] = {value_int(k), value_int(dim), value_bool(largest), value_bool(sorted)};
  CallFrame f{&self, 1, attrs, 4, nullptr};
  Tensor outs[2];
  call_unboxed(op, f, outs);
  return {outs[0], outs[1]};
}

// ---- optimizers

void _fused_adam_(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& grad,
                  const FusedAdamArgs& a) {
  TESSERA_OP(op, "_fused_adam_");
  const TensorImpl* tensors[] = {impl_of(param, "_fused_adam_", "self"), impl_of(exp_avg, "_fused_adam_", "exp_avg"),
                                 impl_of(exp_avg_sq, "_fused_adam_", "exp_avg_sq"),
                                 impl_of(grad, "_fused_adam_", "grad")};
  const tessera_value_t attrs[] = {value_double(a.lr),           value_double(a.beta1),
                                   value_double(a.beta2),        value_double(a.weight_decay),
                                   value_double(a.eps),          value_double(a.bias_correction1),
                                   value_double(a.bias_correction2), value_bool(a.decoupled_weight_decay)};
  CallFrame f{tensors, 4, attrs, 8, nullptr};
  Tensor outs[3];
  call_unboxed(op, f, outs);
}

void _fused_sgd_(const Tensor& param, const Tensor& momentum_buffer, const Tensor& grad, const FusedSgdArgs& a) {
  TESSERA_OP(op, "_fused_sgd_");
  const TensorImpl* tensors[] = {impl_of(param, "_fused_sgd_", "self"),
                                 impl_of(momentum_buffer, "_fused_sgd_", "momentum_buffer"),
                                 impl_of(grad, "_fused_sgd_", "grad")};
  const tessera_value_t attrs[] = {value_double(a.lr),           value_double(a.momentum), value_double(a.dampening),
                                   value_double(a.weight_decay), value_bool(a.nesterov),   value_bool(a.first_step)};
  CallFrame f{tensors, 3, attrs, 6, nullptr};
  Tensor outs[2];
  call_unboxed(op, f, outs);
}

namespace {
// The Tensor[] of a multi-tensor step: the blocks one after another, each as long as the first.
std::vector<const TensorImpl*> multi_tensor_list(const char* name,
                                                 std::initializer_list<std::pair<const char*, const std::vector<Tensor>*>> blocks) {
  const size_t n = blocks.begin()->second->size();
  std::vector<const TensorImpl*> list;
  list.reserve(n * blocks.size());
  for (const auto& [role, block] : blocks) {
    TESSERA_CHECK(block->size() == n, name, ": ", n, " parameters but ", block->size(), " ", role,
                  "; give one per parameter, in the parameters' order");
    for (size_t i = 0; i < n; ++i) list.push_back(impl_of((*block)[i], name, role));
  }
  return list;
}
}  // namespace

void _multi_tensor_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
                         const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& grads,
                         const FusedAdamArgs& a) {
  TESSERA_OP(op, "_multi_tensor_adam_");
  if (params.empty() && exp_avgs.empty() && exp_avg_sqs.empty() && grads.empty()) return;  // nothing to update
  const std::vector<const TensorImpl*> list = multi_tensor_list(
      "_multi_tensor_adam_", {{"params", &params}, {"exp_avgs", &exp_avgs}, {"exp_avg_sqs", &exp_avg_sqs}, {"grads", &grads}});
  const tessera_value_t attrs[] = {value_double(a.lr),           value_double(a.beta1),
                                   value_double(a.beta2),        value_double(a.weight_decay),
                                   value_double(a.eps),          value_double(a.bias_correction1),
                                   value_double(a.bias_correction2), value_bool(a.decoupled_weight_decay)};
  TESSERA_CHECK(list.size() <= size_t(INT32_MAX), "_multi_tensor_adam_: too many tensors");
  CallFrame f{list.data(), int(list.size()), attrs, 8, nullptr};
  Tensor none[1];  // the op has no outputs
  call_unboxed(op, f, none);
}

void _multi_tensor_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& momentum_buffers,
                        const std::vector<Tensor>& grads, const FusedSgdArgs& a) {
  TESSERA_OP(op, "_multi_tensor_sgd_");
  if (params.empty() && momentum_buffers.empty() && grads.empty()) return;
  const std::vector<const TensorImpl*> list = multi_tensor_list(
      "_multi_tensor_sgd_", {{"params", &params}, {"momentum_buffers", &momentum_buffers}, {"grads", &grads}});
  const tessera_value_t attrs[] = {value_double(a.lr),           value_double(a.momentum), value_double(a.dampening),
                                   value_double(a.weight_decay), value_bool(a.nesterov),   value_bool(a.first_step)};
  TESSERA_CHECK(list.size() <= size_t(INT32_MAX), "_multi_tensor_sgd_: too many tensors");
  CallFrame f{list.data(), int(list.size()), attrs, 6, nullptr};
  Tensor none[1];  // the op has no outputs
  call_unboxed(op, f, none);
}

// ---- nn

Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias) {
  TESSERA_OP(op, "linear");
  impl_of(x, "linear", "input");
  impl_of(weight, "linear", "weight");
  // Kernels take a 1-D bias of out_features. As in PyTorch, any bias that broadcasts to the output
  // is accepted: one with only leading 1s (0-dim, [n], [1, n], [1]) is passed as [n]; one that
  // varies over the batch is added after the product.
  std::optional<Tensor> b = bias && bias->defined() ? bias : std::nullopt;
  if (b && !(b->dim() == 1 && weight.dim() == 2 && b->sizes()[0] == weight.sizes()[0])) {
    bool leading_ones = true;
    for (int64_t d = 0; d + 1 < b->dim(); ++d) leading_ones = leading_ones && b->sizes()[size_t(d)] == 1;
    if (leading_ones && weight.dim() == 2) {
      const int64_t n = weight.sizes()[0];
      const int64_t last = b->dim() == 0 ? 1 : b->sizes()[size_t(b->dim() - 1)];
      TESSERA_CHECK(last == 1 || last == n, "linear: bias of shape ", b->sizes(),
                    " does not broadcast to the output's last dimension ", n);
      b = b->reshape(IntArrayRef(last)).expand(IntArrayRef(n));
    } else {
      return add(call1(op, {x.impl(), weight.impl(), nullptr}, {}), *b);
    }
  }
  return call1(op, {x.impl(), weight.impl(), opt_impl(b)}, {});
}
namespace {
// PyTorch's softmax returns an empty integral input as it is, before its dtype check; no kernel runs.
Tensor empty_integral_passthrough(const Tensor& x, int64_t dim, const char* op) {
  if (!x.defined() || x.numel() != 0 || is_floating(x.dtype())) return Tensor();
  shape::wrap(op, dim, x.dim());
  return empty_like(x);
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  TESSERA_OP(op, "softmax");
  if (Tensor e = empty_integral_passthrough(x, dim, "softmax"); e.defined()) return e;
  return call1(op, {impl_of(x, "softmax", "self")}, {value_int(dim)});
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  TESSERA_OP(op, "log_softmax");
  if (Tensor e = empty_integral_passthrough(x, dim, "log_softmax"); e.defined()) return e;
  return call1(op, {impl_of(x, "log_softmax", "self")}, {value_int(dim)});
}
Tensor rms_norm(const Tensor& x, IntArrayRef normalized_shape, const std::optional<Tensor>& weight,
                std::optional<double> eps) {
  TESSERA_OP(op, "rms_norm");
  // eps=None: the machine epsilon of the type the norm computes in (float32 for f16/bf16/f32, float64 for
  // f64), as PyTorch's rms_norm; resolved here so that every backend uses the same value.
  const double e = eps ? *eps
                       : (x.defined() && x.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                               : double(std::numeric_limits<float>::epsilon()));
  return call1(op, {impl_of(x, "rms_norm", "input"), opt_impl(weight)}, {value_ints(normalized_shape), value_double(e)});
}
Tensor conv2d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias, IntArrayRef stride,
              IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  TESSERA_OP(op, "conv2d");
  int64_t s[2], p[2], d[2];
  normalize_pair(stride, s, "conv2d", "stride");
  normalize_pair(padding, p, "conv2d", "padding");
  normalize_pair(dilation, d, "conv2d", "dilation");
  return call1(op, {impl_of(x, "conv2d", "input"), impl_of(weight, "conv2d", "weight"), opt_impl(bias)},
               {value_ints(IntArrayRef(s, 2)), value_ints(IntArrayRef(p, 2)), value_ints(IntArrayRef(d, 2)),
                value_int(groups)});
}
Tensor max_pool2d(const Tensor& x, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  IntArrayRef dilation) {
  TESSERA_OP(op, "max_pool2d");
  int64_t k[2], s[2], p[2], d[2];
  normalize_pair(kernel_size, k, "max_pool2d", "kernel_size");
  if (stride.empty())
    s[0] = k[0], s[1] = k[1];
  else
    normalize_pair(stride, s, "max_pool2d", "stride");
  normalize_pair(padding, p, "max_pool2d", "padding");
  normalize_pair(dilation, d, "max_pool2d", "dilation");
  return call1(op, {impl_of(x, "max_pool2d", "self")},
               {value_ints(IntArrayRef(k, 2)), value_ints(IntArrayRef(s, 2)), value_ints(IntArrayRef(p, 2)),
                value_ints(IntArrayRef(d, 2))});
}
Tensor avg_pool2d(const Tensor& x, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding) {
  TESSERA_OP(op, "avg_pool2d");
  int64_t k[2], s[2], p[2];
  normalize_pair(kernel_size, k, "avg_pool2d", "kernel_size");
  if (stride.empty())
    s[0] = k[0], s[1] = k[1];
  else
    normalize_pair(stride, s, "avg_pool2d", "stride");
  normalize_pair(padding, p, "avg_pool2d", "padding");
  return call1(op, {impl_of(x, "avg_pool2d", "self")},
               {value_ints(IntArrayRef(k, 2)), value_ints(IntArrayRef(s, 2)), value_ints(IntArrayRef(p, 2))});
}
namespace {
Tensor list_op(OperatorEntry& op, const std::vector<Tensor>& tensors, int64_t dim) {
  detail::SmallVector<const TensorImpl*, 8> impls;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TESSERA_CHECK(tensors[i].defined(), op.name, ": tensor ", i, " of the list is undefined");
    impls.push_back(tensors[i].impl());
  }
  tessera_value_t attrs[] = {value_int(dim)};
  CallFrame f{impls.data(), int(impls.size()), attrs, 1, nullptr};
  return call_unboxed_one(op, f);
}
}  // namespace
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TESSERA_OP(op, "cat");
  // Legacy empty tensors (1-D of size 0) are skipped, as in PyTorch, but still take part in the
  // result dtype (shape::cat skips them too).
  std::vector<Tensor> kept;
  ResultTypeState all;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TESSERA_CHECK(tensors[i].defined(), "cat: tensor ", i, " of the list is undefined");
    all.add_tensor(tensors[i].dtype(), false, false);
    if (!(tensors[i].dim() == 1 && tensors[i].sizes()[0] == 0)) kept.push_back(tensors[i]);
  }
  if (kept.empty() || kept.size() == tensors.size()) return list_op(op, tensors, dim);
  // A skipped tensor may raise the result dtype (f64[0] with i32 and f16 gives f64): the kept ones
  // are converted to it first, as PyTorch's copy into the f64 result does, so that an int32
  // -2^31 is not rounded through float16 (-inf) on the way.
  const DType result = all.result();
  for (Tensor& t : kept)
    if (t.dtype() != result) t = t.to(result);
  return list_op(op, kept, dim);
}
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TESSERA_OP(op, "stack");
  return list_op(op, tensors, dim);
}

// ---- comparison helpers: computed on the CPU with plain loops, so they work with no plugin loaded.

namespace {
// The elements of `t` in row-major order, as doubles.
std::vector<double> host_values(const Tensor& t, const char* who) {
  TESSERA_CHECK(t.defined(), who, ": undefined tensor");
  const Storage& s = t.storage();
  TESSERA_CHECK(!s || s->usable(), who, ": the tensor's storage is unusable because ", s->unusable_reason());
  int64_t n = t.numel();
  std::vector<double> out;
  out.reserve(size_t(n));
  if (n == 0) return out;
  size_t isz = t.itemsize();
  const int64_t span = storage_extent(t.sizes(), t.strides(), 0).value_or(0);  // first to last element
  std::vector<char> staging;
  const char* base;
  if (t.is_cpu()) {
    base = static_cast<const char*>(s->data()) + t.storage_offset() * int64_t(isz);
  } else {
    PluginCallGuard in_flight;  // Note [In-flight plugin calls]
    const BackendDevice& b = backend_device(t.device().type());
    staging.resize(size_t(span) * isz);
    throw_status(
        b.iface->memory_copy_to_host(b.self, t.device().index() < 0 ? 0 : t.device().index(), staging.data(),
                                     s->data(), uint64_t(t.storage_offset()) * isz, staging.size(), nullptr),
        std::string(who) + ": copying from " + t.device().str());
    base = staging.data();
  }
  std::vector<int64_t> idx(size_t(t.dim()), 0);
  visit_dtype(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0; i < n; ++i) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
      const char* p = base + off * int64_t(isz);
      if constexpr (std::is_same_v<T, bool>) {
        out.push_back(*reinterpret_cast<const uint8_t*>(p) ? 1.0 : 0.0);
      } else {
        T v;
        std::memcpy(&v, p, sizeof(T));
        if constexpr (std::is_integral_v<T>)
          out.push_back(double(v));
        else if constexpr (std::is_same_v<T, double>)
          out.push_back(v);
        else
          out.push_back(double(static_cast<float>(v)));
      }
      for (int64_t d = int64_t(idx.size()) - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < t.sizes()[size_t(d)]) break;
        idx[size_t(d)] = 0;
      }
    }
  });
  return out;
}
}  // namespace

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  TESSERA_CHECK(a.defined() && b.defined(), "allclose: an argument is an undefined tensor");
  TESSERA_CHECK(a.dtype() == b.dtype(), "allclose: ", a.dtype(), " did not match ", b.dtype(),
                " (PyTorch compares tensors of one dtype); convert one with .to(", a.dtype(), ")");
  // Broadcasting as PyTorch's isclose: compare the expanded views.
  const auto sizes = shape::broadcast<int64_t>("allclose", a.sizes(), b.sizes());
  std::vector<double> x = host_values(a.expand(sizes.ref()), "allclose");
  std::vector<double> y = host_values(b.expand(sizes.ref()), "allclose");
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i]) continue;  // equal infinities of the same sign; NaN is never equal
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) return false;
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i]))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (!(a.sizes() == b.sizes())) return false;
  std::vector<double> x = host_values(a, "equal"), y = host_values(b, "equal");
  return x == y;
}

}  // namespace tessera
