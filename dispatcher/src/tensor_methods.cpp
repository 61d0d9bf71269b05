// The computing methods of Tensor (tensor.h) and the free operators: thin layers over ops.h and the
// unboxed call, plus cross-device copies (Note [Cross-device copies]).
#include <cstring>
#include <optional>
#include <vector>

#include "host_api.h"
#include "memory_format_internal.h"
#include "op_registry.h"
#include "profiler.h"
#include "pinned_memory.h"
#include "shape_rules.h"
#include "small_vector.h"
#include "sparse_internal.h"
#include "stream_state.h"
#include "tessera/autograd_dispatch.h"
#include "tessera/dispatcher.h"
#include "tessera/memory_format.h"
#include "tessera/ops.h"
#include "tessera/profiler.h"

namespace tessera {

Tensor wrapped_scalar(const Scalar& s, const Tensor& like);  // ops.cpp

namespace {

OperatorEntry& op_named(const char* name) { return Dispatcher::instance().op(name); }
#define TESSERA_OP(var, name) static OperatorEntry& var = op_named(name)

void check_defined(const Tensor& t, const char* what) {
  TESSERA_CHECK(t.defined(), what, ": the tensor is undefined (default-constructed)");
}

int32_t index_of(Device d) { return d.index() < 0 ? 0 : d.index(); }

// Note [Cross-device copies]
// Bytes move only through the device interfaces (Note [Device memory] in plugin_abi.h): host ->
// device with memory_copy_from_host, device -> host with memory_copy_to_host, between two devices
// of one plugin with memory_copy_device, between plugins through a host buffer. The source is made
// contiguous on its own device first; dtype conversion and destination strides are then handled
// by a same-device copy_ kernel. If a transfer fails part-way, the destination storage is marked
// unusable (Note [Unusable storage]) so that nobody reads half-written data. Each transfer runs on
// the current stream of the device that issues it (Note [Streams] in tessera/stream.h).
// With `from_pinned`, a host source pinned for the destination's type goes through the plugin's
// asynchronous memory_copy_from_pinned when it has one (Tensor::to(device, non_blocking)).
void transfer_bytes(const Tensor& dst, const Tensor& src, bool from_pinned = false) {
  uint64_t nbytes = uint64_t(src.nbytes());
  if (nbytes == 0) return;
  // Both row-major contiguous, or both dense with the same strides (channels-last): the bytes from
  // the storage offset on are the tensor's elements, in the same order on both sides.
  TESSERA_INTERNAL_ASSERT(dst.nbytes() == src.nbytes() &&
                          ((dst.is_contiguous() && src.is_contiguous()) ||
                           (dst.sizes() == src.sizes() && detail::channels_last_dense(dst.sizes(), dst.strides()) &&
                            detail::channels_last_dense(src.sizes(), src.strides()))));
  Device sd = src.device(), dd = dst.device();
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]
  // Checked under the guard: no shutdown can end either generation until the transfer is done.
  TESSERA_CHECK(src.storage()->live(), "copy_: the source tensor's storage is unusable because ",
                src.storage()->unusable_reason());
  TESSERA_CHECK(dst.storage()->live(), "copy_: the destination tensor's storage is unusable because ",
                dst.storage()->unusable_reason());
  void* dst_handle = dst.storage()->data();
  const void* src_handle = src.storage()->data();
  uint64_t dst_off = uint64_t(dst.storage_offset()) * dst.itemsize();
  uint64_t src_off = uint64_t(src.storage_offset()) * src.itemsize();
  std::string what =
      "copy_: copying " + std::to_string(nbytes) + " bytes from " + sd.str() + " to " + dd.str();
  // The host side of the copy in the profile: the device's copy spans correlate with it (Note
  // [Plugin spans] in tessera/plugin_abi.h).
  ProfilerRange range;
  if (__builtin_expect(profiler_on(), 0) && (!sd.is_cpu() || !dd.is_cpu()))
    range.begin("transfer", sd.is_cpu() ? "copy host to device" : dd.is_cpu() ? "copy device to host" : "copy device to device",
                sd.is_cpu() ? dd : sd);
  tessera_status_t status = nullptr;
  try {
    if (sd.is_cpu() && dd.is_cpu()) {
      std::memcpy(static_cast<char*>(dst_handle) + dst_off, static_cast<const char*>(src_handle) + src_off,
                  nbytes);
    } else if (sd.is_cpu()) {
      const BackendDevice& b = backend_device(dd.type());
      const bool async =
          from_pinned &&
          TESSERA_ABI_HAS_FIELD(b.iface, tessera_device_interface_t, memory_copy_from_pinned) &&
          b.iface->memory_copy_from_pinned;
      status = (async ? b.iface->memory_copy_from_pinned : b.iface->memory_copy_from_host)(
          b.self, index_of(dd), dst_handle, dst_off, static_cast<const char*>(src_handle) + src_off, nbytes,
          current_stream_handle(dd.type(), index_of(dd)));
    } else if (dd.is_cpu()) {
      const BackendDevice& b = backend_device(sd.type());
      status = b.iface->memory_copy_to_host(b.self, index_of(sd), static_cast<char*>(dst_handle) + dst_off,
                                            src_handle, src_off, nbytes, current_stream_handle(sd.type(), index_of(sd)));
    } else {
      const BackendDevice& bs = backend_device(sd.type());
      const BackendDevice& bd = backend_device(dd.type());
      if (bs.iface == bd.iface && bs.self == bd.self && bs.iface->memory_copy_device) {
        status = bs.iface->memory_copy_device(bs.self, index_of(dd), dst_handle, dst_off, index_of(sd),
                                              src_handle, src_off, nbytes, current_stream_handle(dd.type(), index_of(dd)));
      } else {
        std::vector<char> staging(nbytes);
        status = bs.iface->memory_copy_to_host(bs.self, index_of(sd), staging.data(), src_handle, src_off,
                                               nbytes, current_stream_handle(sd.type(), index_of(sd)));
        if (!status)
          status = bd.iface->memory_copy_from_host(bd.self, index_of(dd), dst_handle, dst_off, staging.data(),
                                                   nbytes, current_stream_handle(dd.type(), index_of(dd)));
      }
    }
  } catch (...) {
    dst.storage()->mark_unusable();
    throw;
  }
  if (status) {
    dst.storage()->mark_unusable();
    throw_status(status, what + " failed; the destination tensor is now unusable (Note [Unusable storage])");
  }
}

// Note [Non-contiguous transfers]
// A view is made contiguous on its own device before its bytes move, but only when that device
// has a copy_ kernel for the dtype: otherwise contiguous() there would reach the CPU fallback,
// whose first step is this very transfer, and recurse. Such a view moves as the storage span it
// covers, and the view is taken on the host.
bool device_copies_itself(const Tensor& t) {
  if (t.device().is_cpu()) return true;
  static OperatorEntry* copy_op = Dispatcher::instance().find_op("copy_");
  return Dispatcher::instance().resolution(*copy_op, t.device().type(), t.dtype()) == Resolution::Kernel;
}

// The storage span a view covers, on its own device and copied to the host, plus the view taken
// on the host copy.
struct HostSpan {
  Tensor on_device;  // 1-D, contiguous, aliasing the view's storage
  Tensor on_host;    // 1-D copy of it on the CPU
  Tensor view;       // the view's geometry over on_host
};

HostSpan stage_view_on_host(const Tensor& t) {
  // Elements from the storage offset to the view's last element (the view fits its storage).
  const int64_t extent = storage_extent(t.sizes(), t.strides(), 0).value_or(0);
  const int64_t unit_stride = 1;
  HostSpan span;
  span.on_device = Tensor(make_intrusive<TensorImpl>(t.storage(), t.dtype(), t.device(), IntArrayRef(extent),
                                                     IntArrayRef(unit_stride), t.storage_offset()));
  span.on_host = make_tensor({extent}, t.dtype(), Device(DeviceType::CPU));
  transfer_bytes(span.on_host, span.on_device);
  span.view = span.on_host.as_strided(t.sizes(), t.strides(), 0);
  return span;
}

}  // namespace

