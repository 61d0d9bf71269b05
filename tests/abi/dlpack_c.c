/* tessera/dlpack_abi.h compiles as strict C11 and describes a kernel's tensor as DLPack
 * (Notes [DLPack layout] and [DLPack devices]): offsets of dlpack.h 1.x, the device and dtype
 * mappings, and the byte offset folded into `data` only where the handle is a pointer. */
#include "tessera/dlpack_abi.h"

#include <stdio.h>

_Static_assert(sizeof(tessera_dl_tensor_t) == 48, "DLTensor is 48 bytes");
_Static_assert(offsetof(tessera_dl_tensor_t, byte_offset) == 40, "DLTensor.byte_offset");
_Static_assert(offsetof(tessera_dl_managed_tensor_t, deleter) == 56, "DLManagedTensor.deleter");
_Static_assert(offsetof(tessera_dl_managed_tensor_versioned_t, flags) == 24, "DLManagedTensorVersioned.flags");
_Static_assert(offsetof(tessera_dl_managed_tensor_versioned_t, dl_tensor) == 32, "DLManagedTensorVersioned.dl_tensor");

static int check(int cond, const char* what) {
  if (!cond) fprintf(stderr, "dlpack C test: %s\n", what);
  return cond ? 0 : 1;
}

int main(void) {
  int failures = 0;
  float host[12] = {0};
  int64_t sizes[2] = {2, 3}, strides[2] = {6, 2};
  tessera_tensor_t t = {0};
  tessera_dl_tensor_t dl;
  t.struct_size = sizeof t;
  t.dtype = TESSERA_DTYPE_FLOAT32;
  t.device_type = TESSERA_DEVICE_CPU;
  t.device_index = -1;
  t.ndim = 2;
  t.sizes = sizes;
  t.strides = strides;
  t.numel = 6;
  t.data = host;
  t.byte_offset = 4;
  failures += check(tessera_dl_tensor_of(&t, &dl) == 0, "a CPU float32 view converts");
  failures += check(dl.data == (void*)&host[1] && dl.byte_offset == 0, "CPU: the offset is folded into data");
  failures += check(dl.device.device_type == TESSERA_DL_CPU && dl.device.device_id == 0, "CPU device");
  failures += check(dl.dtype.code == TESSERA_DL_FLOAT && dl.dtype.bits == 32 && dl.dtype.lanes == 1, "float32");
  failures += check(dl.ndim == 2 && dl.shape[1] == 3 && dl.strides[0] == 6, "shape and strides");

  t.device_type = TESSERA_DEVICE_PRIVATEUSE2; /* a renamed backend: kDLExtDev, slot 2, index 1 */
  t.device_index = 1;
  t.dtype = TESSERA_DTYPE_BFLOAT16;
  failures += check(tessera_dl_tensor_of(&t, &dl) == 0, "a privateuse2 bf16 tensor converts");
  failures += check(dl.device.device_type == TESSERA_DL_EXT_DEV &&
                        dl.device.device_id == TESSERA_DL_EXT_DEV_SLOT_STRIDE + 1,
                    "privateuse2:1 is (kDLExtDev, 65537)");
  failures += check(dl.data == (void*)host && dl.byte_offset == 4, "a handle keeps its byte offset");
  failures += check(dl.dtype.code == TESSERA_DL_BFLOAT && dl.dtype.bits == 16, "bfloat16");

  t.dtype = TESSERA_DTYPE_QINT8;
  failures += check(tessera_dl_tensor_of(&t, &dl) == -1, "a quantized tensor has no DLPack type");
  t.dtype = TESSERA_DTYPE_BOOL;
  t.device_type = TESSERA_DEVICE_META;
  failures += check(tessera_dl_tensor_of(&t, &dl) == -1, "the meta device has no memory");
  return failures;
}
