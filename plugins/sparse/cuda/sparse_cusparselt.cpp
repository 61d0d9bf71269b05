// See Note [2:4 on cuSPARSELt] in cusparselt_plan.h.
#include "sparse_cusparselt.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "cusparselt_loader.h"
#include "cusparselt_plan.h"
#include "sparse_linear.cuh"

namespace tessera::sparse_cuda {
namespace {

constexpr uint32_t kAlignment = 16;
static_assert(kLtInvalidValue == CUSPARSE_STATUS_INVALID_VALUE && kLtArchMismatch == CUSPARSE_STATUS_ARCH_MISMATCH &&
              kLtMatrixTypeNotSupported == CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED &&
              kLtNotSupported == CUSPARSE_STATUS_NOT_SUPPORTED);

std::atomic<uint64_t> g_matmuls{0}, g_compressions{0};

// Why compressing a weight or making a plan failed, and whether the failure lasts (lasting_refusal:
// the shape is then remembered as refused).
struct LtFailure {
  std::string error;
  bool lasting = false;
};

std::string lt_error(const CusparseLtApi& api, const char* what, cusparseStatus_t s) {
  const char* text = api.get_error_string ? api.get_error_string(s) : nullptr;
  return std::string(what) + " failed: " + (text ? text : "status " + std::to_string(int(s)));
}

LtFailure lt_failure(const CusparseLtApi& api, const char* what, cusparseStatus_t s) {
  return {lt_error(api, what, s), lasting_refusal(int(s))};
}

cudaDataType cuda_type(int32_t dtype) { return dtype == TESSERA_DTYPE_BFLOAT16 ? CUDA_R_16BF : CUDA_R_16F; }

// A device buffer from cudaMalloc, released with cudaFree (which waits for the device: an evicted
// weight may still be read by work in flight).
struct DeviceBlock {
  void* p = nullptr;
  ~DeviceBlock() {
    if (p) cudaFree(p);
  }
};

struct Compressed {
  std::shared_ptr<DeviceBlock> block;
};

// A plan with the descriptors it was made from.
struct Plan {
  const CusparseLtApi* api = nullptr;
  lt::MatDescriptor a{}, b{}, c{};
  lt::MatmulDescriptor matmul{};
  lt::MatmulAlgSelection alg{};
  lt::MatmulPlan plan{};
  int made = 0;  // how many of a, b, c, alg, plan were initialised (released in reverse)
  size_t workspace = 0;
  ~Plan() {
    if (made >= 5) api->plan_destroy(&plan);
    if (made >= 4) api->alg_selection_destroy(&alg);
    if (made >= 3) api->mat_descriptor_destroy(&c);
    if (made >= 2) api->mat_descriptor_destroy(&b);
    if (made >= 1) api->mat_descriptor_destroy(&a);
  }
};

// Per-process state; leaked on purpose (the CUDA runtime may be gone when statics are destroyed).
struct State {
  std::mutex mu;
  std::vector<std::unique_ptr<lt::Handle>> handles;  // by device; null until made
  std::vector<std::string> handle_errors;            // by device; why a handle could not be made
  LruCache<CompressedKey, Compressed> compressed{kCompressedCacheEntries};
  LruCache<PlanKey, std::shared_ptr<Plan>> plans{kPlanCacheEntries};
  std::set<std::tuple<int, int32_t, int64_t, int64_t, int64_t, bool>> refused;  // shapes the library refused
};

State& state() {
  static State* s = new State;
  return *s;
}

// The device's handle (made on first use with `device` current), or null with *error.
const lt::Handle* handle_for(const CusparseLtApi& api, int device, std::string* error) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (device < 0) {
    *error = "no current CUDA device";
    return nullptr;
  }
  if (size_t(device) >= s.handles.size()) {
    s.handles.resize(size_t(device) + 1);
    s.handle_errors.resize(size_t(device) + 1);
  }
  if (!s.handles[size_t(device)] && s.handle_errors[size_t(device)].empty()) {
    auto h = std::make_unique<lt::Handle>();
    const cusparseStatus_t st = api.init(h.get());
    if (st == CUSPARSE_STATUS_SUCCESS)
      s.handles[size_t(device)] = std::move(h);
    else
      s.handle_errors[size_t(device)] = lt_error(api, "cusparseLtInit", st);
  }
  *error = s.handle_errors[size_t(device)];
  return s.handles[size_t(device)].get();
}

// The structured descriptor of the weight: rows x cols row-major.
cusparseStatus_t structured(const CusparseLtApi& api, const lt::Handle* h, const LtCall& c,
                            lt::MatDescriptor* d) {
  return api.structured_descriptor_init(h, d, c.rows, c.cols, c.cols, kAlignment, cuda_type(c.dtype),
                                        CUSPARSE_ORDER_ROW, lt::kSparsity50Percent);
}

// Compresses the weight of `c` into a new device block: the dense pruned weight rebuilt from the
// layout in a stream-ordered temporary, then cusparseLtSpMMACompress2.
std::shared_ptr<DeviceBlock> compress(const CusparseLtApi& api, const lt::Handle* h, const LtCall& c,
                                      LtFailure* failure) {
  lt::MatDescriptor desc{};
  cusparseStatus_t st = structured(api, h, c, &desc);
  if (st != CUSPARSE_STATUS_SUCCESS) {
    *failure = lt_failure(api, "cusparseLtStructuredDescriptorInit", st);
    return nullptr;
  }
  size_t compressed_bytes = 0, buffer_bytes = 0;
  st = api.compressed_size2(h, &desc, &compressed_bytes, &buffer_bytes);
  if (st != CUSPARSE_STATUS_SUCCESS) {
    api.mat_descriptor_destroy(&desc);
    *failure = lt_failure(api, "cusparseLtSpMMACompressedSize2", st);
    return nullptr;
  }
  auto out = std::make_shared<DeviceBlock>();
  void *dense = nullptr, *buffer = nullptr;
  cudaError_t err = cudaMalloc(&out->p, compressed_bytes ? compressed_bytes : 1);
  if (err == cudaSuccess) err = cudaMallocAsync(&dense, size_t(c.rows) * size_t(c.cols) * 2, c.stream);
  if (err == cudaSuccess && buffer_bytes) err = cudaMallocAsync(&buffer, buffer_bytes, c.stream);
  MmaLayout plan;
  std::string plan_error;
  if (err == cudaSuccess && !mma_layout_plan(c.rows, c.cols, &plan, &plan_error)) {
    *failure = {plan_error, true};  // the shape has no mma.sp layout: it never will
  } else if (err == cudaSuccess) {
    err = expand_mma_layout(c.layout, plan, dense, c.stream);
    if (err == cudaSuccess) {
      st = api.compress2(h, &desc, 1, CUSPARSE_OPERATION_NON_TRANSPOSE, dense, out->p, buffer, c.stream);
      if (st != CUSPARSE_STATUS_SUCCESS) *failure = lt_failure(api, "cusparseLtSpMMACompress2", st);
    }
  }
  if (err != cudaSuccess) failure->error = std::string("compressing the weight: ") + cudaGetErrorString(err);
  if (dense) cudaFreeAsync(dense, c.stream);
  if (buffer) cudaFreeAsync(buffer, c.stream);
  api.mat_descriptor_destroy(&desc);
  if (!failure->error.empty()) {
    cudaGetLastError();
    return nullptr;
  }
  g_compressions.fetch_add(1, std::memory_order_relaxed);
  return out;
}

std::shared_ptr<Plan> make_plan(const CusparseLtApi& api, const lt::Handle* h, const LtCall& c,
                                LtFailure* failure) {
  auto p = std::make_shared<Plan>();
  p->api = &api;
  const cudaDataType t = cuda_type(c.dtype);
  // linear: x (batch, cols) row-major is B = x^T (cols x batch) column-major, y (batch, rows)
  // row-major is D = y^T (rows x batch) column-major; matmul: B = x (cols x batch), D = y
  // (rows x batch), both row-major.
  const cusparseOrder_t order = c.matmul_layout ? CUSPARSE_ORDER_ROW : CUSPARSE_ORDER_COL;
  const int64_t ldb = c.matmul_layout ? c.batch : c.cols, ldc = c.matmul_layout ? c.batch : c.rows;
  cusparseStatus_t st = structured(api, h, c, &p->a);
  const char* what = "cusparseLtStructuredDescriptorInit";
  if (st == CUSPARSE_STATUS_SUCCESS) {
    p->made = 1;
    what = "cusparseLtDenseDescriptorInit";
    st = api.dense_descriptor_init(h, &p->b, c.cols, c.batch, ldb, kAlignment, t, order);
  }
  if (st == CUSPARSE_STATUS_SUCCESS) {
    p->made = 2;
    st = api.dense_descriptor_init(h, &p->c, c.rows, c.batch, ldc, kAlignment, t, order);
  }
  if (st == CUSPARSE_STATUS_SUCCESS) {
    p->made = 3;
    what = "cusparseLtMatmulDescriptorInit";
    st = api.matmul_descriptor_init(h, &p->matmul, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                    CUSPARSE_OPERATION_NON_TRANSPOSE, &p->a, &p->b, &p->c, &p->c,
                                    lt::kCompute32F);
  }
  if (st == CUSPARSE_STATUS_SUCCESS && c.bias) {
    what = "cusparseLtMatmulDescSetAttribute(BIAS_POINTER)";
    const void* bias = c.bias;
    st = api.matmul_desc_set_attribute(h, &p->matmul, lt::kMatmulBiasPointer, &bias, sizeof bias);
  }
  if (st == CUSPARSE_STATUS_SUCCESS) {
    what = "cusparseLtMatmulAlgSelectionInit";
    st = api.alg_selection_init(h, &p->alg, &p->matmul, lt::kMatmulAlgDefault);
  }
  if (st == CUSPARSE_STATUS_SUCCESS) {
    p->made = 4;
    what = "cusparseLtMatmulPlanInit";
    st = api.plan_init(h, &p->plan, &p->matmul, &p->alg);
  }
  if (st == CUSPARSE_STATUS_SUCCESS) {
    p->made = 5;
    what = "cusparseLtMatmulGetWorkspace";
    st = api.get_workspace(h, &p->plan, &p->workspace);
  }
  if (st != CUSPARSE_STATUS_SUCCESS) {
    *failure = lt_failure(api, what, st);
    return nullptr;
  }
  return p;
}

}  // namespace

