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
 */
#ifndef TESSERA_SEMI_STRUCTURED_H_
#define TESSERA_SEMI_STRUCTURED_H_

#include <stdint.h>

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

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_SEMI_STRUCTURED_H_ */
