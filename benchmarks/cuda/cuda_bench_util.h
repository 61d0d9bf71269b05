// What the CUDA benchmarks share: the reason there is no device, a tensor's device address, a
// per-call timer, and a dense GEMM through cuBLASLt called directly (the reference of the matmul
// and the 2:4 sparse linear rows).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "tessera/dispatcher.h"
#include "tessera/tessera.h"

namespace tessera_bench {

// Empty when cuda:0 exists; else why not, in the CUDA plugin's words.
inline std::string no_device_reason() {
  if (tessera::device_count("cuda") > 0) return {};
  const tessera::BackendDevice& b = tessera::backend_device(tessera::DeviceType::CUDA);
  char reason[512] = {0};
  b.iface->device_count(b.self, reason, sizeof(reason));
  return std::string("no CUDA device: ") + reason;
}

// The device address of element (0, ..., 0).
inline void* data_of(const tessera::Tensor& t) {
  return static_cast<char*>(t.storage()->data()) + t.storage_offset() * int64_t(t.itemsize());
}

// Seconds per call of `fn`, each call waited for (cudaDeviceSynchronize), after a warm-up call,
// over at least `min_seconds`.
inline double seconds_per_call(const std::function<void()>& fn, double min_seconds = 0.3) {
  fn();
  cudaDeviceSynchronize();
  int64_t iters = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0.0;
  do {
    for (int i = 0; i < 5; ++i) {
      fn();
      cudaDeviceSynchronize();
    }
    iters += 5;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (elapsed < min_seconds);
  return elapsed / double(iters);
}

// Column-major D (m x n) = op(A) B with B (k x n), op(A) = A (m x k) or, with `transpose_a`, A^T
// for A stored k x m; f32 accumulation, the heuristic's first algorithm, up to 32 MiB workspace.
// `ok` is false when cuBLASLt offers no algorithm (the benchmark then reports that).
struct CublasLtGemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic{};
  void* workspace = nullptr;
  bool ok = false;

  CublasLtGemm(int64_t m, int64_t n, int64_t k, bool transpose_a, cudaDataType_t type) {
    if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) return;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (transpose_a) {
      const cublasOperation_t trans = CUBLAS_OP_T;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans));
      cublasLtMatrixLayoutCreate(&la, type, uint64_t(k), uint64_t(m), k);
    } else {
      cublasLtMatrixLayoutCreate(&la, type, uint64_t(m), uint64_t(k), m);
    }
    cublasLtMatrixLayoutCreate(&lb, type, uint64_t(k), uint64_t(n), k);
    cublasLtMatrixLayoutCreate(&ld, type, uint64_t(m), uint64_t(n), m);
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t ws = uint64_t(32) << 20;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    int returned = 0;
    cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld, ld, pref, 1, &heuristic, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    if (returned == 0) return;
    cudaMalloc(&workspace, heuristic.workspaceSize ? heuristic.workspaceSize : 1);
    ok = true;
  }
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;
  ~CublasLtGemm() {
    if (workspace) cudaFree(workspace);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (handle) cublasLtDestroy(handle);
  }
  void run(const void* a, const void* b, void* d) {
    const float alpha = 1.0f, beta = 0.0f;
    cublasLtMatmul(handle, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &heuristic.algo, workspace,
                   heuristic.workspaceSize, nullptr);
  }
};

}  // namespace tessera_bench
