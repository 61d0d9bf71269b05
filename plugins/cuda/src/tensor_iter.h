// Host-side planning of kernel iteration spaces: broadcasting of operands to the output shape (zero
// strides), removal of size-1 dims and merging of dims whose strides allow it, so that kernels index
// as few dims as possible and dense operands take the vectorised path. Pure C++ (no CUDA calls): the
// unit tests exercise it without a GPU.
#pragma once
#include <algorithm>
#include <climits>
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

  // Drop size-1 dims, order the rest by the output's strides (largest outermost, stable: a
  // row-major output keeps its order) so that neighbouring threads write neighbouring elements of
  // any dense output, a channels-last one included, then merge an outer dim into its inner
  // neighbour when every operand's strides continue across the boundary. The planned order of the
  // elements is then the output's memory order, not its logical one; the kernels planned here
  // (unary, binary, fill) do not depend on the order.
  std::vector<int> keep;
  for (int d = 0; d < ndim; ++d)
    if (sizes[size_t(d)] != 1) keep.push_back(d);
  std::stable_sort(keep.begin(), keep.end(),
                   [&](int a, int b) { return strides[0][size_t(a)] > strides[0][size_t(b)]; });
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

// True when every operand is dense over the planned space (one dim, unit strides). Operands whose
// bit is set in `skip_mask` (a number passed by value, never read from memory) are not looked at.
inline bool is_dense(const IterShape& shape, const Operand* operands, int nops, uint32_t skip_mask = 0) {
  if (shape.ndim != 1) return false;
  for (int k = 0; k < nops; ++k)
    if (!((skip_mask >> k) & 1u) && operands[k].strides[0] != 1) return false;
  return true;
}

// Plans dst = convert(src) (launch_copy): `src` broadcasts to dst's shape (stride 0). Size-1 dims
// are dropped, the others ordered by the destination's strides (largest outermost, so that
// neighbouring threads write neighbouring elements; ties by the source's), and a dim is merged
// into its inner neighbour when both operands' strides continue across the boundary. A dense copy
// becomes one dim with unit strides (the vectorised path). index32 is set when the element count
// and the largest element offset of each operand fit in int32 (32-bit index math in the kernel).
// False (nothing planned) when src does not broadcast to dst, a size or stride is negative, or
// more than kMaxDims dims remain.
inline bool plan_copy(const Geometry& dst, const Geometry& src, CopyPlan* plan) {
  if (src.ndim > dst.ndim || dst.ndim < 0) return false;
  struct Dim {
    int64_t size, dst_stride, src_stride;
  };
  std::vector<Dim> dims;
  int64_t numel = 1;
  for (int d = 0; d < dst.ndim; ++d) {
    const int64_t size = dst.sizes[d];
    if (size < 0 || dst.strides[d] < 0) return false;
    if (__builtin_mul_overflow(numel, size, &numel)) return false;
    int64_t src_stride = 0;
    const int ds = d - (dst.ndim - src.ndim);
    if (ds >= 0) {
      if (src.sizes[ds] == size) {
        src_stride = src.strides[ds];
        if (src_stride < 0) return false;
      } else if (src.sizes[ds] != 1) {
        return false;
      }
    }
    if (size != 1) dims.push_back(Dim{size, dst.strides[d], src_stride});
  }
  *plan = CopyPlan{};
  plan->numel = numel;
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) {
    return a.dst_stride != b.dst_stride ? a.dst_stride > b.dst_stride : a.src_stride > b.src_stride;
  });
  std::vector<Dim> merged;  // outermost first
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& outer = merged.back();
      // `outer` steps over whole rows of `d` in both operands: one dim of outer.size * d.size.
      if (outer.dst_stride == d.dst_stride * d.size && outer.src_stride == d.src_stride * d.size) {
        outer.size *= d.size;
        outer.dst_stride = d.dst_stride;
        outer.src_stride = d.src_stride;
        continue;
      }
    }
    merged.push_back(d);
  }
  if (merged.empty()) merged.push_back(Dim{1, 1, 1});  // one element (or none: numel is 0)
  if (merged.size() > size_t(kMaxDims)) return false;
  plan->ndim = int32_t(merged.size());
  int64_t dst_extent = 0, src_extent = 0;  // largest element offsets
  bool fits = numel <= INT32_MAX;
  for (size_t j = 0; j < merged.size(); ++j) {
    const Dim& d = merged[j];
    plan->sizes[j] = d.size;
    plan->dst_strides[j] = d.dst_stride;
    plan->src_strides[j] = d.src_stride;
    int64_t a = 0, b = 0;
    const int64_t last = d.size > 0 ? d.size - 1 : 0;
    if (__builtin_mul_overflow(last, d.dst_stride, &a) || __builtin_mul_overflow(last, d.src_stride, &b) ||
        __builtin_add_overflow(dst_extent, a, &dst_extent) || __builtin_add_overflow(src_extent, b, &src_extent))
      fits = false;
  }
  plan->index32 = fits && dst_extent <= INT32_MAX && src_extent <= INT32_MAX;
  plan->contiguous = plan->ndim == 1 && plan->dst_strides[0] == 1 && plan->src_strides[0] == 1;
  return true;
}

