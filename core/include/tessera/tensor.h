// Tensors. Note [Tensor model]
// A Tensor is a refcounted handle to a TensorImpl (copying a Tensor is one atomic increment). The
// impl holds sizes, strides (in elements), a storage offset, dtype, device and dispatch-key set, and
// shares a Storage (refcounted device memory) with its views. Views are metadata-only and live in
// core (tensor.cpp). Methods that compute (to, contiguous, clone, operators, reshape when it must
// copy) are declared here and implemented in the dispatcher layer of the same library.
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/allocator.h"
#include "tessera/array_ref.h"
#include "tessera/checked_math.h"
#include "tessera/device.h"
#include "tessera/quant_params.h"
#include "tessera/dispatch_key.h"
#include "tessera/dtype.h"
#include "tessera/error.h"
#include "tessera/export.h"
#include "tessera/intrusive_ptr.h"
#include "tessera/scalar.h"

namespace tessera {

// Note [Storage version]
// A storage's version names its current contents: it changes on every write the runtime can see
// (an in-place or out= op through the dispatcher, data_ptr() / raw_data_ptr()), and it is drawn
// from one process-wide counter, so no two storages ever share a version, even when one reuses the
// other's memory. Equal versions mean equal bytes; a kernel may keep something derived from a
// tensor (a prepacked weight) under its version and reuse it until the version moves. 0 is never
// a version. Reading through const_data_ptr() leaves it alone.
TESSERA_API uint64_t next_storage_version();

namespace detail {
// Memory for TensorImpl and StorageImpl objects, from per-thread free lists (Note [Pooled impls]
// in impl_pool.cpp). `n` is the object's size; impl_free must get the size impl_allocate got.
TESSERA_API void* impl_allocate(size_t n);
TESSERA_API void impl_free(void* p, size_t n) noexcept;
}  // namespace detail

// Refcounted device memory shared by a tensor and its views.
class TESSERA_API StorageImpl : public RefCounted {
 public:
  StorageImpl(DataPtr data, size_t nbytes) : data_(std::move(data)), nbytes_(nbytes) {}
  static void* operator new(size_t n) { return detail::impl_allocate(n); }
  static void operator delete(void* p, size_t n) noexcept { detail::impl_free(p, n); }
  void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return data_.device(); }
  // Note [Storage version].
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void bump_version() const { version_.store(next_storage_version(), std::memory_order_release); }
  // Note [Unusable storage]: set when a copy into this storage failed part-way, or when the plugin
  // that made its memory shut down (Note [Plugin generations] in allocator.h); any later use of a
  // tensor on it throws instead of reading partial data or another tensor's memory.
  bool usable() const { return usable_.load(std::memory_order_relaxed) && data_.live(); }
  void mark_unusable() { usable_.store(false, std::memory_order_relaxed); }
  // False once the plugin that made the memory shut down (a copy can no longer repair it).
  bool live() const { return data_.live(); }
  // Why usable() is false, for a message that continues "the tensor's storage is unusable because ".
  const char* unusable_reason() const {
    return data_.live() ? "a copy into it failed part-way (Note [Unusable storage]); recreate the tensor"
                        : "the plugin that allocated it was shut down (shutdown_plugins()) and its memory is gone; "
                          "recreate the tensor";
  }

 private:
  DataPtr data_;
  size_t nbytes_;
  std::atomic<bool> usable_{true};
  mutable std::atomic<uint64_t> version_{next_storage_version()};
};
using Storage = IntrusivePtr<StorageImpl>;

// Number of dimensions kept inline in a TensorImpl (no heap allocation up to this rank).
constexpr int kInlineDims = 6;

