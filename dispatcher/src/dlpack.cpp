// DLPack export and import (Notes [DLPack layout], [DLPack devices] and [DLPack read-only] in
// tessera/dlpack.h).
#include "tessera/dlpack.h"

#include <algorithm>
#include <string>
#include <vector>

#include "tessera/allocator.h"
#include "tessera/checked_math.h"
#include "tessera/error.h"
#include "tessera/ops.h"

namespace tessera {

using namespace dlpack;  // NOLINT(google-build-using-namespace): the DL* names of the spec

namespace {

constexpr int32_t kMaxDims = 64;

// Handles that are pointers: the storage offset is folded into `data` (Note [DLPack devices]).
bool handle_is_pointer(DeviceType t) { return t == DeviceType::CPU || t == DeviceType::CUDA; }

// What an exported capsule owns besides itself: the tensor (so its storage lives) and the geometry.
struct ExportContext {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
};

template <typename Managed>
void delete_exported(Managed* self) {
  if (!self) return;
  delete static_cast<ExportContext*>(self->manager_ctx);
  delete self;
}

ExportContext* export_into(const Tensor& t, DLTensor& out) {
  TESSERA_CHECK(t.defined(), "to_dlpack: the tensor is undefined (default-constructed)");
  TESSERA_CHECK(t.storage()->usable(), "to_dlpack: the tensor's storage is unusable because ",
                t.storage()->unusable_reason());
  const DLDataType dtype = to_dlpack_dtype(t.dtype());
  const DLDevice device = to_dlpack_device(t.device());
  t.storage()->bump_version();  // writable memory handed out, as data_ptr() does (Note [Storage version])
  auto* ctx = new ExportContext{t, {t.sizes().begin(), t.sizes().end()}, {t.strides().begin(), t.strides().end()}};
  const uint64_t byte_offset = uint64_t(t.storage_offset()) * t.itemsize();
  char* base = static_cast<char*>(t.storage()->data());
  const bool fold = handle_is_pointer(t.device().type());
  out.data = fold && base ? base + byte_offset : base;
  out.device = device;
  out.ndim = int32_t(ctx->shape.size());
  out.dtype = dtype;
  out.shape = ctx->shape.data();
  out.strides = ctx->strides.data();
  out.byte_offset = fold ? 0 : byte_offset;
  return ctx;
}

// A capsule of either kind over `t`, its deleter set; nothing leaks when the export throws.
template <typename Managed>
Managed* new_capsule(const Tensor& t) {
  auto* m = new Managed{};
  try {
    m->manager_ctx = export_into(t, m->dl_tensor);
  } catch (...) {
    delete m;
    throw;
  }
  m->deleter = &delete_exported<Managed>;
  return m;
}

[[noreturn]] void refuse(const std::string& what) {
  detail::throw_error(ErrorCode::InvalidArgument, "from_dlpack: " + what);
}

// The capsule's memory as a tensor; `release(ctx)` is the capsule's deleter. Throws without
// calling it (the caller does).
Tensor adopt(const DLTensor& dl, void* capsule, DataPtr::Deleter release) {
  if (dl.ndim < 0 || dl.ndim > kMaxDims)
    refuse("ndim is " + std::to_string(dl.ndim) + ", expected 0.." + std::to_string(kMaxDims));
  if (dl.ndim > 0 && !dl.shape) refuse("shape is NULL for ndim " + std::to_string(dl.ndim));
  const DType dtype = dtype_from_dlpack(dl.dtype);
  const Device device = device_from_dlpack(dl.device);
  const int64_t item = int64_t(itemsize(dtype));
  std::vector<int64_t> sizes(dl.shape, dl.shape + dl.ndim), strides(size_t(dl.ndim));
  int64_t numel = 1, row_major = 1;
  for (int32_t i = dl.ndim - 1; i >= 0; --i) {
    const int64_t n = sizes[size_t(i)];
    if (n < 0) refuse("shape[" + std::to_string(i) + "] is " + std::to_string(n) + ", expected >= 0");
    strides[size_t(i)] = dl.strides ? dl.strides[i] : row_major;
    if (strides[size_t(i)] < 0)
      refuse("strides[" + std::to_string(i) + "] is " + std::to_string(strides[size_t(i)]) +
             "; a Tessera tensor has no negative strides: make the array contiguous before exporting it");
    row_major = saturating_mul(row_major, std::max<int64_t>(n, 1));
    numel = saturating_mul(numel, n);
  }
  // Bytes the geometry reaches: (1 + sum (size - 1) * stride) * itemsize, none when empty.
  int64_t extent = numel == 0 ? 0 : 1;
  for (int32_t i = 0; i < dl.ndim && numel != 0; ++i) {
    auto step = checked_mul(sizes[size_t(i)] - 1, strides[size_t(i)]);
    auto sum = step ? checked_add(extent, *step) : std::nullopt;
    if (!sum) refuse("shape[" + std::to_string(i) + "] * strides[" + std::to_string(i) + "] overflows int64");
    extent = *sum;
  }
  auto nbytes = checked_mul(extent, item);
  if (!nbytes || dl.byte_offset > uint64_t(INT64_MAX) || !checked_add(*nbytes, int64_t(dl.byte_offset)))
    refuse("the tensor's byte extent (" + std::to_string(extent) + " elements of " + std::to_string(item) +
           " bytes, byte_offset " + std::to_string(dl.byte_offset) + ") overflows int64");
  if (!dl.data && numel > 0)
    refuse("data is NULL but the shape holds " + std::to_string(numel) + " elements");
  if (dl.byte_offset % uint64_t(item) != 0)
    refuse("byte_offset " + std::to_string(dl.byte_offset) + " is not a multiple of the item size " +
           std::to_string(item) + " of " + std::string(dtype_name(dtype)));
  // Other devices' memory belongs to their plugin: load it (throws naming the device when none).
  if (!device.is_cpu()) {
    get_allocator(device.type());
    const int64_t count = device_count(device.type());
    if (device.index() >= count)
      refuse("the capsule's memory is on " + device.str() + " but " + device_type_name(device.type()) + " has " +
             std::to_string(count) + " device(s) here (Note [DLPack devices])");
  }
  char* handle = static_cast<char*>(dl.data);
  int64_t storage_offset = int64_t(dl.byte_offset) / item;
  int64_t storage_bytes = *nbytes + int64_t(dl.byte_offset);
  if (handle_is_pointer(device.type()) && handle) {
    handle += dl.byte_offset;
    storage_offset = 0;
    storage_bytes = *nbytes;
  }
  DataPtr data(handle, capsule, release, device);
  Storage storage = make_intrusive<StorageImpl>(std::move(data), size_t(storage_bytes));
  return Tensor(make_intrusive<TensorImpl>(std::move(storage), dtype, device, sizes, strides, storage_offset));
}

template <typename Managed>
void call_deleter(void* capsule, void* /*handle*/) {
  auto* m = static_cast<Managed*>(capsule);
  if (m->deleter) m->deleter(m);
}

template <typename Managed>
Tensor import_capsule(Managed* m, bool copy) {
  Tensor t;
  try {
    t = adopt(m->dl_tensor, m, &call_deleter<Managed>);
  } catch (...) {
    call_deleter<Managed>(m, nullptr);  // the tensor was never made: the capsule is ours to release
    throw;
  }
  // From here the storage owns the capsule (its DataPtr calls the deleter once).
  if (!copy) return t;
  Tensor owned = empty(t.sizes(), TensorOptions().dtype(t.dtype()).device(t.device()));
  owned.copy_(t);
  return owned;  // `t` goes here: the deleter runs before from_dlpack returns
}

}  // namespace

DLDevice to_dlpack_device(const Device& device) {
  DLDevice out{};
  if (tessera_dl_device_of(int32_t(device.type()), device.has_index() ? device.index() : 0, &out) == 0) return out;
  detail::throw_error(ErrorCode::InvalidArgument,
                      "to_dlpack: a tensor on the meta device has no memory to share; make it on a real device");
}

Device device_from_dlpack(DLDevice device) {
  const int32_t id = device.device_id;
  if (id < 0) refuse("device_id is " + std::to_string(id) + ", expected >= 0");
  switch (device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:  // pinned host memory is host memory
      return Device(DeviceType::CPU);
    case kDLCUDA: return Device(DeviceType::CUDA, id);
    case kDLOpenCL: return Device(DeviceType::OpenCL, id);
    case kDLExtDev: {
      const int32_t slot = id / kDLPackExtDevSlotStride + 1, index = id % kDLPackExtDevSlotStride;
      if (slot > 3)
        refuse("kDLExtDev device_id " + std::to_string(id) + " names privateuse slot " + std::to_string(slot) +
               "; Tessera has slots 1..3 (device_id = (slot - 1) * 65536 + index, Note [DLPack devices])");
      if (index > INT16_MAX) refuse("kDLExtDev device index " + std::to_string(index) + " is too large");
      const DeviceType t = slot == 1 ? DeviceType::PrivateUse1 : slot == 2 ? DeviceType::PrivateUse2
                                                                             : DeviceType::PrivateUse3;
      return Device(t, index);
    }
    default: break;
  }
  refuse("DLPack device type " + std::to_string(device.device_type) +
         " has no Tessera device (known: kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3, kDLOpenCL 4, kDLExtDev 12); "
         "copy the data to the CPU in the producing framework first");
}

DLDataType to_dlpack_dtype(DType dtype) {
  DLDataType out{};
  if (tessera_dl_data_type_of(int32_t(dtype), &out) == 0) return out;
  detail::throw_error(ErrorCode::InvalidArgument,
                      "to_dlpack: a " + std::string(dtype_name(dtype)) +
                          " tensor cannot be shared: quantized dtypes have no DLPack type (dequantize() or "
                          "int_repr() first)");
}

DType dtype_from_dlpack(DLDataType dtype) {
  if (dtype.lanes != 1)
    refuse("dtype lanes is " + std::to_string(dtype.lanes) + "; vector dtypes are not supported (expected 1)");
  switch (dtype.code) {
    case kDLBool: if (dtype.bits == 8) return DType::Bool; break;
    case kDLUInt: if (dtype.bits == 8) return DType::UInt8; break;
    case kDLInt:
      if (dtype.bits == 8) return DType::Int8;
      if (dtype.bits == 16) return DType::Int16;
      if (dtype.bits == 32) return DType::Int32;
      if (dtype.bits == 64) return DType::Int64;
      break;
    case kDLFloat:
      if (dtype.bits == 16) return DType::Float16;
      if (dtype.bits == 32) return DType::Float32;
      if (dtype.bits == 64) return DType::Float64;
      break;
    case kDLBfloat: if (dtype.bits == 16) return DType::BFloat16; break;
    default: break;
  }
  refuse("DLPack dtype code " + std::to_string(dtype.code) + " with " + std::to_string(dtype.bits) +
         " bits has no Tessera dtype (supported: bool, uint8, int8..int64, float16, bfloat16, float32, float64)");
}

DLManagedTensorVersioned* to_dlpack(const Tensor& tensor, DLPackExportOptions options) {
  auto* m = new_capsule<DLManagedTensorVersioned>(tensor);
  m->version = {kMajorVersion, kMinorVersion};
  m->flags = options.read_only ? kFlagReadOnly : 0;
  return m;
}

DLManagedTensor* to_dlpack_unversioned(const Tensor& tensor) { return new_capsule<DLManagedTensor>(tensor); }

Tensor from_dlpack(DLManagedTensorVersioned* capsule, DLPackImportOptions options) {
  TESSERA_CHECK(capsule, "from_dlpack: the capsule is NULL");
  if (capsule->version.major != kMajorVersion) {
    const uint32_t major = capsule->version.major;
    call_deleter<DLManagedTensorVersioned>(capsule, nullptr);  // the spec: safe to call, nothing else is
    refuse("the capsule is DLPack " + std::to_string(major) + ".x; this runtime reads DLPack 1.x");
  }
  const bool copy = options.copy || (capsule->flags & kFlagReadOnly) != 0;  // Note [DLPack read-only]
  return import_capsule(capsule, copy);
}

Tensor from_dlpack(DLManagedTensor* capsule, DLPackImportOptions options) {
  TESSERA_CHECK(capsule, "from_dlpack: the capsule is NULL");
  return import_capsule(capsule, options.copy);
}

}  // namespace tessera
