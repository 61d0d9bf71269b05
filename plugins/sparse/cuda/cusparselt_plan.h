// Which path a semi-structured linear on cuda takes, and the caches of the cuSPARSELt path: plain
// C++ with no CUDA header (tessera_dtype_t from the SDK's C ABI), so that every decision is tested
// on machines without a GPU (tests/sparse/test_sparse_cusparselt.cpp).
//
// Note [2:4 on cuSPARSELt]
// A semi-structured linear y = x W^T (+ bias) on cuda has three ways to run:
// - Dense: the runtime's dense path (the weight's cached dense copy through cuBLASLt), chosen by
//   returning UNIMPLEMENTED from the kernel;
// - CusparseLt: cuSPARSELt's SpMMA on the tensor cores (f16 and bf16), with the bias in its epilogue;
// - Kernel: the plugin's own kernels (mma.sp for f16/bf16, CUDA cores for f32; Note [CUDA mma.sp
//   tiles]).
// The rule, so that a sparse weight is never slower than the dense one:
// 1. TESSERA_SPARSE_DENSE_BATCH=N (batch >= N goes dense) and TESSERA_SPARSE_CUDA_PATH=dense|kernel|
//    cusparselt force a path, for tuning and tests; a forced cuSPARSELt that cannot take the case
//    runs the kernel (the fallback), saying why under TESSERA_LOG=sparse.
// 2. Otherwise (auto) cuSPARSELt from kCusparseLtMinBatch on, when it is loaded and takes the case;
//    everything else goes dense. The plugin's kernels are not in the auto rule: on the H200 they ran
//    at 0.64x to 0.09x of cuBLASLt dense from batch 16 to 4096 (docs/cuda.md), so dense is faster.
//    kCusparseLtMinBatch is where NVIDIA's SpMMA is expected to overtake dense GEMM at 4096 x 4096;
//    it is not yet measured here (bench_sparse_cuda times every path per batch for that).
// What cuSPARSELt takes (cusparselt_refusal): f16 or bf16; rows and cols multiples of 16 (the
// structured matrix), batch a multiple of 8 (the dense operands), every pointer 16-byte aligned;
// the library may still refuse a descriptor, and that shape is then remembered as refused, when
// the refusal lasts (lasting_refusal): a failure that may pass (memory, resources, a launch) is
// reported for the call and tried again on the next.
// The weight is compressed once: the GPU rebuilds the dense pruned weight from the mma.sp layout
// (mma_slot_position), cuSPARSELt compresses it, and the result is cached under the weight's
// device address and storage version (Note [Storage version]); a new version at the same address
// replaces the entry, and the cache keeps at most kCompressedCacheEntries weights (least recently
// used out). A weight of version 0 (unknown) is compressed for the call and not kept. Plans are
// cached per (device, dtype, shape, layout, bias address) the same way.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include <tessera/plugin_abi.h>