// ---- conversions and copies

Tensor Tensor::to(Device device) const {
  check_defined(*this, "to");
  if (same_device(this->device(), device)) return *this;
  if (__builtin_expect(key_set().has(Functionality::Autograd), 0))  // Note [Autograd dispatch]
    if (AutogradToDeviceHook hook = detail::autograd_to_device_hook()) return hook(*this, device);
  if (key_set().has(Functionality::Sparse))
    if (std::optional<Tensor> moved = detail::sparse_to_device(*this, device)) return *moved;
  // A channels-last tensor stays channels-last on its new device (PyTorch's memory_format=preserve;
  // Note [Channels-last activations] in docs/semantics.md), and its bytes move as they are.
  Tensor out = detail::suggests_channels_last(*impl())
                   ? make_tensor_strided(sizes(), channels_last_strides(sizes()), dtype(), device)
                   : make_tensor(sizes(), dtype(), device);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device device, bool non_blocking) const {
  check_defined(*this, "to");
  // The asynchronous path: a dense, contiguous host tensor pinned for the destination's type, with
  // no autograd or sparse wrapper. Anything else copies as to(device) does.
  if (!non_blocking || !this->device().is_cpu() || device.is_cpu() || !is_contiguous() || !storage() ||
      key_set().has(Functionality::Autograd) || key_set().has(Functionality::Sparse) ||
      detail::pinned_device_type(*storage()) != device.type())
    return to(device);
  TESSERA_CHECK(storage()->usable(), "to: the source tensor's storage is unusable because ",
                storage()->unusable_reason());
  Tensor out = make_tensor(sizes(), dtype(), device);
  transfer_bytes(out, *this, /*from_pinned=*/true);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  check_defined(*this, "to");
  if (dtype == this->dtype()) return *this;
  TESSERA_OP(op, "_to_copy");
  const TensorImpl* ts[] = {impl()};
  tessera_value_t attrs[] = {value_dtype(dtype)};
  return call_unboxed_one(op, CallFrame{ts, 1, attrs, 1, nullptr});
}