// Note [Tiled transposed copies]: true, with the tile plan, when the copy moves [A, B] planes whose
// destination is contiguous along B (the innermost planned dim) and whose source is contiguous
// along A, both at least 16 long (shorter planes gain nothing from tiles), and the tile grid fits
// (A in at most 65535 tiles of 32).
inline bool plan_transpose(const CopyPlan& p, TransposePlan* t) {
  const int n = p.ndim;
  if (n < 2 || p.dst_strides[n - 1] != 1 || p.src_strides[n - 1] <= 1) return false;
  int a = -1;
  for (int j = n - 2; j >= 0 && a < 0; --j)
    if (p.src_strides[j] == 1) a = j;
  if (a < 0 || p.sizes[a] < 16 || p.sizes[n - 1] < 16 || (p.sizes[a] + 31) / 32 > 65535 ||
      (p.sizes[n - 1] + 31) / 32 > INT32_MAX)
    return false;
  *t = TransposePlan{};
  t->size_a = p.sizes[a];
  t->size_b = p.sizes[n - 1];
  t->src_stride_b = p.src_strides[n - 1];
  t->dst_stride_a = p.dst_strides[a];
  for (int j = 0; j < n - 1; ++j) {
    if (j == a) continue;
    t->batch_sizes[t->batch_ndim] = p.sizes[j];
    t->batch_src_strides[t->batch_ndim] = p.src_strides[j];
    t->batch_dst_strides[t->batch_ndim] = p.dst_strides[j];
    t->batch_count *= p.sizes[j];
    ++t->batch_ndim;
  }
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

// Where each part of a concatenation along `dim` lands in `out` (cat, and stack with lengths of
// 1 and the new dim): offsets[k] = (lengths[0] + ... + lengths[k - 1]) * out.strides[dim], the
// element offset of part k's first element; the part's view has the output's strides (stack: less
// the new dim). False when dim is out of range, a length is negative, the lengths do not add up to
// the output's size along dim, or an offset overflows.
inline bool plan_concat(const Geometry& out, int dim, const int64_t* lengths, int num_parts, int64_t* offsets) {
  if (dim < 0 || dim >= out.ndim || num_parts < 0) return false;
  int64_t at = 0;
  for (int k = 0; k < num_parts; ++k) {
    if (lengths[k] < 0) return false;
    if (__builtin_mul_overflow(at, out.strides[dim], &offsets[k])) return false;
    if (__builtin_add_overflow(at, lengths[k], &at)) return false;
  }
  return at == out.sizes[dim];
}

// Spreads a planned reduction over `sm_count` SMs (see ReduceLaunch). A block per output when the
// reduced dims are innermost or the outputs are few, a thread per output otherwise; in both cases
// the reduced range is split when there are too few outputs to occupy the GPU, keeping at least
// 16 elements per thread in each split so that the second pass stays small.
inline ReduceLaunch plan_reduce_launch(const ReducePlan& p, int sm_count) {
  ReduceLaunch r;
  const bool inner_contiguous = p.reduced_ndim > 0 && p.reduced_in_strides[p.reduced_ndim - 1] == 1;
  r.block_per_output = inner_contiguous || p.num_outputs < 4096;
  r.threads = r.block_per_output ? (p.reduce_size >= 4096 ? 512 : (p.reduce_size >= 256 ? 256 : 64)) : 256;
  r.chunk = p.reduce_size;
  if (p.num_outputs <= 0 || p.reduce_size <= 0) return r;
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  // Work items wanted in flight: 4 blocks per SM, or 2048 threads per SM.
  const int64_t wanted = r.block_per_output ? sms * 4 : sms * 2048;
  const int64_t min_chunk = r.block_per_output ? int64_t(r.threads) * 16 : 64;
  int64_t splits = std::min(ceil_div(wanted, p.num_outputs), ceil_div(p.reduce_size, min_chunk));
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, 65535));
  r.chunk = ceil_div(p.reduce_size, splits);
  r.splits = ceil_div(p.reduce_size, r.chunk);  // no empty split
  return r;
}

// The 1-D grid of the attention kernels: one block per (batch * head, query block), batch * head
// major, so that neither batch * heads (the grid's y limit is 65535) nor the query length is
// limited by a grid dimension other than x (2^31 - 1 blocks). False when even that is exceeded.
inline bool plan_attention_grid(int64_t batch_heads, int64_t len_q, int rows_per_block, int64_t* q_blocks,
                                uint32_t* grid_x) {
  if (batch_heads < 0 || len_q < 0 || rows_per_block <= 0) return false;
  *q_blocks = (len_q + rows_per_block - 1) / rows_per_block;
  int64_t total = 0;
  if (__builtin_mul_overflow(*q_blocks, batch_heads, &total) || total > 0x7fffffff) return false;
  *grid_x = uint32_t(total);
  return true;
}

}  // namespace tessera::cuda
