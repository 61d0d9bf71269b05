// Host-side planning of kernel iteration spaces: broadcasting of operands to the output shape (zero
// strides), removal of size-1 dims and merging of dims whose strides allow it, so that kernels index
// as few dims as possible and dense operands take the vectorised path. Pure C++ (no CUDA calls): the
// unit tests exercise it without a GPU.
#pragma once
#include <cstdint>
#include <vector>

#include "launch.h"

namespace tessera::cuda {

struct Geometry {
  int32_t ndim = 0;
  const int64_t* sizes = nullptr;
  const int64_t* strides = nullptr;
};

// Plans out = f(inputs...). operands[0] receives the output strides, operands[1 + i] those of
// inputs[i], all aligned to `shape`. False when an input does not broadcast to the output's shape
// or more than kMaxDims dims remain after merging.
inline bool plan_elementwise(const Geometry& out, const Geometry* inputs, int num_inputs, IterShape* shape,
                             Operand* operands) {
  const int nops = num_inputs + 1;
  const int ndim = out.ndim;
  std::vector<int64_t> sizes(static_cast<size_t>(ndim));
  std::vector<std::vector<int64_t>> strides(static_cast<size_t>(nops), std::vector<int64_t>(static_cast<size_t>(ndim), 0));
  int64_t numel = 1;
  for (int d = 0; d < ndim; ++d) {
    sizes[size_t(d)] = out.sizes[d];
    numel *= out.sizes[d];
    strides[0][size_t(d)] = out.strides[d];
    for (int k = 0; k < num_inputs; ++k) {
      const Geometry& in = inputs[k];
      const int di = d - (ndim - in.ndim);
      if (di < 0) continue;
      if (in.sizes[di] == out.sizes[d]) {
        strides[size_t(k + 1)][size_t(d)] = in.strides[di];
      } else if (in.sizes[di] != 1) {
        return false;
      }
    }
  }
  for (int k = 0; k < num_inputs; ++k)
    if (inputs[k].ndim > ndim) return false;
  shape->numel = numel;

  // Drop size-1 dims, then merge an outer dim into its inner neighbour when every operand's
  // strides continue across the boundary.
  std::vector<int> keep;
  for (int d = 0; d < ndim; ++d)
    if (sizes[size_t(d)] != 1) keep.push_back(d);
  std::vector<int64_t> msizes;
  std::vector<std::vector<int64_t>> mstrides(static_cast<size_t>(nops));
  for (int idx = int(keep.size()) - 1; idx >= 0; --idx) {  // innermost first
    const int d = keep[size_t(idx)];
    bool merged = false;
    if (!msizes.empty()) {
      bool ok = true;
      for (int k = 0; k < nops && ok; ++k) ok = strides[size_t(k)][size_t(d)] == mstrides[size_t(k)].back() * msizes.back();
      if (ok) {
        msizes.back() *= sizes[size_t(d)];
        merged = true;
      }
    }
    if (!merged) {
      msizes.push_back(sizes[size_t(d)]);
      for (int k = 0; k < nops; ++k) mstrides[size_t(k)].push_back(strides[size_t(k)][size_t(d)]);
    }
  }
  if (msizes.empty()) {  // a single element
    msizes.push_back(1);
    for (int k = 0; k < nops; ++k) mstrides[size_t(k)].push_back(1);
  }
  if (msizes.size() > size_t(kMaxDims)) return false;
  const int m = int(msizes.size());
  shape->ndim = m;
  for (int j = 0; j < m; ++j) {
    shape->sizes[j] = msizes[size_t(m - 1 - j)];
    for (int k = 0; k < nops; ++k) operands[k].strides[j] = mstrides[size_t(k)][size_t(m - 1 - j)];
  }
  return true;
}

// True when every operand is dense over the planned space (one dim, unit strides).
inline bool is_dense(const IterShape& shape, const Operand* operands, int nops) {
  if (shape.ndim != 1) return false;
  for (int k = 0; k < nops; ++k)
    if (operands[k].strides[0] != 1) return false;
  return true;
}

// Plans a reduction of `in` over the dims flagged in `reduce_mask` (bit d = dim d) into `out`,
// whose dims are the kept dims of `in` (keepdim = false) or all dims with size 1 where reduced
// (keepdim = true). False when more than kMaxDims kept or reduced dims remain after merging.
inline bool plan_reduction(const Geometry& in, const Geometry& out, uint64_t reduce_mask, bool keepdim, ReducePlan* plan) {
  std::vector<int64_t> ks, kis, kos, rs, ris;
  int out_dim = 0;
  for (int d = 0; d < in.ndim; ++d) {
    const bool reduced = (reduce_mask >> d) & 1u;
    if (reduced) {
      if (in.sizes[d] != 1) {
        rs.push_back(in.sizes[d]);
        ris.push_back(in.strides[d]);
      }
      if (keepdim) ++out_dim;
    } else {
      if (out_dim >= out.ndim) return false;
      if (in.sizes[d] != 1) {
        ks.push_back(in.sizes[d]);
        kis.push_back(in.strides[d]);
        kos.push_back(out.strides[out_dim]);
      }
      ++out_dim;
    }
  }
  // Merge neighbours (outer into inner) whose strides continue.
  auto merge = [](std::vector<int64_t>& sz, std::vector<int64_t>* st1, std::vector<int64_t>* st2) {
    std::vector<int64_t> nsz, n1, n2;
    for (size_t i = 0; i < sz.size(); ++i) {
      if (!nsz.empty()) {
        // previous (outer) is at back; current i is inner
        const bool ok1 = n1.back() == (*st1)[i] * sz[i];
        const bool ok2 = !st2 || n2.back() == (*st2)[i] * sz[i];
        if (ok1 && ok2) {
          nsz.back() *= sz[i];
          n1.back() = (*st1)[i];
          if (st2) n2.back() = (*st2)[i];
          continue;
        }
      }
      nsz.push_back(sz[i]);
      n1.push_back((*st1)[i]);
      if (st2) n2.push_back((*st2)[i]);
    }
    sz = nsz;
    *st1 = n1;
    if (st2) *st2 = n2;
  };
  merge(ks, &kis, &kos);
  merge(rs, &ris, nullptr);
  if (ks.size() > size_t(kMaxDims) || rs.size() > size_t(kMaxDims)) return false;
  plan->kept_ndim = int32_t(ks.size());
  plan->reduced_ndim = int32_t(rs.size());
  plan->num_outputs = 1;
  plan->reduce_size = 1;
  for (size_t i = 0; i < ks.size(); ++i) {
    plan->kept_sizes[i] = ks[i];
    plan->kept_in_strides[i] = kis[i];
    plan->kept_out_strides[i] = kos[i];
    plan->num_outputs *= ks[i];
  }
  for (size_t i = 0; i < rs.size(); ++i) {
    plan->reduced_sizes[i] = rs[i];
    plan->reduced_in_strides[i] = ris[i];
    plan->reduce_size *= rs[i];
  }
  for (int d = 0; d < in.ndim; ++d)  // an empty reduced dim empties the reduction
    if (((reduce_mask >> d) & 1u) && in.sizes[d] == 0) plan->reduce_size = 0;
  for (int d = 0; d < in.ndim; ++d)
    if (!((reduce_mask >> d) & 1u) && in.sizes[d] == 0) plan->num_outputs = 0;
  return true;
}

}  // namespace tessera::cuda