Tensor Tensor::to(Device device, DType dtype) const {
  check_defined(*this, "to");
  if (same_device(this->device(), device)) return to(dtype);
  if (dtype == this->dtype()) return to(device);
  // Convert where it is cheaper to move fewer bytes.
  if (itemsize() > tessera::itemsize(dtype)) return to(dtype).to(device);
  return to(device).to(dtype);
}

Tensor Tensor::contiguous() const {
  check_defined(*this, "contiguous");
  if (is_contiguous()) return *this;
  TESSERA_OP(op, "contiguous");
  const TensorImpl* ts[] = {impl()};
  return call_unboxed_one(op, CallFrame{ts, 1, nullptr, 0, nullptr});
}

Tensor Tensor::clone() const {
  check_defined(*this, "clone");
  TESSERA_OP(op, "clone");
  const TensorImpl* ts[] = {impl()};
  return call_unboxed_one(op, CallFrame{ts, 1, nullptr, 0, nullptr});
}

Tensor& Tensor::fill_(const Scalar& value) {
  check_defined(*this, "fill_");
  TESSERA_OP(op, "fill_");
  const TensorImpl* ts[] = {impl()};
  tessera_value_t attrs[] = {value_scalar(value)};
  call_unboxed_one(op, CallFrame{ts, 1, attrs, 1, nullptr});
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_defined(*this, "copy_");
  TESSERA_CHECK(src.defined(), "copy_: the source tensor is undefined");
  TESSERA_OP(op, "copy_");
  if (same_device(device(), src.device())) {
    if (is_same(src)) return *this;
    const TensorImpl* ts[] = {impl(), src.impl()};
    tessera_value_t attrs[] = {value_bool(false)};
    call_unboxed_one(op, CallFrame{ts, 2, attrs, 1, nullptr});
    return *this;
  }
  shape::check_broadcast_to<int64_t>("copy_", src.sizes(), sizes());
  TESSERA_CHECK(dim() <= kMaxKernelDims && src.dim() <= kMaxKernelDims, "copy_: copying a ", src.dim(),
                "-D tensor into a ", dim(), "-D tensor across devices; kernels take at most ", kMaxKernelDims,
                " dimensions (Note [Kernel rank limit]); reshape or flatten it first");
  if (device().type() == DeviceType::Meta) return *this;  // meta tensors hold no data
  TESSERA_CHECK(src.device().type() != DeviceType::Meta,
                "copy_: the source is a meta tensor, which holds no data; ",
                "create the tensor on a real device to copy it to ", device().str());
  TESSERA_CHECK(!src.storage() || src.storage()->usable(),
                "copy_: the source tensor's storage is unusable because ", src.storage()->unusable_reason());
  TESSERA_CHECK(!storage() || storage()->live(),
                "copy_: the destination tensor's storage is unusable because ", storage()->unusable_reason());
  if (src.numel() == 0) return *this;
  // Two channels-last tensors of one shape and dtype lie alike byte for byte: move them as they are.
  if (dtype() == src.dtype() && sizes() == src.sizes() && detail::suggests_channels_last(*src.impl()) &&
      detail::channels_last_dense(sizes(), strides())) {
    transfer_bytes(*this, src);
    return *this;
  }
  // On the source's device when it can (Note [Non-contiguous transfers]), else on the host.
  Tensor s = src.is_contiguous() || device_copies_itself(src) ? src.contiguous()
                                                              : stage_view_on_host(src).view.contiguous();
  if (same_device(device(), s.device())) return copy_(s);
  bool direct = is_contiguous() && dtype() == s.dtype() && sizes() == s.sizes();
  if (direct) {
    transfer_bytes(*this, s);
  } else if (device_copies_itself(*this)) {
    Tensor staging = make_tensor(s.sizes(), s.dtype(), device());
    transfer_bytes(staging, s);
    copy_(staging);  // dtype conversion and strides on this device
  } else {
    // This device cannot convert or scatter itself (and its CPU fallback would come back here):
    // read-modify-write the destination's storage span through the host.
    HostSpan span = stage_view_on_host(*this);
    span.view.copy_(s.to(Device(DeviceType::CPU)));
    transfer_bytes(span.on_device, span.on_host);
  }
  return *this;
}

