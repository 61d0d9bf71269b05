// Overflow-checked extent arithmetic.
//
// Note [Checked extents]
// Sizes, strides, storage offsets and byte counts come from users, files and plugins, so none of
// them is trusted: every product or sum that yields an element count, a storage extent or a byte
// count goes through these helpers, which report overflow instead of wrapping. A geometry is
// accepted only when storage_extent() of it fits the storage it views (TensorImpl checks this on
// every construction and every set_sizes_and_strides).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "tessera/array_ref.h"
#include "tessera/export.h"

namespace tessera {

// a * b and a + b, or nullopt when the result does not fit in int64.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
// a * b clamped to INT64_MAX (strides of size-0 or size-1 dims, where the value is never used to
// address memory).
inline int64_t saturating_mul(int64_t a, int64_t b) { return checked_mul(a, b).value_or(INT64_MAX); }

// Elements of storage needed by a geometry with non-negative sizes and strides: 0 when it has no
// element, else offset + sum((size - 1) * stride) + 1. nullopt on overflow.
TESSERA_API std::optional<int64_t> storage_extent(IntArrayRef sizes, IntArrayRef strides, int64_t offset);
// elements * itemsize as a byte count, or nullopt on overflow (or a negative count).
TESSERA_API std::optional<uint64_t> checked_nbytes(int64_t elements, size_t itemsize);

}  // namespace tessera
