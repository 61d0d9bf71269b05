/* DLPack for plugins, in plain C: the DLPack 1.x structs under tessera_dl_* names, and a view of a
 * kernel's tensor (tessera_tensor_t) as a DLTensor, for vendor libraries that take DLPack.
 * The runtime's C++ API (tessera/dlpack.h: to_dlpack, from_dlpack) uses the same structs.
 *
 * Note [DLPack layout]
 * The structs are written from the DLPack specification (dlpack.h, major 1): the same field order,
 * types and sizes as DLPackVersion, DLDevice, DLDataType, DLTensor, DLManagedTensor and
 * DLManagedTensorVersioned (checked by static asserts in tessera/dlpack.h and tests/abi). They carry
 * tessera_dl_* names so that a file may include the real dlpack.h too: a pointer to one of its
 * structs converts to ours with a cast.
 *
 * Note [DLPack devices]
 *   cpu -> kDLCPU (1), cuda -> kDLCUDA (2), opencl -> kDLOpenCL (4), device_id = the device index.
 *   privateuse slot s (1..3, renamed or not) -> kDLExtDev (12) with
 *   device_id = (s - 1) * TESSERA_DL_EXT_DEV_SLOT_STRIDE + index, so a renamed backend round-trips
 *   and (kDLExtDev, id) names one Tessera device. The meta device has no memory.
 *   `data` is the device's memory handle (Note [Device memory] in plugin_abi.h). For the CPU and
 *   CUDA, whose handles are pointers, the byte offset is folded into `data` and byte_offset is 0;
 *   for OpenCL and the privateuse devices `data` is the handle and byte_offset the offset.
 */
#ifndef TESSERA_DLPACK_ABI_H_
#define TESSERA_DLPACK_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "tessera/plugin_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_DL_MAJOR_VERSION 1u
#define TESSERA_DL_MINOR_VERSION 1u
#define TESSERA_DL_FLAG_READ_ONLY (UINT64_C(1) << 0)       /* DLPACK_FLAG_BITMASK_READ_ONLY */
#define TESSERA_DL_FLAG_IS_COPIED (UINT64_C(1) << 1)       /* DLPACK_FLAG_BITMASK_IS_COPIED */
#define TESSERA_DL_FLAG_SUBBYTE_PADDED (UINT64_C(1) << 2)  /* DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED */
#define TESSERA_DL_EXT_DEV_SLOT_STRIDE 65536

/* DLDeviceType values. */
typedef enum tessera_dl_device_type_t {
  TESSERA_DL_CPU = 1,
  TESSERA_DL_CUDA = 2,
  TESSERA_DL_CUDA_HOST = 3,
  TESSERA_DL_OPENCL = 4,
  TESSERA_DL_VULKAN = 7,
  TESSERA_DL_METAL = 8,
  TESSERA_DL_VPI = 9,
  TESSERA_DL_ROCM = 10,
  TESSERA_DL_ROCM_HOST = 11,
  TESSERA_DL_EXT_DEV = 12,
  TESSERA_DL_CUDA_MANAGED = 13,
  TESSERA_DL_ONEAPI = 14
} tessera_dl_device_type_t;

/* DLDataTypeCode values. */
typedef enum tessera_dl_type_code_t {
  TESSERA_DL_INT = 0,
  TESSERA_DL_UINT = 1,
  TESSERA_DL_FLOAT = 2,
  TESSERA_DL_OPAQUE_HANDLE = 3,
  TESSERA_DL_BFLOAT = 4,
  TESSERA_DL_COMPLEX = 5,
  TESSERA_DL_BOOL = 6
} tessera_dl_type_code_t;

typedef struct tessera_dl_version_t {
  uint32_t major;
  uint32_t minor;
} tessera_dl_version_t;

typedef struct tessera_dl_device_t {
  int32_t device_type; /* tessera_dl_device_type_t */
  int32_t device_id;
} tessera_dl_device_t;

typedef struct tessera_dl_data_type_t {
  uint8_t code; /* tessera_dl_type_code_t */
  uint8_t bits;
  uint16_t lanes;
} tessera_dl_data_type_t;

typedef struct tessera_dl_tensor_t {
  void* data;
  tessera_dl_device_t device;
  int32_t ndim;
  tessera_dl_data_type_t dtype;
  int64_t* shape;   /* ndim entries */
  int64_t* strides; /* ndim entries, in elements; NULL: compact row-major */
  uint64_t byte_offset;
} tessera_dl_tensor_t;

