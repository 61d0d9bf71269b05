// 2:4 semi-structured sparsity (docs/sparsity.md).
//
// A semi-structured tensor holds a 2-D weight that keeps at most two non-zeros in every group of
// four along its last dim, compressed (Note [2:4 canonical form] in tessera/semi_structured.h).
// It carries the Sparse dispatch key: linear(x, w_sparse, bias) and matmul(w_sparse, x) run the
// kernels of a `kernels` plugin (plugins/sparse) where one is loaded and the size is one where
// sparse wins; every other op, and those two where no sparse kernel takes the call, runs on the
// densified weight (cached on the tensor). Densifying for an op other than linear/matmul warns
// once per op, or throws with TESSERA_SPARSE_STRICT=1.
#pragma once

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera::sparse {

// A dense copy of `w` (2-D, floating or int8) that keeps the two largest magnitudes of every group
// of four along the last dim (the lower position wins a tie; a short last group keeps up to two).
TESSERA_API Tensor prune_2_4(const Tensor& w);

// The semi-structured form of `w`, which must already be 2:4 along its last dim (prune_2_4 makes
// such a tensor); otherwise throws naming the first row and group that break the pattern. `w`: 2-D,
// dtype float32, bfloat16, float16 or int8, on the CPU. Loads the `kernels` plugins on first use.
TESSERA_API Tensor to_sparse_semi_structured(const Tensor& w);

// True for a semi-structured tensor (it carries the Sparse key).
TESSERA_API bool is_sparse(const Tensor& t);

// The dense tensor a semi-structured one stands for (a dense tensor is returned as is). The result
// is computed once and cached on the tensor.
TESSERA_API Tensor to_dense(const Tensor& t);

// "SparseSemiStructuredTensor(shape=[4096, 4096], dtype=float32, device=cpu, kept=8388608)".
TESSERA_API std::string describe(const Tensor& t);

}  // namespace tessera::sparse
