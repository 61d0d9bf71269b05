// TensorImpl, metadata and metadata-only views. See Note [Tensor model] in tensor.h. The semantics
// of each view (sizes, strides, storage offset, errors) follow PyTorch's.
#include "tessera/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

#include "tessera/autograd_hooks.h"

namespace tessera {

// Note [Autograd meta outside TensorImpl] (autograd_hooks.h).
namespace {
std::atomic<detail::ViewCreatedHook> g_view_created_hook{nullptr};
std::atomic<detail::ImplReleasedHook> g_impl_released_hook{nullptr};
}  // namespace

void detail::set_autograd_core_hooks(ViewCreatedHook on_view, ImplReleasedHook on_release) {
  g_view_created_hook.store(on_view, std::memory_order_release);
  g_impl_released_hook.store(on_release, std::memory_order_release);
}

// Note [Tensor autograd methods] (autograd_hooks.h).
namespace {
std::atomic<const detail::AutogradMethods*> g_autograd_methods{nullptr};

const detail::AutogradMethods* autograd_methods() { return g_autograd_methods.load(std::memory_order_acquire); }

[[noreturn]] void no_autograd(const char* method) {
  detail::throw_error(ErrorCode::Unavailable, std::string("Tensor::") + method +
                                                  ": autograd is not loaded; link libtessera_autograd "
                                                  "(Tessera::autograd, or Tessera::nn) into the program");
}
}  // namespace

void detail::set_autograd_methods(const AutogradMethods* methods) {
  g_autograd_methods.store(methods, std::memory_order_release);
}

bool Tensor::requires_grad() const {
  const detail::AutogradMethods* m = autograd_methods();
  return m && m->requires_grad(*this);
}

const Tensor& Tensor::requires_grad_(bool requires_grad) const {
  if (const detail::AutogradMethods* m = autograd_methods()) m->set_requires_grad(*this, requires_grad);
  else if (requires_grad) no_autograd("requires_grad_");
  return *this;
}

Tensor Tensor::grad() const {
  const detail::AutogradMethods* m = autograd_methods();
  return m ? m->grad(*this) : Tensor();
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  const detail::AutogradMethods* m = autograd_methods();
  if (!m) no_autograd("backward");
  m->backward(*this, gradient, retain_graph, create_graph);
}

bool Tensor::is_leaf() const {
  const detail::AutogradMethods* m = autograd_methods();
  return !m || m->is_leaf(*this);
}

Tensor Tensor::detach() const {
  if (const detail::AutogradMethods* m = autograd_methods()) return m->detach(*this);
  const TensorImpl* t = checked_impl("detach");  // no graph: a new handle on the same data
  auto impl = make_intrusive<TensorImpl>(t->storage(), t->dtype(), t->device(), t->sizes(), t->strides(),
                                         t->storage_offset());
  impl->set_key_set(t->key_set());
  if (t->qparams()) impl->set_qparams(t->qparams_ptr());
  impl->set_wrapped_number(t->is_wrapped_number());
  return Tensor(std::move(impl));
}

namespace {

std::string shape_str(IntArrayRef s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// Sizes or strides of a view under construction: inline up to kInlineDims + 1 (an unsqueeze can
// add one), on the heap beyond, so that views of ordinary rank allocate only their TensorImpl.
class DimVector {
 public:
  DimVector() = default;
  explicit DimVector(size_t n) { resize(n); }
  explicit DimVector(IntArrayRef a) {
    resize(a.size());
    std::copy(a.begin(), a.end(), data());
  }
  size_t size() const { return n_; }
  int64_t* data() { return heap_.empty() ? inline_ : heap_.data(); }
  const int64_t* data() const { return heap_.empty() ? inline_ : heap_.data(); }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  operator IntArrayRef() const { return IntArrayRef(data(), n_); }  // NOLINT(google-explicit-constructor)
  void push_back(int64_t v) { insert(n_, v); }
  void insert(size_t at, int64_t v) {
    resize(n_ + 1);
    int64_t* d = data();
    for (size_t i = n_ - 1; i > at; --i) d[i] = d[i - 1];
    d[at] = v;
  }
  void erase(size_t at) {
    int64_t* d = data();
    for (size_t i = at; i + 1 < n_; ++i) d[i] = d[i + 1];
    --n_;
  }

 private:
  void resize(size_t n) {
    if (n > kCapacity && heap_.empty()) heap_.assign(inline_, inline_ + n_);
    if (!heap_.empty() || n > kCapacity) heap_.resize(std::max(n, size_t(1)));
    n_ = n;
  }
  static constexpr size_t kCapacity = size_t(kInlineDims) + 1;
  int64_t inline_[kCapacity];
  std::vector<int64_t> heap_;
  size_t n_ = 0;
};

Tensor make_view(const Tensor& self, IntArrayRef sizes, IntArrayRef strides, int64_t offset) {
  auto impl = make_intrusive<TensorImpl>(self.storage(), self.dtype(), self.device(), sizes, strides, offset);
  impl->set_key_set(self.key_set());
  if (const QuantParams* q = self.impl()->qparams()) {
    // Note [Views of per-channel quantized tensors]: the channel parameters follow dim axis();
    // a view that keeps the rank and the size and stride of that dim keeps them meaningful.
    // Others (select, transpose, reshape across it) would pair channels with the wrong values.
    TESSERA_CHECK(q->qscheme() == QScheme::PerTensorAffine ||
                      (int64_t(sizes.size()) == self.dim() && sizes[size_t(q->axis())] == self.sizes()[size_t(q->axis())] &&
                       strides[size_t(q->axis())] == self.strides()[size_t(q->axis())]),
                  "view of a per-channel quantized tensor ", self.sizes(), " (axis ", q->axis(), ") to sizes ", sizes,
                  " would move or cut its channel dim; call dequantize() first");
    impl->set_qparams(self.impl()->qparams_ptr());
  }
  Tensor view(std::move(impl));
  if (__builtin_expect(self.key_set().has(Functionality::Autograd), 0))
    if (detail::ViewCreatedHook hook = g_view_created_hook.load(std::memory_order_acquire)) hook(self, view);
  return view;
}

void check_defined(const Tensor& t, const char* what) {
  if (!t.defined()) detail::throw_undefined_tensor(what);
}

// Storage elements a geometry needs; throws naming it when the extent overflows int64.
int64_t required_storage_elements(IntArrayRef sizes, IntArrayRef strides, int64_t offset) {
  std::optional<int64_t> e = storage_extent(sizes, strides, offset);
  TESSERA_CHECK(e.has_value(), "tensor geometry sizes ", sizes, " strides ", strides, " storage offset ", offset,
                " overflows int64 storage offsets");
  return *e;
}

}  // namespace

namespace detail {
void throw_undefined_tensor(const char* what) {
  throw_error(ErrorCode::InvalidArgument,
              str_cat(what, "(): the tensor is undefined (default-constructed); create it with a factory such as "
                      "tessera::empty() first"));
}
}  // namespace detail

std::optional<int64_t> storage_extent(IntArrayRef sizes, IntArrayRef strides, int64_t offset) {
  if (sizes.size() != strides.size() || offset < 0) return std::nullopt;
  int64_t last = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || strides[i] < 0) return std::nullopt;
    if (sizes[i] == 0) return 0;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::optional<int64_t> span = checked_mul(sizes[i] - 1, strides[i]);
    if (!span) return std::nullopt;
    std::optional<int64_t> next = checked_add(last, *span);
    if (!next) return std::nullopt;
    last = *next;
  }
  return checked_add(last, 1);
}

