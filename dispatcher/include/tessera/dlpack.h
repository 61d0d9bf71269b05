// DLPack in C++: share a tensor's memory with another framework and take theirs, without a copy
// where the device allows (docs/plugins.md and docs/plugin-guide.md, "DLPack").
//
// Note [DLPack layout]
// The structs below are written from the DLPack 1.x specification (dlpack.h, major 1): the same
// field order, types and sizes, checked by static_assert. They live in tessera::dlpack so that a
// translation unit may also include the project's own dlpack.h: a pointer to its
// DLManagedTensorVersioned (or DLManagedTensor) converts to ours with reinterpret_cast.
//
// Note [DLPack devices]
//   cpu -> kDLCPU (1), cuda -> kDLCUDA (2), opencl -> kDLOpenCL (4), device_id = the device index.
//   A privateuse slot (renamed or not: "npu", "my_hardware_device") -> kDLExtDev (12) with
//   device_id = (slot - 1) * kDLPackExtDevSlotStride + index. So privateuse1 index 0 is
//   (kDLExtDev, 0) and privateuse2 index 1 is (kDLExtDev, 65537), whatever the slots are named, and
//   importing (kDLExtDev, id) gives back the same slot and index: a renamed backend round-trips.
//   The meta device has no memory to share.
// The data pointer is the device's memory handle (Note [Device memory] in plugin_abi.h). On the
// CPU and CUDA, whose handles are pointers, the tensor's storage offset is folded into `data` and
// byte_offset is 0 (NumPy ignores byte_offset); on OpenCL and the privateuse devices `data` is the
// handle and byte_offset the offset of the first element, since a handle is not a pointer.
// Importing adopts the memory as that device's handle without a copy (the plugin must be the one
// that made it, or its handles must be pointers); the tensor keeps the capsule alive and calls
// its deleter exactly once, when the last tensor or view on it goes.
//
// Note [DLPack read-only]
// A tensor has no read-only mode, so importing a capsule with DLPACK_FLAG_BITMASK_READ_ONLY set
// COPIES its data into memory the tensor owns (on the same device) and calls the deleter before
// from_dlpack returns: writes to the tensor never reach the producer's memory.
// DLPackImportOptions::copy forces the copy for any capsule.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera {
namespace dlpack {

constexpr uint32_t kMajorVersion = 1;  // the DLPack major this layout is
constexpr uint32_t kMinorVersion = 1;  // the minor this runtime writes
constexpr uint64_t kFlagReadOnly = UINT64_C(1) << 0;       // DLPACK_FLAG_BITMASK_READ_ONLY
constexpr uint64_t kFlagIsCopied = UINT64_C(1) << 1;       // DLPACK_FLAG_BITMASK_IS_COPIED
constexpr uint64_t kFlagSubbytePadded = UINT64_C(1) << 2;  // DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED

enum DLDeviceType : int32_t {
  kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLOpenCL = 4, kDLVulkan = 7, kDLMetal = 8, kDLVPI = 9,
  kDLROCM = 10, kDLROCMHost = 11, kDLExtDev = 12, kDLCUDAManaged = 13, kDLOneAPI = 14,
};
enum DLDataTypeCode : uint8_t {
  kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLOpaqueHandle = 3, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6,
};

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLDevice {
  int32_t device_type;  // DLDeviceType
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // DLDataTypeCode
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;    // ndim entries
  int64_t* strides;  // ndim entries in elements; NULL: compact row-major
  uint64_t byte_offset;
};
// The legacy, unversioned capsule (DLPack 0.x).
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
// The DLPack 1.x capsule. Fields up to `flags` stay where they are in every 1.x.
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

static_assert(sizeof(DLDevice) == 8 && sizeof(DLDataType) == 4);
static_assert(sizeof(DLTensor) == 48 && offsetof(DLTensor, ndim) == 16 && offsetof(DLTensor, dtype) == 20 &&
              offsetof(DLTensor, shape) == 24 && offsetof(DLTensor, byte_offset) == 40);
static_assert(sizeof(DLManagedTensor) == 64 && offsetof(DLManagedTensor, deleter) == 56);
static_assert(sizeof(DLManagedTensorVersioned) == 80 && offsetof(DLManagedTensorVersioned, flags) == 24 &&
              offsetof(DLManagedTensorVersioned, dl_tensor) == 32);

}  // namespace dlpack

// Note [DLPack devices]: privateuse slot s, index i <-> (kDLExtDev, (s - 1) * stride + i).
constexpr int32_t kDLPackExtDevSlotStride = 1 << 16;

// The DLPack device of `device` (Note [DLPack devices]); an index -1 counts as 0. Throws for meta.
TESSERA_API dlpack::DLDevice to_dlpack_device(const Device& device);
// The Tessera device a DLPack device names. Throws naming the device type for one Tessera has no
// device for (kDLVulkan, kDLROCM, ...) and for a kDLExtDev id outside the three slots.
TESSERA_API Device device_from_dlpack(dlpack::DLDevice device);
// DLPack dtypes: bool (kDLBool, 8 bits), uint8, int8..int64, float16, bfloat16, float32, float64,
// all with lanes 1. Throws for the quantized dtypes (no DLPack type) and, the other way, for any
// other code, bit width or lanes != 1, naming what it got.
TESSERA_API dlpack::DLDataType to_dlpack_dtype(DType dtype);
TESSERA_API DType dtype_from_dlpack(dlpack::DLDataType dtype);

struct DLPackExportOptions {
  // Sets DLPACK_FLAG_BITMASK_READ_ONLY: the consumer promises not to write. (optional) defaults to
  // false.
  bool read_only = false;
};
struct DLPackImportOptions {
  // Copy the data into memory the tensor owns (Note [DLPack read-only]) even when the capsule is
  // writable. (optional) defaults to false: zero-copy unless the capsule is read-only.
  bool copy = false;
};

// A new capsule over `tensor`'s memory (no copy; Note [DLPack devices]). The capsule holds a
// reference to the storage until its deleter runs; the consumer calls the deleter exactly once.
// Like data_ptr(), exporting moves the storage's version (Note [Storage version]). Throws for an
// undefined tensor, a meta or quantized tensor, or an unusable storage.
TESSERA_API dlpack::DLManagedTensorVersioned* to_dlpack(const Tensor& tensor, DLPackExportOptions options = {});
// The same as a legacy unversioned capsule (for consumers that predate DLPack 1.0).
TESSERA_API dlpack::DLManagedTensor* to_dlpack_unversioned(const Tensor& tensor);

// A tensor over the capsule's memory; takes ownership of `capsule` (its deleter is called exactly
// once: when the last tensor on the memory goes, after a copy, or before an error is thrown).
// Checks everything first, since a capsule may come from anywhere: a null capsule or data pointer
// with a non-empty shape, a major version other than 1, ndim < 0 or above 64, a null shape, negative
// sizes or strides, a size or stride product or byte count that overflows int64, a dtype Tessera has
// no type for (lanes != 1 included), byte_offset not a multiple of the item size, a device with no
// Tessera counterpart. Each throws tessera::Error naming the field, the value and the fix.
TESSERA_API Tensor from_dlpack(dlpack::DLManagedTensorVersioned* capsule, DLPackImportOptions options = {});
TESSERA_API Tensor from_dlpack(dlpack::DLManagedTensor* capsule, DLPackImportOptions options = {});

}  // namespace tessera