/* The legacy, unversioned capsule (DLManagedTensor). */
typedef struct tessera_dl_managed_tensor_t {
  tessera_dl_tensor_t dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct tessera_dl_managed_tensor_t* self);
} tessera_dl_managed_tensor_t;

/* The DLPack 1.x capsule (DLManagedTensorVersioned). Fields up to `flags` stay put in every 1.x. */
typedef struct tessera_dl_managed_tensor_versioned_t {
  tessera_dl_version_t version;
  void* manager_ctx;
  void (*deleter)(struct tessera_dl_managed_tensor_versioned_t* self);
  uint64_t flags;
  tessera_dl_tensor_t dl_tensor;
} tessera_dl_managed_tensor_versioned_t;

/* The DLPack device of a Tessera device type and index (Note [DLPack devices]). Returns 0, or -1
 * for the meta device and unknown types. */
static inline int tessera_dl_device_of(int32_t device_type, int32_t device_index, tessera_dl_device_t* out) {
  const int32_t index = device_index < 0 ? 0 : device_index;
  switch (device_type) {
    case TESSERA_DEVICE_CPU: out->device_type = TESSERA_DL_CPU; out->device_id = 0; return 0;
    case TESSERA_DEVICE_CUDA: out->device_type = TESSERA_DL_CUDA; out->device_id = index; return 0;
    case TESSERA_DEVICE_OPENCL: out->device_type = TESSERA_DL_OPENCL; out->device_id = index; return 0;
    case TESSERA_DEVICE_PRIVATEUSE1:
    case TESSERA_DEVICE_PRIVATEUSE2:
    case TESSERA_DEVICE_PRIVATEUSE3:
      out->device_type = TESSERA_DL_EXT_DEV;
      out->device_id = (device_type - TESSERA_DEVICE_PRIVATEUSE1) * TESSERA_DL_EXT_DEV_SLOT_STRIDE + index;
      return 0;
    default: return -1;
  }
}

/* The DLPack type of a tessera_dtype_t (lanes 1). Returns 0, or -1 for the quantized dtypes. */
static inline int tessera_dl_data_type_of(int32_t dtype, tessera_dl_data_type_t* out) {
  uint8_t code = 0, bits = 0;
  switch (dtype) {
    case TESSERA_DTYPE_BOOL: code = TESSERA_DL_BOOL; bits = 8; break;
    case TESSERA_DTYPE_UINT8: code = TESSERA_DL_UINT; bits = 8; break;
    case TESSERA_DTYPE_INT8: code = TESSERA_DL_INT; bits = 8; break;
    case TESSERA_DTYPE_INT16: code = TESSERA_DL_INT; bits = 16; break;
    case TESSERA_DTYPE_INT32: code = TESSERA_DL_INT; bits = 32; break;
    case TESSERA_DTYPE_INT64: code = TESSERA_DL_INT; bits = 64; break;
    case TESSERA_DTYPE_FLOAT16: code = TESSERA_DL_FLOAT; bits = 16; break;
    case TESSERA_DTYPE_BFLOAT16: code = TESSERA_DL_BFLOAT; bits = 16; break;
    case TESSERA_DTYPE_FLOAT32: code = TESSERA_DL_FLOAT; bits = 32; break;
    case TESSERA_DTYPE_FLOAT64: code = TESSERA_DL_FLOAT; bits = 64; break;
    default: return -1;
  }
  out->code = code;
  out->bits = bits;
  out->lanes = 1;
  return 0;
}

/* A kernel's tensor as a DLTensor that borrows it: valid while `t` is (for the kernel call), no
 * capsule and no deleter; shape and strides point at `t`'s arrays, which the consumer must not
 * write. Returns 0, or -1 (leaving `out` unspecified) for a quantized dtype or the meta device. */
static inline int tessera_dl_tensor_of(const tessera_tensor_t* t, tessera_dl_tensor_t* out) {
  if (tessera_dl_device_of(t->device_type, t->device_index, &out->device) != 0) return -1;
  if (tessera_dl_data_type_of(t->dtype, &out->dtype) != 0) return -1;
  out->ndim = t->ndim;
  out->shape = (int64_t*)(uintptr_t)t->sizes;
  out->strides = (int64_t*)(uintptr_t)t->strides;
  if ((t->device_type == TESSERA_DEVICE_CPU || t->device_type == TESSERA_DEVICE_CUDA) && t->data != NULL) {
    out->data = (char*)t->data + t->byte_offset;
    out->byte_offset = 0;
  } else {
    out->data = t->data;
    out->byte_offset = (uint64_t)t->byte_offset;
  }
  return 0;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_DLPACK_ABI_H_ */