Tensor Tensor::reshape(IntArrayRef sizes) const {
  check_defined(*this, "reshape");
  std::vector<int64_t> shape = infer_size(sizes, numel());
  if (is_contiguous() || view_strides(this->sizes(), strides(), shape)) return view(shape);
  return contiguous().view(shape);
}

// ---- methods that forward to ops.h

Tensor Tensor::sum() const { return tessera::sum(*this); }
Tensor Tensor::sum(IntArrayRef dims, bool keepdim) const { return tessera::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return tessera::mean(*this); }
Tensor Tensor::mean(IntArrayRef dims, bool keepdim) const { return tessera::mean(*this, dims, keepdim); }
Tensor Tensor::matmul(const Tensor& other) const { return tessera::matmul(*this, other); }
Tensor Tensor::relu() const { return tessera::relu(*this); }
Tensor Tensor::neg() const { return tessera::neg(*this); }
Tensor Tensor::exp() const { return tessera::exp(*this); }
Tensor Tensor::abs() const { return tessera::abs(*this); }
Tensor Tensor::softmax(int64_t dim) const { return tessera::softmax(*this, dim); }
Tensor Tensor::operator-() const { return tessera::neg(*this); }

Tensor& Tensor::add_(const Tensor& other, const Scalar& alpha) {
  check_defined(*this, "add_");
  TESSERA_CHECK(other.defined(), "add_: argument 'other' is an undefined tensor");
  TESSERA_OP(op, "add_.Tensor");
  const TensorImpl* ts[] = {impl(), other.impl()};
  tessera_value_t attrs[] = {value_scalar(alpha)};
  call_unboxed_one(op, CallFrame{ts, 2, attrs, 1, nullptr});
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_defined(*this, "mul_");
  TESSERA_CHECK(other.defined(), "mul_: argument 'other' is an undefined tensor");
  TESSERA_OP(op, "mul_.Tensor");
  const TensorImpl* ts[] = {impl(), other.impl()};
  call_unboxed_one(op, CallFrame{ts, 2, nullptr, 0, nullptr});
  return *this;
}

// ---- free operators

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, wrapped_scalar(b, a)); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, wrapped_scalar(b, a)); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, wrapped_scalar(b, a)); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, wrapped_scalar(b, a)); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(wrapped_scalar(a, b), b); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(wrapped_scalar(a, b), b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(wrapped_scalar(a, b), b); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(wrapped_scalar(a, b), b); }

// flatten and item live here, not in core: they run ops (reshape, a copy to the host), and core
// links without the dispatcher (test CoreStandalone).
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (!defined()) detail::throw_undefined_tensor("flatten");
  const int64_t n = dim();
  if (n == 0) {
    const int64_t one = 1;
    return reshape(IntArrayRef(one));
  }
  const int64_t s = wrap_dim(start_dim, n), e = wrap_dim(end_dim, n);
  TESSERA_CHECK(s <= e, "flatten(): start_dim (", s, ") cannot come after end_dim (", e, ")");
  if (s == e) return *this;
  detail::SmallVector<int64_t, 8> shape;
  for (int64_t i = 0; i < s; ++i) shape.push_back(sizes()[size_t(i)]);
  int64_t flat = 1;
  for (int64_t i = s; i <= e; ++i) flat *= sizes()[size_t(i)];
  shape.push_back(flat);
  for (int64_t i = e + 1; i < n; ++i) shape.push_back(sizes()[size_t(i)]);
  return reshape(IntArrayRef(shape.data(), shape.size()));
}

Scalar Tensor::item() const {
  if (!defined()) detail::throw_undefined_tensor("item");
  detail::check_not_traced(*this, "item()");
  TESSERA_CHECK(numel() == 1, "item(): a tensor with ", numel(), " elements (shape ", sizes(),
                ") cannot be converted to a number; expected exactly one element");
  if (!is_cpu()) return cpu().item();
  const void* p = raw_const_data_ptr();
  return visit_dtype(dtype(), [&](auto zero) -> Scalar {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, bool>) {
      return Scalar(*static_cast<const uint8_t*>(p) != 0);
    } else {
      T v;
      std::memcpy(&v, p, sizeof(T));
      if constexpr (std::is_integral_v<T>) return Scalar(int64_t(v));
      else if constexpr (std::is_same_v<T, double>) return Scalar(v);
      else return Scalar(double(float(v)));
    }
  });
}

}  // namespace tessera