namespace tessera::sparse_cuda {

inline constexpr int64_t kCusparseLtMinBatch = 64;
inline constexpr size_t kCompressedCacheEntries = 64;
inline constexpr size_t kPlanCacheEntries = 64;

enum class SparsePath { Dense, Kernel, CusparseLt };
enum class PathRequest { Auto, Dense, Kernel, CusparseLt };

inline const char* path_name(SparsePath p) {
  switch (p) {
    case SparsePath::Dense:
      return "dense";
    case SparsePath::Kernel:
      return "kernel";
    case SparsePath::CusparseLt:
      return "cusparselt";
  }
  return "?";
}

// TESSERA_SPARSE_CUDA_PATH: unset, empty or "auto" is Auto; "dense", "kernel", "cusparselt" force
// that path. Anything else is Auto with *warning naming the variable and what it accepts.
inline PathRequest parse_path_request(const char* value, std::string* warning) {
  const std::string v = value ? value : "";
  if (v.empty() || v == "auto") return PathRequest::Auto;
  if (v == "dense") return PathRequest::Dense;
  if (v == "kernel") return PathRequest::Kernel;
  if (v == "cusparselt") return PathRequest::CusparseLt;
  if (warning)
    *warning =
        "TESSERA_SPARSE_CUDA_PATH='" + v + "' is not a path (auto, dense, kernel or cusparselt); using auto";
  return PathRequest::Auto;
}

// Why cuSPARSELt cannot take y (batch, rows) = x (batch, cols) W^T with W (rows, cols) of `dtype`,
// or empty when it can. `aligned`: every pointer of the call is 16-byte aligned.
// cuSPARSELt's statuses that say it does not take a case (cusparseStatus_t's values; the plugin
// checks them against cusparse.h): INVALID_VALUE, ARCH_MISMATCH, MATRIX_TYPE_NOT_SUPPORTED,
// NOT_SUPPORTED. Every other failure (ALLOC_FAILED, INSUFFICIENT_RESOURCES, EXECUTION_FAILED,
// INTERNAL_ERROR, ...) and every CUDA error may pass, and is not remembered.
inline constexpr int kLtInvalidValue = 3, kLtArchMismatch = 4, kLtMatrixTypeNotSupported = 8, kLtNotSupported = 10;
inline bool lasting_refusal(int status) {
  return status == kLtInvalidValue || status == kLtArchMismatch || status == kLtMatrixTypeNotSupported ||
         status == kLtNotSupported;
}

inline std::string cusparselt_refusal(int32_t dtype, int64_t rows, int64_t cols, int64_t batch,
                                      bool aligned) {
  if (dtype != TESSERA_DTYPE_FLOAT16 && dtype != TESSERA_DTYPE_BFLOAT16)
    return "cuSPARSELt's 2:4 takes float16 and bfloat16 only";
  if (rows <= 0 || cols <= 0 || batch <= 0) return "an empty product";
  if (rows % 16 != 0 || cols % 16 != 0)
    return "the weight (" + std::to_string(rows) + ", " + std::to_string(cols) +
           ") is not a multiple of 16 in both dimensions";
  if (batch % 8 != 0) return "batch " + std::to_string(batch) + " is not a multiple of 8";
  if (!aligned) return "an operand is not 16-byte aligned";
  return {};
}

struct PathQuery {
  int32_t dtype = 0;  // tessera_dtype_t
  int64_t rows = 0, cols = 0, batch = 0;
  bool aligned = true;
  bool cusparselt_loaded = false;
  PathRequest request = PathRequest::Auto;
  int64_t dense_batch = 0;  // TESSERA_SPARSE_DENSE_BATCH, 0 when unset
  int64_t min_batch = kCusparseLtMinBatch;
};

struct PathChoice {
  SparsePath path = SparsePath::Dense;
  std::string why;
};

// The rule of Note [2:4 on cuSPARSELt].
inline PathChoice choose_sparse_path(const PathQuery& q) {
  if (q.dense_batch > 0 && q.batch >= q.dense_batch)
    return {SparsePath::Dense, "batch " + std::to_string(q.batch) +
                                   " >= TESSERA_SPARSE_DENSE_BATCH=" + std::to_string(q.dense_batch)};
  if (q.request == PathRequest::Dense) return {SparsePath::Dense, "TESSERA_SPARSE_CUDA_PATH=dense"};
  if (q.request == PathRequest::Kernel) return {SparsePath::Kernel, "TESSERA_SPARSE_CUDA_PATH=kernel"};
  std::string refusal = cusparselt_refusal(q.dtype, q.rows, q.cols, q.batch, q.aligned);
  if (refusal.empty() && !q.cusparselt_loaded) refusal = "cuSPARSELt is not loaded";
  if (q.request == PathRequest::CusparseLt)
    return refusal.empty()
               ? PathChoice{SparsePath::CusparseLt, "TESSERA_SPARSE_CUDA_PATH=cusparselt"}
               : PathChoice{SparsePath::Kernel, "cuSPARSELt refused (" + refusal + "); the kernel runs"};
  if (!refusal.empty()) return {SparsePath::Dense, "cuSPARSELt refused (" + refusal + ")"};
  if (q.batch < q.min_batch)
    return {SparsePath::Dense, "batch " + std::to_string(q.batch) + " < " + std::to_string(q.min_batch) +
                                   ", where dense is faster"};
  return {SparsePath::CusparseLt, "batch " + std::to_string(q.batch) + " >= " + std::to_string(q.min_batch)};
}

// A compressed weight's identity: where its layout lies on the device and its storage version.
struct CompressedKey {
  int device = 0;
  const void* data = nullptr;
  uint64_t version = 0;
  int32_t dtype = 0;
  int64_t rows = 0, cols = 0;
  bool operator==(const CompressedKey&) const = default;
  bool same_place(const CompressedKey& o) const { return device == o.device && data == o.data; }
};

// A plan's identity: cuSPARSELt plans depend on the shapes, the layouts of x and y (linear: x and y
// column-major as the library sees them; matmul: row-major) and the bias address in the epilogue.
struct PlanKey {
  int device = 0;
  int32_t dtype = 0;
  int64_t rows = 0, cols = 0, batch = 0;
  bool matmul_layout = false;
  const void* bias = nullptr;
  bool operator==(const PlanKey&) const = default;
};

// A small least-recently-used cache. put() returns the entries it pushed out (for the caller to
// release, outside any lock), including one at the same place as the new key (`same_place`, for
// keys that have it) — a weight rewritten in place.
template <typename Key, typename Value>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity ? capacity : 1) {}

  Value* find(const Key& key) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return &entries_.front().second;
      }
    return nullptr;
  }

  std::vector<Value> put(const Key& key, Value value) {
    std::vector<Value> out;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->first == key || replaces(it->first, key)) {
        out.push_back(std::move(it->second));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    entries_.emplace_front(key, std::move(value));
    while (entries_.size() > capacity_) {
      out.push_back(std::move(entries_.back().second));
      entries_.pop_back();
    }
    return out;
  }

  std::vector<Value> clear() {
    std::vector<Value> out;
    for (auto& e : entries_) out.push_back(std::move(e.second));
    entries_.clear();
    return out;
  }

  size_t size() const { return entries_.size(); }

 private:
  static bool replaces(const CompressedKey& old, const CompressedKey& key) { return old.same_place(key); }
  template <typename K>
  static bool replaces(const K&, const K&) {
    return false;
  }
  size_t capacity_;
  std::list<std::pair<Key, Value>> entries_;
};

}  // namespace tessera::sparse_cuda