namespace detail {
// A geometry of at most kInlineDims dims found valid by check(): sizes and strides non-negative,
// and numel and the bytes it needs from its storage (offset included) computed without overflow.
// Only check() marks one as checked, so a TensorImpl built from it need not check again (Note [One-pass
// geometry check] in tensor.cpp).
class TESSERA_API CheckedGeometry {
 public:
  // Fills `out` and returns true; false for anything the one pass does not accept (more than
  // kInlineDims dims, a negative size or stride, an overflow), and the caller then checks the slow
  // way for the error message. (An out-parameter: returning the object by value copied it through
  // the stack right after its fields were stored, a store-forwarding stall per 16 bytes.)
  static bool check(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset, size_t itemsize,
                    CheckedGeometry& out);
  bool checked() const { return checked_; }
  IntArrayRef sizes() const { return IntArrayRef(dims_, size_t(ndim_)); }
  IntArrayRef strides() const { return IntArrayRef(dims_ + ndim_, size_t(ndim_)); }
  int64_t storage_offset() const { return storage_offset_; }
  int64_t numel() const { return numel_; }
  uint64_t nbytes() const { return nbytes_; }  // storage bytes the geometry reaches
  bool is_contiguous() const { return contiguous_; }

 private:
  int64_t dims_[2 * kInlineDims];
  int64_t storage_offset_ = 0;
  int64_t numel_ = 0;
  uint64_t nbytes_ = 0;
  int32_t ndim_ = 0;
  bool contiguous_ = true;
  bool checked_ = false;  // set by check(); a default-constructed geometry is not usable
};
}  // namespace detail

class TESSERA_API TensorImpl : public RefCounted {
 public:
  // Throws unless sizes and strides are non-negative, and the geometry (with the storage offset)
  // lies inside `storage` (Note [Checked extents]).
  TensorImpl(Storage storage, DType dtype, Device device, IntArrayRef sizes, IntArrayRef strides,
             int64_t storage_offset);
  // A geometry already checked against `storage` by check_geometry (make_tensor_strided's path).
  TensorImpl(Storage storage, DType dtype, Device device, const detail::CheckedGeometry& geometry);
  ~TensorImpl() override;
  // Subclasses (a semi-structured sparse impl) come from the same pool, by their own size.
  static void* operator new(size_t n) { return detail::impl_allocate(n); }
  static void operator delete(void* p, size_t n) noexcept { detail::impl_free(p, n); }

  IntArrayRef sizes() const { return IntArrayRef(sizes_, size_t(ndim_)); }
  IntArrayRef strides() const { return IntArrayRef(strides_, size_t(ndim_)); }
  int64_t dim() const { return ndim_; }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  DispatchKeySet key_set() const { return key_set_; }
  void set_key_set(DispatchKeySet ks) { key_set_ = ks; }
  int64_t storage_offset() const { return storage_offset_; }
  const Storage& storage() const { return storage_; }
  bool is_contiguous() const { return is_contiguous_; }
  // A tensor made from a C++ number for an operator (`t + 2.0`): promotes like a scalar.
  bool is_wrapped_number() const { return wrapped_number_; }
  void set_wrapped_number(bool v) { wrapped_number_ = v; }
  // Replace the geometry (used by views and as_strided). Recomputes numel and contiguity. Checks
  // the new geometry as the constructor does; on failure the impl is unchanged.
  void set_sizes_and_strides(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset);
  // The quantization parameters of a quantized tensor; null for every other tensor.
  const QuantParams* qparams() const { return qparams_.get(); }
  const IntrusivePtr<const QuantParams>& qparams_ptr() const { return qparams_; }
  // Attaches `q` (whose dtype must be this tensor's) and adds the Quantized dispatch key; a null
  // `q` removes both. Throws on a dtype mismatch.
  void set_qparams(IntrusivePtr<const QuantParams> q);

 private:
  void compute_derived();
  void commit_geometry(const detail::CheckedGeometry& g);
  Storage storage_;
  int64_t* sizes_;
  int64_t* strides_;
  int64_t inline_[2 * kInlineDims];
  int64_t numel_ = 0;
  int64_t storage_offset_ = 0;
  int32_t ndim_ = 0;
  DType dtype_;
  Device device_;
  DispatchKeySet key_set_;
  IntrusivePtr<const QuantParams> qparams_;
  bool is_contiguous_ = true;
  bool wrapped_number_ = false;
};