std::optional<uint64_t> checked_nbytes(int64_t elements, size_t itemsize) {
  uint64_t n;
  if (elements < 0 || __builtin_mul_overflow(uint64_t(elements), uint64_t(itemsize), &n)) return std::nullopt;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Free helpers

std::vector<int64_t> contiguous_strides(IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t z = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = z;
    // Like PyTorch, a size-0 dim counts as 1 so that strides stay distinct and positive.
    z = saturating_mul(z, std::max<int64_t>(sizes[i], 1));
  }
  return strides;
}

int64_t compute_numel(IntArrayRef sizes) {
  int64_t n = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    TESSERA_CHECK(sizes[i] >= 0, "invalid shape ", sizes, ": size ", sizes[i], " at dimension ", i,
                  " is negative; sizes must be >= 0");
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::optional<int64_t> next = checked_mul(n, sizes[i]);
    TESSERA_CHECK(next.has_value(), "invalid shape ", sizes, ": the number of elements overflows int64");
    n = *next;
  }
  return n;
}

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  // A 0-dim tensor accepts dims -1 and 0, as in PyTorch (wrap_scalar).
  const int64_t n = ndim <= 0 ? 1 : ndim;
  TESSERA_CHECK(dim >= -n && dim < n, "dimension ", dim, " out of range for a ", ndim, "-D tensor (expected ", -n,
                "..", n - 1, ")");
  return dim < 0 ? dim + n : dim;
}

std::vector<int64_t> infer_size(IntArrayRef shape, int64_t numel) {
  std::vector<int64_t> out = shape.vec();
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TESSERA_CHECK(infer < 0, "shape ", shape, " is invalid: only one dimension can be inferred (-1)");
      infer = int(i);
    } else {
      TESSERA_CHECK(shape[i] >= 0, "shape ", shape, " is invalid: size ", shape[i], " at dimension ", i,
                    " is negative; use -1 for one inferred size");
      std::optional<int64_t> next = checked_mul(known, shape[i]);
      TESSERA_CHECK(next.has_value(), "shape ", shape, " is invalid: the number of elements overflows int64");
      known = *next;
    }
  }
  if (infer >= 0) {
    TESSERA_CHECK(known != 0, "cannot reshape a tensor of ", numel, " elements into shape ", shape,
                  " because the unspecified dimension size -1 can be any value and is ambiguous");
    TESSERA_CHECK(numel % known == 0, "shape ", shape, " is invalid for input of size ", numel);
    out[size_t(infer)] = numel / known;
  } else {
    TESSERA_CHECK(known == numel, "shape ", shape, " is invalid for input of size ", numel);
  }
  return out;
}