std::string cusparselt_run(const LtCall& c) {
  const CusparseLtApi& api = cusparselt_api();
  if (!api.loaded) return api.error;
  State& s = state();
  const auto shape = std::make_tuple(c.device, c.dtype, c.rows, c.cols, c.batch, c.matmul_layout);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.refused.count(shape)) return "cuSPARSELt refused this shape before";
  }
  std::string error;
  const lt::Handle* h = handle_for(api, c.device, &error);
  if (!h) return error;

  // The compressed weight: from the cache, or made now (and kept when the version is known).
  const CompressedKey ckey{c.device, c.layout, c.version, c.dtype, c.rows, c.cols};
  std::shared_ptr<DeviceBlock> weight;
  if (c.version != 0) {
    std::lock_guard<std::mutex> lock(s.mu);
    if (Compressed* hit = s.compressed.find(ckey)) weight = hit->block;
  }
  LtFailure failure;
  if (!weight) {
    weight = compress(api, h, c, &failure);
    if (!weight) {
      std::lock_guard<std::mutex> lock(s.mu);
      if (failure.lasting) s.refused.insert(shape);
      return failure.error;
    }
    if (c.version != 0) {
      std::vector<Compressed> out;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        out = s.compressed.put(ckey, Compressed{weight});
      }
      // `out` is released here, outside the lock (cudaFree waits for the device).
    }
  }

  const PlanKey pkey{c.device, c.dtype, c.rows, c.cols, c.batch, c.matmul_layout, c.bias};
  std::shared_ptr<Plan> plan;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (auto* hit = s.plans.find(pkey)) plan = *hit;
  }
  if (!plan) {
    plan = make_plan(api, h, c, &failure);
    if (!plan) {
      std::lock_guard<std::mutex> lock(s.mu);
      if (failure.lasting) s.refused.insert(shape);
      return failure.error;
    }
    std::vector<std::shared_ptr<Plan>> out;
    std::lock_guard<std::mutex> lock(s.mu);
    out = s.plans.put(pkey, plan);
  }

  void* workspace = nullptr;
  if (plan->workspace) {
    const cudaError_t err = cudaMallocAsync(&workspace, plan->workspace, c.stream);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return std::string("cuSPARSELt workspace: ") + cudaGetErrorString(err);
    }
  }
  const float alpha = 1.f, beta = 0.f;
  cudaStream_t stream = c.stream;
  const cusparseStatus_t st =
      api.matmul(h, &plan->plan, &alpha, weight->p, c.x, &beta, c.y, c.y, workspace, &stream, 1);
  if (workspace) cudaFreeAsync(workspace, c.stream);
  if (st != CUSPARSE_STATUS_SUCCESS) return lt_error(api, "cusparseLtMatmul", st);
  // An uncached compressed weight must live until the matmul has read it: cudaFree waits.
  g_matmuls.fetch_add(1, std::memory_order_relaxed);
  return {};
}

LtStats cusparselt_stats() {
  LtStats out;
  out.matmuls = g_matmuls.load(std::memory_order_relaxed);
  out.compressions = g_compressions.load(std::memory_order_relaxed);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  out.cached_weights = s.compressed.size();
  return out;
}

}  // namespace tessera::sparse_cuda
