// DLPack in C++: share a tensor's memory with another framework and take theirs, without a copy
// where the device allows (docs/plugins.md and docs/plugin-guide.md, "DLPack").
//
// The structs are the SDK's C ones (tessera/dlpack_abi.h, Notes [DLPack layout] and [DLPack
// devices] there) under their DLPack names in tessera::dlpack; a pointer to a DLManagedTensorVersioned
// (or DLManagedTensor) of the official dlpack.h converts to ours with reinterpret_cast.
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
#include "tessera/dlpack_abi.h"
#include "tessera/dtype.h"
#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera {
namespace dlpack {

constexpr uint32_t kMajorVersion = TESSERA_DL_MAJOR_VERSION;  // the DLPack major this layout is
constexpr uint32_t kMinorVersion = TESSERA_DL_MINOR_VERSION;  // the minor this runtime writes
constexpr uint64_t kFlagReadOnly = TESSERA_DL_FLAG_READ_ONLY;
constexpr uint64_t kFlagIsCopied = TESSERA_DL_FLAG_IS_COPIED;
constexpr uint64_t kFlagSubbytePadded = TESSERA_DL_FLAG_SUBBYTE_PADDED;

enum DLDeviceType : int32_t {
  kDLCPU = TESSERA_DL_CPU, kDLCUDA = TESSERA_DL_CUDA, kDLCUDAHost = TESSERA_DL_CUDA_HOST,
  kDLOpenCL = TESSERA_DL_OPENCL, kDLVulkan = TESSERA_DL_VULKAN, kDLMetal = TESSERA_DL_METAL, kDLVPI = TESSERA_DL_VPI,
  kDLROCM = TESSERA_DL_ROCM, kDLROCMHost = TESSERA_DL_ROCM_HOST, kDLExtDev = TESSERA_DL_EXT_DEV,
  kDLCUDAManaged = TESSERA_DL_CUDA_MANAGED, kDLOneAPI = TESSERA_DL_ONEAPI,
};
enum DLDataTypeCode : uint8_t {
  kDLInt = TESSERA_DL_INT, kDLUInt = TESSERA_DL_UINT, kDLFloat = TESSERA_DL_FLOAT,
  kDLOpaqueHandle = TESSERA_DL_OPAQUE_HANDLE, kDLBfloat = TESSERA_DL_BFLOAT, kDLComplex = TESSERA_DL_COMPLEX,
  kDLBool = TESSERA_DL_BOOL,
};

using DLPackVersion = tessera_dl_version_t;
using DLDevice = tessera_dl_device_t;
using DLDataType = tessera_dl_data_type_t;
using DLTensor = tessera_dl_tensor_t;
using DLManagedTensor = tessera_dl_managed_tensor_t;                    // the legacy capsule (DLPack 0.x)
using DLManagedTensorVersioned = tessera_dl_managed_tensor_versioned_t;  // the DLPack 1.x capsule

// The offsets of dlpack.h (x86-64 and aarch64 LP64).
static_assert(sizeof(DLDevice) == 8 && sizeof(DLDataType) == 4);
static_assert(sizeof(DLTensor) == 48 && offsetof(DLTensor, ndim) == 16 && offsetof(DLTensor, dtype) == 20 &&
              offsetof(DLTensor, shape) == 24 && offsetof(DLTensor, byte_offset) == 40);
static_assert(sizeof(DLManagedTensor) == 64 && offsetof(DLManagedTensor, deleter) == 56);
static_assert(sizeof(DLManagedTensorVersioned) == 80 && offsetof(DLManagedTensorVersioned, flags) == 24 &&
              offsetof(DLManagedTensorVersioned, dl_tensor) == 32);

}  // namespace dlpack

// Note [DLPack devices]: privateuse slot s, index i <-> (kDLExtDev, (s - 1) * stride + i).
constexpr int32_t kDLPackExtDevSlotStride = TESSERA_DL_EXT_DEV_SLOT_STRIDE;

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
