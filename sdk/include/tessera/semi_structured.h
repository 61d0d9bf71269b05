/* The storage of a 2:4 semi-structured sparse tensor, as the runtime (tessera::sparse) writes it
 * and a kernels plugin reads it. Plain C, like plugin_abi.h.
 *
 * Note [2:4 canonical form]
 * A sparse tensor of dense shape (rows, cols), 2:4 along cols, has sizes (rows, cols), strides (0, 0)
 * and one storage: this header, then the kept values, then their indices.
 * - groups = ceil(cols / 4) per row; each group keeps exactly two values (a group with fewer
 *   non-zeros keeps zeros at its first free positions), in position order: values are
 *   (rows, 2 * groups) elements of the tensor's dtype, row-major, at values_offset.
 * - indices: 2 bits per kept value (its position inside the group), the two of a group in one
 *   nibble (first index in bits 0-1, second in bits 2-3), two groups per byte (even group in the
 *   low nibble): rows * ceil(groups / 2) bytes, row-major, at indices_offset.
 * - layouts[t]: a backend's own layout for device type t (tessera_device_type_t), built by its
 *   kernels plugin at first use and published with an atomic compare-and-swap; the runtime frees
 *   each non-null entry with free() when the tensor's storage goes away, so a layout must be one
 *   block from malloc/aligned_alloc with no pointers to free inside. Only host-memory storages
 *   (the CPU) carry layouts.
 *
 * Note [Semi-structured tensors on a device]
 * A semi-structured tensor moves to a device other than the CPU (`t.to("cuda")`) only where a
 * kernels plugin for that device type offers TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT (else it
 * densifies, docs/sparsity.md). The runtime calls it once with the canonical block (host memory)
 * and copies the bytes it returns to one device allocation: the device tensor's storage holds
 * exactly them (sizes (rows, cols), strides (0, 0), dtype of the values) and nothing else, so the
 * plugin's kernels find everything from the sizes and the dtype without reading device memory on
 * the host. The runtime keeps the canonical CPU tensor with the device tensor (densifying,
 * printing, saving and `.to("cpu")` use it).
 */
#ifndef TESSERA_SEMI_STRUCTURED_H_
#define TESSERA_SEMI_STRUCTURED_H_

#include <stdint.h>

#include "tessera/plugin_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_SEMI_STRUCTURED_MAGIC UINT64_C(0x3432534152455354) /* "TSERAS24" */
#define TESSERA_SEMI_STRUCTURED_VERSION 1u
#define TESSERA_SEMI_STRUCTURED_MAX_LAYOUTS 8

typedef struct tessera_semi_structured_header_t {
  uint64_t magic;   /* TESSERA_SEMI_STRUCTURED_MAGIC */
  uint32_t version; /* TESSERA_SEMI_STRUCTURED_VERSION */
  int32_t dtype;    /* tessera_dtype_t of the values */
  int64_t rows;
  int64_t cols;
  int64_t groups;          /* ceil(cols / 4) */
  uint64_t values_offset;  /* bytes from the header */
  uint64_t indices_offset; /* bytes from the header */
  uint64_t total_bytes;    /* the whole storage */
  void* layouts[TESSERA_SEMI_STRUCTURED_MAX_LAYOUTS];
} tessera_semi_structured_header_t;

/* Note [Semi-structured tensors on a device]: builds the device bytes of the canonical block
 * `canonical` (host memory, read-only). On success *out_block is one block from malloc() that the
 * caller releases with free(), *out_bytes its size; an error status (never an exception) names
 * what was refused (a dtype the device kernels do not take, sizes that overflow). `self` is NULL. */
#define TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT "tessera.sparse.device_layout"
typedef tessera_status_t (*tessera_ext_semi_structured_device_layout_fn_t)(
    void* self, const tessera_semi_structured_header_t* canonical, void** out_block, uint64_t* out_bytes);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_SEMI_STRUCTURED_H_ */