std::optional<std::vector<int64_t>> view_strides(IntArrayRef old_sizes, IntArrayRef old_strides,
                                                 IntArrayRef new_sizes) {
  // PyTorch's computeStride: the view is possible when each run of old dims that is contiguous
  // with itself ("chunk") maps onto a run of new dims with the same number of elements.
  if (old_sizes.empty()) return std::vector<int64_t>(new_sizes.size(), 1);
  int64_t numel = 1;
  for (int64_t s : old_sizes) numel *= s;
  if (numel == 0 && old_sizes.equals(new_sizes)) return old_strides.vec();
  std::vector<int64_t> new_strides(new_sizes.size());
  if (numel == 0) {
    for (int64_t d = int64_t(new_sizes.size()) - 1; d >= 0; --d) {
      new_strides[size_t(d)] = d == int64_t(new_sizes.size()) - 1
                                   ? 1
                                   : std::max<int64_t>(new_sizes[size_t(d + 1)], 1) * new_strides[size_t(d + 1)];
    }
    return new_strides;
  }
  int64_t view_d = int64_t(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = int64_t(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[size_t(tensor_d)];
    if (tensor_d == 0 || (old_sizes[size_t(tensor_d - 1)] != 1 &&
                          old_strides[size_t(tensor_d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[size_t(view_d)] == 1)) {
        new_strides[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[size_t(tensor_d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

// Note [Memory overlap] in tensor.h.
bool is_non_overlapping_and_dense(const TensorImpl& t) {
  const int64_t n = t.dim();
  IntArrayRef sizes = t.sizes(), strides = t.strides();
  if (n == 1) return sizes[0] < 2 || strides[0] == 1;
  DimVector perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[size_t(i)] = i;
  std::sort(perm.data(), perm.data() + n, [&](int64_t a, int64_t b) {
    if (sizes[size_t(a)] < 2) return false;
    if (sizes[size_t(b)] < 2) return true;
    return strides[size_t(a)] < strides[size_t(b)];
  });
  int64_t require = 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = perm[size_t(i)];
    if (sizes[size_t(d)] < 2) return true;
    if (strides[size_t(d)] != require) return false;
    require *= sizes[size_t(d)];
  }
  return true;
}

// Note [Views as slices of a reshape] in tensor.h.
std::vector<NestedDim> nest_view(IntArrayRef sizes, IntArrayRef strides, int64_t offset, int64_t base_numel) {
  std::vector<size_t> dims;  // the dims of size > 1, innermost (smallest stride) first
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  std::vector<NestedDim> out;  // innermost first until reversed
  if (offset < 0 || base_numel <= 0) return {};
  auto take = [&](int64_t extent, int64_t stride, int64_t size, int64_t view_dim) {
    out.push_back({extent, stride, (offset / stride) % extent, size, view_dim});
  };
  int64_t span = 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t st = strides[dims[k]], sz = sizes[dims[k]];
    if (sz == 0 || st <= 0 || st % span != 0) return {};
    if (st > span) take(st / span, span, 1, -1);
    const int64_t next = k + 1 < dims.size() ? strides[dims[k + 1]] : base_numel;
    if (next % st != 0 || next / st < sz) return {};
    const int64_t gap = next / st;
    const bool whole = gap % sz == 0 && (offset / st) % sz == 0;
    take(whole ? sz : gap, st, sz, int64_t(dims[k]));
    span = whole ? st * sz : next;
  }
  if (span < base_numel) {
    if (base_numel % span != 0) return {};
    take(base_numel / span, span, 1, -1);
  }
  int64_t at = 0;
  for (const NestedDim& d : out) {
    if (d.start + d.size > d.extent) return {};
    at += d.start * d.stride;
  }
  if (at != offset) return {};
  std::reverse(out.begin(), out.end());
  return out;
}

MemOverlap has_internal_overlap(const TensorImpl& t) {
  if (is_non_overlapping_and_dense(t)) return MemOverlap::No;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.strides()[size_t(i)] == 0 && t.sizes()[size_t(i)] > 1) return MemOverlap::Yes;
  return MemOverlap::TooHard;
}

MemOverlapStatus get_overlap_status(const TensorImpl& a, const TensorImpl& b) {
  if (&a == &b) return MemOverlapStatus::Full;
  if (a.numel() == 0 || b.numel() == 0) return MemOverlapStatus::No;
  if (!is_non_overlapping_and_dense(a) || !is_non_overlapping_and_dense(b)) return MemOverlapStatus::TooHard;
  if (!a.storage() || a.storage().get() != b.storage().get()) return MemOverlapStatus::No;
  // Byte ranges inside the one storage; both fit it (Note [Checked extents]), so nothing overflows.
  const int64_t a_begin = a.storage_offset() * int64_t(itemsize(a.dtype()));
  const int64_t a_end = a_begin + a.numel() * int64_t(itemsize(a.dtype()));
  const int64_t b_begin = b.storage_offset() * int64_t(itemsize(b.dtype()));
  const int64_t b_end = b_begin + b.numel() * int64_t(itemsize(b.dtype()));
  if (a_begin == b_begin && a_end == b_end)
    return a.strides() == b.strides() ? MemOverlapStatus::Full : MemOverlapStatus::Partial;
  if (a_begin < b_end && b_begin < a_end) return MemOverlapStatus::Partial;
  return MemOverlapStatus::No;
}

// ---------------------------------------------------------------------------------------------
// TensorImpl

TensorImpl::TensorImpl(Storage storage, DType dtype, Device device, IntArrayRef sizes, IntArrayRef strides,
                       int64_t storage_offset)
    : storage_(std::move(storage)), sizes_(inline_), strides_(inline_ + kInlineDims), dtype_(dtype),
      device_(device), key_set_(DispatchKeySet::dense(device.type())) {
  set_sizes_and_strides(sizes, strides, storage_offset);
}

TensorImpl::TensorImpl(Storage storage, DType dtype, Device device, const detail::CheckedGeometry& geometry)
    : storage_(std::move(storage)), sizes_(inline_), strides_(inline_ + kInlineDims), dtype_(dtype),
      device_(device), key_set_(DispatchKeySet::dense(device.type())) {
  TESSERA_INTERNAL_ASSERT(geometry.checked() && geometry.nbytes() <= (storage_ ? uint64_t(storage_->nbytes()) : 0),
                          "an unchecked geometry, or one given a storage smaller than it needs");
  commit_geometry(geometry);
}

void TensorImpl::set_qparams(IntrusivePtr<const QuantParams> q) {
  TESSERA_CHECK(!q || q->dtype() == dtype_, "set_qparams: the quantization parameters are for ", q ? q->dtype() : dtype_,
                " but the tensor has dtype ", dtype_);
  const DispatchKeySet qkey = DispatchKeySet::functionality(Functionality::Quantized);
  key_set_ = q ? key_set_ | qkey : key_set_ - qkey;
  qparams_ = std::move(q);
}

TensorImpl::~TensorImpl() {
  if (__builtin_expect(key_set_.has(Functionality::Autograd), 0))
    if (detail::ImplReleasedHook hook = g_impl_released_hook.load(std::memory_order_acquire)) hook(this);
  if (sizes_ != inline_) delete[] sizes_;
}

// Note [One-pass geometry check]: the hot path of every new tensor and view. A geometry of at most
// kInlineDims dims is checked in one pass, which also gives its numel, contiguity and the bytes it
// needs; anything else (including every invalid geometry) is checked the slow way, which names
// what is wrong. make_tensor_strided sizes the new storage from the checked geometry and hands it
// to the TensorImpl constructor, so a fresh tensor's geometry is checked exactly once.
bool detail::CheckedGeometry::check(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset, size_t item,
                                    CheckedGeometry& g) {
  g.checked_ = false;
  if (sizes.size() > size_t(kInlineDims) || sizes.size() != strides.size() || storage_offset < 0) return false;
  const int32_t n = int32_t(sizes.size());
  int64_t numel = 1, last = storage_offset, expected = 1;
  bool ok = true, contiguous = true, empty = false;
  for (int32_t i = 0; i < n; ++i)  // in compute_numel's order, so that it overflows where that does
    ok &= sizes[size_t(i)] >= 0 && !__builtin_mul_overflow(numel, sizes[size_t(i)], &numel);
  for (int32_t i = n - 1; i >= 0; --i) {
    const int64_t size = sizes[size_t(i)], stride = strides[size_t(i)];
    g.dims_[i] = size;
    g.dims_[n + i] = stride;
    ok &= stride >= 0;
    empty |= size == 0;
    int64_t span;
    ok &= !__builtin_mul_overflow(size - 1, stride, &span) && !__builtin_add_overflow(last, span, &last);
    if (size != 1) {
      contiguous &= stride == expected;
      ok &= !__builtin_mul_overflow(expected, size, &expected);
    }
  }
  if (empty) {
    last = -1;  // an empty tensor needs no storage
    numel = 0;
  }
  uint64_t needed = 0;
  ok = ok && !__builtin_add_overflow(last, 1, &last) && !__builtin_mul_overflow(uint64_t(last), uint64_t(item), &needed);
  if (!ok) return false;
  g.ndim_ = n;
  g.storage_offset_ = storage_offset;
  g.numel_ = numel;
  g.nbytes_ = needed;
  g.contiguous_ = contiguous || numel == 0;  // PyTorch's rule: an empty tensor is contiguous
  g.checked_ = true;
  return true;
}

void TensorImpl::commit_geometry(const detail::CheckedGeometry& g) {
  if (sizes_ != inline_) delete[] sizes_;
  sizes_ = inline_;
  strides_ = inline_ + kInlineDims;
  const int32_t n = int32_t(g.sizes().size());
  for (int32_t i = 0; i < n; ++i) {
    sizes_[i] = g.sizes()[size_t(i)];
    strides_[i] = g.strides()[size_t(i)];
  }
  ndim_ = n;
  numel_ = g.numel();
  storage_offset_ = g.storage_offset();
  is_contiguous_ = g.is_contiguous();
}

void TensorImpl::set_sizes_and_strides(IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset) {
  const uint64_t available = storage_ ? uint64_t(storage_->nbytes()) : 0;
  // The checked geometry is a copy: `sizes`/`strides` may point into this impl's own arrays.
  detail::CheckedGeometry g;
  if (__builtin_expect(detail::CheckedGeometry::check(sizes, strides, storage_offset, itemsize(dtype_), g) &&
                           g.nbytes() <= available,
                       1)) {
    commit_geometry(g);
    return;
  }
  TESSERA_CHECK(sizes.size() == strides.size(), "tensor geometry: got ", sizes.size(), " sizes ", sizes, " but ",
                strides.size(), " strides ", strides, "; expected one stride per size");
  TESSERA_CHECK(sizes.size() <= size_t(std::numeric_limits<int32_t>::max()), "tensor geometry: too many dims");
  TESSERA_CHECK(storage_offset >= 0, "tensor geometry: storage offset ", storage_offset,
                " is negative; expected >= 0");
  const int32_t n = int32_t(sizes.size());
  std::vector<int64_t> tmp(size_t(2 * n));
  if (n > 0) {
    std::memcpy(tmp.data(), sizes.data(), size_t(n) * sizeof(int64_t));
    std::memcpy(tmp.data() + n, strides.data(), size_t(n) * sizeof(int64_t));
  }
  const IntArrayRef new_sizes(tmp.data(), size_t(n)), new_strides(tmp.data() + n, size_t(n));
  const int64_t numel = compute_numel(new_sizes);  // checks sizes >= 0
  for (int32_t i = 0; i < n; ++i)
    TESSERA_CHECK(tmp[size_t(n + i)] >= 0, "tensor geometry: negative strides are not supported, got strides ",
                  strides);
  const int64_t elements = required_storage_elements(new_sizes, new_strides, storage_offset);
  const std::optional<uint64_t> needed = checked_nbytes(elements, itemsize(dtype_));
  TESSERA_CHECK(needed.has_value() && *needed <= available, "tensor geometry: sizes ", new_sizes, ", strides ",
                new_strides, ", storage offset ", storage_offset, " and itemsize ", itemsize(dtype_), " need ",
                needed ? std::to_string(*needed) : std::string("more than 2^64"),
                " bytes, out of bounds for a storage of ", available,
                " bytes; use sizes and strides that stay inside the storage");
  if (n > kInlineDims) {
    if (sizes_ == inline_ || ndim_ != n) {  // else reuse the heap block
      if (sizes_ != inline_) delete[] sizes_;
      sizes_ = new int64_t[size_t(2 * n)];
    }
    strides_ = sizes_ + n;
  } else {
    if (sizes_ != inline_) delete[] sizes_;
    sizes_ = inline_;
    strides_ = inline_ + kInlineDims;
  }
  if (n > 0) {
    std::memcpy(sizes_, tmp.data(), size_t(n) * sizeof(int64_t));
    std::memcpy(strides_, tmp.data() + n, size_t(n) * sizeof(int64_t));
  }
  ndim_ = n;
  numel_ = numel;
  storage_offset_ = storage_offset;
  compute_derived();
}

void TensorImpl::compute_derived() {
  // PyTorch's rule: dims of size 1 do not constrain their stride; an empty tensor is contiguous.
  is_contiguous_ = true;
  if (numel_ == 0) return;
  int64_t expected = 1;
  for (int32_t i = ndim_ - 1; i >= 0; --i) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) {
      is_contiguous_ = false;
      return;
    }
    expected *= sizes_[i];
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor metadata

int64_t Tensor::size(int64_t dim) const {
  check_defined(*this, "size");
  TESSERA_CHECK(this->dim() > 0, "size(", dim, "): the tensor is 0-dim and has no dimensions");
  return sizes()[size_t(wrap_dim(dim, this->dim()))];
}

int64_t Tensor::stride(int64_t dim) const {
  check_defined(*this, "stride");
  TESSERA_CHECK(this->dim() > 0, "stride(", dim, "): the tensor is 0-dim and has no dimensions");
  return strides()[size_t(wrap_dim(dim, this->dim()))];
}

bool Tensor::is(std::string_view device_name) const {
  check_defined(*this, "is");
  const DeviceType t = device().type();
  if (device_type_name(t) == device_name) return true;
  // The slot spelling ("privateuse1") stays valid after renaming, as in Device parsing.
  if (int(t) >= int(DeviceType::PrivateUse1))
    return device_name == "privateuse" + std::to_string(int(t) - int(DeviceType::PrivateUse1) + 1);
  return false;
}

// ---------------------------------------------------------------------------------------------
// Views

Tensor Tensor::view(IntArrayRef sizes) const {
  check_defined(*this, "view");
  const std::vector<int64_t> shape = infer_size(sizes, numel());
  auto st = view_strides(this->sizes(), this->strides(), shape);
  TESSERA_CHECK(st.has_value(), "view(", shape_str(sizes), "): size ", shape_str(shape),
                " is not compatible with the input tensor's size ", this->sizes(), " and stride ", this->strides(),
                " (at least one dimension spans across two contiguous subspaces); use .reshape(...) instead");
  return make_view(*this, shape, *st, storage_offset());
}

Tensor Tensor::as_strided(IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> storage_offset) const {
  check_defined(*this, "as_strided");
  TESSERA_CHECK(sizes.size() == strides.size(), "as_strided: got ", sizes.size(), " sizes ", sizes, " and ",
                strides.size(), " strides ", strides, "; expected the same number");
  for (size_t i = 0; i < sizes.size(); ++i) {
    TESSERA_CHECK(sizes[i] >= 0, "as_strided: size ", sizes[i], " at dimension ", i, " is negative");
    TESSERA_CHECK(strides[i] >= 0, "as_strided: negative strides are not supported, got strides ", strides);
  }
  const int64_t offset = storage_offset.value_or(this->storage_offset());
  TESSERA_CHECK(offset >= 0, "as_strided: storage offset ", offset, " is negative; expected >= 0");
  const std::optional<int64_t> needed = storage_extent(sizes, strides, offset);
  const std::optional<uint64_t> checked = needed ? checked_nbytes(*needed, itemsize()) : std::nullopt;
  const uint64_t needed_bytes = checked.value_or(0);
  const size_t storage_bytes = storage() ? storage()->nbytes() : 0;
  if (!checked || needed_bytes > storage_bytes) {
    const std::string need = checked ? std::to_string(needed_bytes) : std::string("more than 2^64");
    TESSERA_CHECK(false, "as_strided: sizes ", sizes, ", strides ", strides, ", storage offset ", offset,
                  " and itemsize ", itemsize(), " require a storage of ", need,
                  " bytes, out of bounds for a storage of ", storage_bytes, " bytes");
  }
  return make_view(*this, sizes, strides, offset);
}

Tensor Tensor::permute(IntArrayRef dims) const {
  check_defined(*this, "permute");
  const int64_t n = dim();
  TESSERA_CHECK(int64_t(dims.size()) == n, "permute(", dims, "): got ", dims.size(), " dims for a ", n,
                "-D tensor; expected a permutation of all ", n, " dims");
  DimVector sz(static_cast<size_t>(n)), st(static_cast<size_t>(n));
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = wrap_dim(dims[size_t(i)], n);
    TESSERA_CHECK(!seen[size_t(d)], "permute(", dims, "): dim ", d, " appears more than once; expected each of 0..",
                  n - 1, " exactly once");
    seen[size_t(d)] = true;
    sz[size_t(i)] = sizes()[size_t(d)];
    st[size_t(i)] = strides()[size_t(d)];
  }
  return make_view(*this, sz, st, storage_offset());
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  check_defined(*this, "transpose");
  const int64_t n = dim();
  const int64_t a = wrap_dim(dim0, n), b = wrap_dim(dim1, n);
  DimVector sz(sizes()), st(strides());
  if (n > 0) {
    std::swap(sz[size_t(a)], sz[size_t(b)]);
    std::swap(st[size_t(a)], st[size_t(b)]);
  }
  return make_view(*this, sz, st, storage_offset());
}

Tensor Tensor::t() const {
  check_defined(*this, "t");
  TESSERA_CHECK(dim() <= 2, "t() expects a tensor with <= 2 dimensions, but the tensor is ", dim(),
                "-D; use transpose(dim0, dim1) or permute(...)");
  return dim() < 2 ? transpose(0, 0) : transpose(0, 1);
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  check_defined(*this, "select");
  TESSERA_CHECK(this->dim() > 0, "select() cannot be applied to a 0-dim tensor");
  const int64_t d = wrap_dim(dim, this->dim());
  const int64_t size = sizes()[size_t(d)];
  TESSERA_CHECK(index >= -size && index < size, "select(): index ", index, " out of range for tensor of size ",
                sizes(), " at dimension ", d, " (expected ", -size, "..", size - 1, ")");
  const int64_t i = index < 0 ? index + size : index;
  DimVector sz(sizes()), st(strides());
  const int64_t offset = storage_offset() + i * st[size_t(d)];
  sz.erase(size_t(d));
  st.erase(size_t(d));
  return make_view(*this, sz, st, offset);
}

Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  check_defined(*this, "slice");
  TESSERA_CHECK(this->dim() > 0, "slice() cannot be applied to a 0-dim tensor");
  TESSERA_CHECK(step > 0, "slice(): step ", step, " is not positive; slice step must be positive");
  const int64_t d = wrap_dim(dim, this->dim());
  const int64_t size = sizes()[size_t(d)];
  int64_t s = start.value_or(0), e = end.value_or(std::numeric_limits<int64_t>::max());
  if (s < 0) s += size;
  if (e < 0) e += size;
  s = std::clamp<int64_t>(s, 0, size);
  e = e < s ? s : std::min(e, size);
  DimVector sz(sizes()), st(strides());
  const int64_t offset = storage_offset() + s * st[size_t(d)];
  // ceil((e - s) / step) without forming e - s + step - 1, which overflows for a huge step.
  const int64_t n = e > s ? (e - s - 1) / step + 1 : 0;
  sz[size_t(d)] = n;
  if (n > 1) {
    const std::optional<int64_t> new_stride = checked_mul(st[size_t(d)], step);
    TESSERA_CHECK(new_stride.has_value(), "slice(): step ", step, " times stride ", st[size_t(d)],
                  " overflows int64");
    st[size_t(d)] = *new_stride;
  } else {
    st[size_t(d)] = saturating_mul(st[size_t(d)], step);  // a size-0/1 dim never uses its stride
  }
  return make_view(*this, sz, st, offset);
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  check_defined(*this, "narrow");
  TESSERA_CHECK(this->dim() > 0, "narrow() cannot be applied to a 0-dim tensor");
  TESSERA_CHECK(length >= 0, "narrow(): length ", length, " is negative; length must be non-negative");
  const int64_t d = wrap_dim(dim, this->dim());
  const int64_t size = sizes()[size_t(d)];
  TESSERA_CHECK(start >= -size && start <= size, "narrow(): start ", start, " out of range (expected to be in range of [",
                -size, ", ", size, "])");
  if (start < 0) start += size;
  TESSERA_CHECK(start <= size - length, "narrow(): start (", start, ") + length (", length,
                ") exceeds dimension size (", size, ")");
  return slice(d, start, start + length, 1);
}

Tensor Tensor::expand(IntArrayRef sizes) const {
  check_defined(*this, "expand");
  const int64_t ndim = int64_t(sizes.size()), tdim = dim();
  TESSERA_CHECK(ndim >= tdim, "expand(", sizes, "): the number of sizes provided (", ndim,
                ") must be greater or equal to the number of dimensions in the tensor (", tdim, ")");
  DimVector sz(static_cast<size_t>(ndim)), st(static_cast<size_t>(ndim));
  for (int64_t i = ndim - 1; i >= 0; --i) {
    const int64_t offset = ndim - 1 - i;
    const int64_t d = tdim - 1 - offset;
    int64_t size = d >= 0 ? this->sizes()[size_t(d)] : 1;
    int64_t stride = d >= 0 ? this->strides()[size_t(d)]
                            : (i == ndim - 1 ? 1 : saturating_mul(sz[size_t(i + 1)], st[size_t(i + 1)]));
    int64_t target = sizes[size_t(i)];
    if (target == -1) {
      TESSERA_CHECK(d >= 0, "expand(", sizes, "): the expanded size -1 isn't allowed in a leading, non-existing "
                    "dimension ", i);
      target = size;
    }
    TESSERA_CHECK(target >= 0, "expand(", sizes, "): size ", target, " at dimension ", i,
                  " is negative; use -1 to keep a size");
    if (size != target) {
      TESSERA_CHECK(size == 1, "expand(", sizes, "): the expanded size of the tensor (", target,
                    ") must match the existing size (", size, ") at non-singleton dimension ", i,
                    "; target sizes: ", sizes, ", tensor sizes: ", this->sizes());
      size = target;
      stride = 0;
    }
    sz[size_t(i)] = size;
    st[size_t(i)] = stride;
  }
  return make_view(*this, sz, st, storage_offset());
}

Tensor Tensor::squeeze() const {
  check_defined(*this, "squeeze");
  DimVector sz, st;
  for (int64_t i = 0; i < dim(); ++i) {
    if (sizes()[size_t(i)] != 1) {
      sz.push_back(sizes()[size_t(i)]);
      st.push_back(strides()[size_t(i)]);
    }
  }
  return make_view(*this, sz, st, storage_offset());
}

Tensor Tensor::squeeze(int64_t dim) const {
  check_defined(*this, "squeeze");
  const int64_t d = wrap_dim(dim, this->dim());
  DimVector sz(sizes()), st(strides());
  if (this->dim() > 0 && sz[size_t(d)] == 1) {
    sz.erase(size_t(d));
    st.erase(size_t(d));
  }
  return make_view(*this, sz, st, storage_offset());
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  check_defined(*this, "unsqueeze");
  const int64_t n = this->dim();
  const int64_t d = wrap_dim(dim, n + 1);
  DimVector sz(sizes()), st(strides());
  const int64_t new_stride = d >= n ? 1 : saturating_mul(sz[size_t(d)], st[size_t(d)]);
  sz.insert(size_t(d), 1);
  st.insert(size_t(d), new_stride);
  return make_view(*this, sz, st, storage_offset());
}


// ---------------------------------------------------------------------------------------------
// Factories and data access

Tensor make_tensor(IntArrayRef sizes, DType dtype, Device device) {
  // Hot path (every operator output): no heap allocation for the strides up to kInlineDims.
  if (sizes.size() <= size_t(kInlineDims)) {
    int64_t strides[kInlineDims];
    int64_t z = 1;
    for (size_t i = sizes.size(); i-- > 0;) {
      strides[i] = z;
      z = saturating_mul(z, std::max<int64_t>(sizes[i], 1));
    }
    return make_tensor_strided(sizes, IntArrayRef(strides, sizes.size()), dtype, device);
  }
  return make_tensor_strided(sizes, contiguous_strides(sizes), dtype, device);
}

Tensor make_tensor_strided(IntArrayRef sizes, IntArrayRef strides, DType dtype, Device device) {
  detail::CheckedGeometry geometry;
  const bool checked = detail::CheckedGeometry::check(sizes, strides, 0, itemsize(dtype), geometry);
  if (__builtin_expect(!checked, 0)) {
    // Say which part is wrong.
    TESSERA_CHECK(sizes.size() == strides.size(), "make_tensor_strided: got ", sizes.size(), " sizes ", sizes,
                  " and ", strides.size(), " strides ", strides, "; expected the same number");
    compute_numel(sizes);  // checks sizes
    for (size_t i = 0; i < strides.size(); ++i)
      TESSERA_CHECK(strides[i] >= 0, "make_tensor_strided: negative strides are not supported, got strides ",
                    strides);
  }
  uint64_t nbytes;
  if (checked) {
    nbytes = geometry.nbytes();
  } else {
    const std::optional<uint64_t> checked = checked_nbytes(required_storage_elements(sizes, strides, 0), itemsize(dtype));
    TESSERA_CHECK(checked.has_value(), "make_tensor: shape ", sizes, " of dtype ", dtype,
                  " needs more bytes than fit in 64 bits");
    nbytes = *checked;
  }
  TESSERA_CHECK(nbytes <= uint64_t(std::numeric_limits<int64_t>::max()), "make_tensor: shape ", sizes, " of dtype ",
                dtype, " needs more bytes than fit in 63 bits");
  Allocator* allocator = get_allocator(device.type());
  DataPtr data = allocator->allocate(size_t(nbytes), device.index());
  // The allocator may resolve "the current device" to a concrete index.
  const Device actual = data.device().type() == device.type() ? data.device() : device;
  Storage storage = make_intrusive<StorageImpl>(std::move(data), size_t(nbytes));
  if (__builtin_expect(checked, 1))
    return Tensor(make_intrusive<TensorImpl>(std::move(storage), dtype, actual, geometry));
  return Tensor(make_intrusive<TensorImpl>(std::move(storage), dtype, actual, sizes, strides, 0));
}

size_t Tensor::nbytes() const {
  const std::optional<uint64_t> n = checked_nbytes(numel(), itemsize());
  TESSERA_CHECK(n.has_value(), "nbytes(): ", numel(), " elements of ", itemsize(), " bytes overflow 64 bits");
  return size_t(*n);
}

namespace {
std::atomic<TracedReadHandler> g_traced_read_handler{nullptr};

}  // namespace

// Note [Reading traced tensors] (tensor.h).
void detail::check_not_traced(const Tensor& t, const char* call) {
  if (__builtin_expect(!t.key_set().has(Functionality::Export), 1)) return;
  if (TracedReadHandler h = g_traced_read_handler.load(std::memory_order_acquire)) h(*t.impl(), call);
  detail::throw_error(ErrorCode::InvalidArgument,
                      std::string(call) + ": the tensor is being traced for export and has no data; a program "
                                          "whose control flow depends on tensor values cannot be captured");
}

TracedReadHandler set_traced_read_handler(TracedReadHandler handler) {
  return g_traced_read_handler.exchange(handler, std::memory_order_acq_rel);
}

namespace detail {
void check_data_access(const Tensor& t, DType requested) {
  TESSERA_CHECK(t.defined(), "data_ptr<", requested, ">(): the tensor is undefined (default-constructed)");
  detail::check_not_traced(t, "data_ptr()");
  TESSERA_CHECK(t.is_cpu(), "data_ptr<", requested, ">(): the tensor is on device '", t.device().str(),
                "' and its memory is not addressable from the host; call .to(\"cpu\") first");
  TESSERA_CHECK(t.dtype() == requested, "data_ptr<", requested, ">(): the tensor has dtype ", t.dtype(),
                ", not ", requested, "; ask for the C++ element type of ", t.dtype(), ", or convert first with .to(",
                requested, ")");
  TESSERA_CHECK(!t.storage() || t.storage()->usable(),
                "data_ptr(): the tensor's storage is unusable because a copy into it failed part-way "
                "(Note [Unusable storage]); recreate the tensor");
}
}  // namespace detail

// Note [Storage version] (tensor.h): versions must never repeat, not be ordered across threads, so
// each thread takes them from the shared counter in blocks (one atomic add per 1024 storages).
uint64_t next_storage_version() {
  static std::atomic<uint64_t> counter{1};
  constexpr uint64_t kBlock = 1024;
  __attribute__((tls_model("initial-exec"))) static thread_local uint64_t next = 0, end = 0;  // Note [Hot thread-locals]
  if (__builtin_expect(next == end, 0)) {
    next = counter.fetch_add(kBlock, std::memory_order_relaxed);
    end = next + kBlock;
  }
  return next++;
}

const void* Tensor::raw_const_data_ptr() const {
  check_defined(*this, "raw_data_ptr");
  detail::check_not_traced(*this, "raw_data_ptr()");
  TESSERA_CHECK(is_cpu(), "raw_data_ptr(): the tensor is on device '", device().str(),
                "' and its memory is not addressable from the host; call .to(\"cpu\") first");
  const Storage& s = storage();
  if (!s) return nullptr;
  TESSERA_CHECK(s->usable(), "raw_data_ptr(): the tensor's storage is unusable because a copy into it failed "
                "part-way (Note [Unusable storage]); recreate the tensor");
  if (!s->data()) return nullptr;
  return static_cast<const char*>(s->data()) + storage_offset() * int64_t(itemsize());
}

void* Tensor::raw_data_ptr() const {
  const void* p = raw_const_data_ptr();
  if (p) storage()->bump_version();  // Note [Storage version]: the caller may write through it
  return const_cast<void*>(p);
}


}  // namespace tessera
