// The parts of a 2:4 semi-structured tensor's canonical form (Note [2:4 canonical form] in
// tessera/semi_structured.h) as dense tensors, for files that store such a tensor (the program
// file, docs/export.md) and read it back.
#pragma once

#include <cstdint>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera::sparse {

// The layout tag of a semi-structured tensor in files ("sparse_semi_structured(2:4)").
inline constexpr const char* kSemiStructuredLayout = "sparse_semi_structured(2:4)";

struct SemiStructuredParts {
  Tensor values;   // (rows, 2 * groups) of the tensor's dtype, groups = ceil(cols / 4)
  Tensor indices;  // (rows, ceil(groups / 2)) uint8: two 2-bit positions per group, two groups per byte
};

// Copies of the canonical form's values and indices of semi-structured `t` (CPU tensors that do not
// share memory with `t`). Throws for a tensor that is not semi-structured.
TESSERA_API SemiStructuredParts semi_structured_parts(const Tensor& t);

// The semi-structured tensor of dense shape (values.size(0), cols) from its parts, which may come
// from an untrusted file: every size, the dtype (float32, bfloat16, float16 or int8; indices uint8)
// and every index byte is checked. Within a group the two positions must be distinct and in
// increasing order, a position past `cols` (the short last group) must hold a zero value, and the
// unused high nibble of an odd last group must be zero. Throws a one-line tessera::Error naming the
// first thing that is wrong (row and group for an index). Loads the `kernels` plugins on first use.
TESSERA_API Tensor from_semi_structured_parts(const Tensor& values, const Tensor& indices, int64_t cols);

}  // namespace tessera::sparse