namespace detail {
// "numel(): the tensor is undefined (default-constructed); ..."
[[noreturn]] TESSERA_API void throw_undefined_tensor(const char* what);
}  // namespace detail

class TESSERA_API Tensor {
 public:
  Tensor() = default;  // undefined
  explicit Tensor(IntrusivePtr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return bool(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  int64_t use_count() const { return impl_.use_count(); }
  bool is_same(const Tensor& o) const { return impl_.get() == o.impl_.get(); }

  // ---- metadata (core). Every accessor throws on an undefined tensor.
  IntArrayRef sizes() const { return checked_impl("sizes")->sizes(); }
  IntArrayRef strides() const { return checked_impl("strides")->strides(); }
  int64_t size(int64_t dim) const;    // negative dims count from the end; checked
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return checked_impl("dim")->dim(); }
  int64_t numel() const { return checked_impl("numel")->numel(); }
  DType dtype() const { return checked_impl("dtype")->dtype(); }
  DType scalar_type() const { return checked_impl("scalar_type")->dtype(); }
  Device device() const { return checked_impl("device")->device(); }
  DispatchKeySet key_set() const { return checked_impl("key_set")->key_set(); }
  int64_t storage_offset() const { return checked_impl("storage_offset")->storage_offset(); }
  const Storage& storage() const { return checked_impl("storage")->storage(); }
  size_t itemsize() const { return tessera::itemsize(dtype()); }
  // numel() * itemsize(); throws when that overflows (a broadcast view of a huge shape).
  size_t nbytes() const;
  bool is_contiguous() const { return checked_impl("is_contiguous")->is_contiguous(); }
  bool is_cpu() const { return device().is_cpu(); }
  // True when the tensor is on the device type named `device_name` ("cpu", "my_hardware_device").
  bool is(std::string_view device_name) const;

  // ---- metadata-only views (core). Dims may be negative. Each checks its arguments.
  Tensor view(IntArrayRef sizes) const;  // one size may be -1; fails if strides do not allow it
  Tensor as_strided(IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> storage_offset = std::nullopt) const;
  Tensor permute(IntArrayRef dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose (0-D and 1-D returned as is)
  Tensor select(int64_t dim, int64_t index) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor expand(IntArrayRef sizes) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;  // view when possible, else copy
  Tensor operator[](int64_t index) const { return select(0, index); }
  // Returns view(sizes) when the strides allow it, else contiguous().view(sizes).
  Tensor reshape(IntArrayRef sizes) const;

  // ---- data access (CPU only; other devices give an error that says to call .to("cpu") first)
  // data_ptr and raw_data_ptr hand out writable memory and so move the storage's version (Note
  // [Storage version]); const_data_ptr is for reading and leaves it alone.
  template <typename T> T* data_ptr() const;
  void* raw_data_ptr() const;  // CPU only; element (0,...,0)
  template <typename T> const T* const_data_ptr() const;
  const void* raw_const_data_ptr() const;
  template <typename T> T item() const;
  Scalar item() const;

  // ---- computing methods (dispatcher)
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  // With non_blocking, a copy from pinned host memory (is_pinned()) to a device of the type it is
  // pinned for is queued on that device's current stream and may complete after this returns, when
  // the plugin offers memory_copy_from_pinned (ABI 1.3): do not write the source before the stream
  // has passed the copy (Stream::synchronize, or an Event recorded after it). Otherwise as to(device).
  Tensor to(Device device, bool non_blocking) const;
  // Host memory from a plugin's pinned allocator (TensorOptions::pinned_memory, pin_memory()).
  bool is_pinned() const;
  // A copy of this CPU tensor in host memory pinned for `accelerator`'s device type (this tensor when
  // it already is); an ordinary copy when that plugin has no pinned allocator.
  Tensor pin_memory(Device accelerator) const;
  Tensor to(const char* device) const { return to(Device(device)); }
  Tensor to(const std::string& device) const { return to(Device(device)); }
  Tensor cpu() const { return to(Device(DeviceType::CPU)); }
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor& fill_(const Scalar& value);
  Tensor& zero_() { return fill_(0); }
  Tensor& copy_(const Tensor& src);
  Tensor sum() const;
  Tensor sum(IntArrayRef dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(IntArrayRef dims, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor relu() const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor abs() const;
  Tensor softmax(int64_t dim) const;
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& other);

  Tensor operator-() const;
  Tensor& operator+=(const Tensor& o) { return add_(o); }
  Tensor& operator*=(const Tensor& o) { return mul_(o); }

  // ---- autograd (libtessera_autograd; Note [Tensor autograd methods] in autograd_hooks.h): the
  // methods of torch::Tensor, the same as tessera::autograd's free functions of the same names.
  bool requires_grad() const;
  // Makes this a leaf that requires grad (or not); returns *this.
  const Tensor& requires_grad_(bool requires_grad = true) const;
  // The accumulated gradient (undefined when none).
  Tensor grad() const;
  // autograd::backward(*this, gradient, retain_graph, create_graph).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  bool is_leaf() const;
  // The same storage and geometry outside any graph.
  Tensor detach() const;

 private:
  TensorImpl* checked_impl(const char* what) const {
    if (__builtin_expect(!impl_, 0)) detail::throw_undefined_tensor(what);
    return impl_.get();
  }
  IntrusivePtr<TensorImpl> impl_;
};

// Contiguous strides of `sizes`.
TESSERA_API std::vector<int64_t> contiguous_strides(IntArrayRef sizes);
// Product of sizes; checked against overflow.
TESSERA_API int64_t compute_numel(IntArrayRef sizes);
// Wraps a (possibly negative) dim into [0, ndim); throws naming the range otherwise
// ("dimension 3 out of range for a 2-D tensor (expected -2..1)"). As in PyTorch, ndim 0 accepts -1 and 0.
TESSERA_API int64_t wrap_dim(int64_t dim, int64_t ndim);
// Resolves one -1 in `shape` so that it holds `numel` elements; checks the product. Throws naming the
// shape and numel otherwise.
TESSERA_API std::vector<int64_t> infer_size(IntArrayRef shape, int64_t numel);
// Strides that let a tensor of (old_sizes, old_strides) be viewed as new_sizes without a copy
// (PyTorch's computeStride), or nullopt when no such strides exist (reshape must copy then).
TESSERA_API std::optional<std::vector<int64_t>> view_strides(IntArrayRef old_sizes, IntArrayRef old_strides,
                                                             IntArrayRef new_sizes);
// A new tensor with fresh storage from the device type's allocator (no initialisation).
TESSERA_API Tensor make_tensor(IntArrayRef sizes, DType dtype, Device device);
TESSERA_API Tensor make_tensor_strided(IntArrayRef sizes, IntArrayRef strides, DType dtype, Device device);

// Note [Memory overlap]
// PyTorch's has_internal_overlap and get_overlap_status. An in-place or out= op must not write
// through a tensor whose elements share memory (an expanded view: internal overlap), nor read an
// input that shares part of the written memory (partial overlap, which includes the same memory
// under different strides, as in x.t().add_(x)); full overlap (x.add_(x)) is fine. TooHard means
// the geometry is not dense and no cheap answer exists: such calls are allowed, as in PyTorch.
enum class MemOverlap { No, Yes, TooHard };
enum class MemOverlapStatus { Full, Partial, No, TooHard };
// True when the elements cover a dense block of memory exactly once under some dim order.
TESSERA_API bool is_non_overlapping_and_dense(const TensorImpl& t);
TESSERA_API MemOverlap has_internal_overlap(const TensorImpl& t);
TESSERA_API MemOverlapStatus get_overlap_status(const TensorImpl& a, const TensorImpl& b);

// Note [Views as slices of a reshape]
// A view (sizes, strides, offset) inside a contiguous base of `base_numel` elements whose dims nest:
// sorted by stride, each dim's span divides the next one's stride. It is then a reshape of the base
// to the extents returned (outermost first), in which each of the view's dims is whole or a slice
// [start, start + size) and the gaps between their spans are extra dims read at one index (size 1,
// view_dim -1). Dims of size 1 are left out (their stride says nothing). Empty when the view does
// not nest that way (overlapping, stride 0, or a stride that does not divide). A dim whose size
// divides its span and that starts at 0 there is taken as whole, any rest of the span becoming an
// extra dim. Captures use it
// to express select / narrow / chunk of a tensor with symbolic sizes as ops (reshape, slice, pad).
struct NestedDim {
  int64_t extent, stride, start, size;
  int64_t view_dim;  // -1: a dim the view does not have (read at `start`)
};
TESSERA_API std::vector<NestedDim> nest_view(IntArrayRef sizes, IntArrayRef strides, int64_t offset,
                                             int64_t base_numel);

// Prints like PyTorch: "tensor([[1., 2.],\n        [3., 4.]])" plus device/dtype when not default.
// Copies to the CPU when needed.
TESSERA_API std::ostream& operator<<(std::ostream& os, const Tensor& t);
TESSERA_API std::string to_string(const Tensor& t);

// Free-function operators (dispatcher).
TESSERA_API Tensor operator+(const Tensor& a, const Tensor& b);
TESSERA_API Tensor operator-(const Tensor& a, const Tensor& b);
TESSERA_API Tensor operator*(const Tensor& a, const Tensor& b);
TESSERA_API Tensor operator/(const Tensor& a, const Tensor& b);
TESSERA_API Tensor operator+(const Tensor& a, const Scalar& b);
TESSERA_API Tensor operator-(const Tensor& a, const Scalar& b);
TESSERA_API Tensor operator*(const Tensor& a, const Scalar& b);
TESSERA_API Tensor operator/(const Tensor& a, const Scalar& b);
TESSERA_API Tensor operator+(const Scalar& a, const Tensor& b);
TESSERA_API Tensor operator-(const Scalar& a, const Tensor& b);
TESSERA_API Tensor operator*(const Scalar& a, const Tensor& b);
TESSERA_API Tensor operator/(const Scalar& a, const Tensor& b);

// Note [Reading traced tensors]
// A tensor with the Export key is a tracing tensor of graph capture (compiler/): it has sizes and a
// dtype but no data. Reading its value (item(), data_ptr(), raw_data_ptr()) calls the handler that
// capture sets, which throws naming the call and the op that produced the tensor; without a handler
// the read throws a generic message. Returns the previous handler.
using TracedReadHandler = void (*)(const TensorImpl& t, const char* call);
TESSERA_API TracedReadHandler set_traced_read_handler(TracedReadHandler handler);

// ---- template definitions
namespace detail {
TESSERA_API void check_data_access(const Tensor& t, DType requested);
// Throws (through the traced-read handler) when `t` is being traced for export; `call` names the read.
TESSERA_API void check_not_traced(const Tensor& t, const char* call);
}
template <typename T>
T* Tensor::data_ptr() const {
  detail::check_data_access(*this, dtype_of_v<T>);
  return static_cast<T*>(raw_data_ptr());
}
template <typename T>
const T* Tensor::const_data_ptr() const {
  detail::check_data_access(*this, dtype_of_v<T>);
  return static_cast<const T*>(raw_const_data_ptr());
}
template <typename T>
T Tensor::item() const {
  return item().to<T>();
}

}  // namespace tessera
