// Shared by the GPU tests of the CUDA backend (test_cuda_kernels.cpp, test_cuda_nan.cpp): the skip
// rule without a device, the probes that tell a CUDA run from a CPU fallback, and the comparison
// against a host reference.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tessera/cuda/cuda_plugin.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace cuda_test {

inline std::string no_device_reason() {
  if (tessera::device_count("cuda") > 0) return {};
  const tessera::BackendDevice& b = tessera::backend_device(tessera::DeviceType::CUDA);
  char reason[512] = {0};
  b.iface->device_count(b.self, reason, sizeof(reason));
  return reason;
}

// Skips without a device, except under TESSERA_REQUIRE_CUDA=1 (the GPU run), where zero devices
// fail the test instead: a GPU check must not pass by skipping everything.
inline bool cuda_required() {
  const char* v = std::getenv("TESSERA_REQUIRE_CUDA");
  return v && std::string(v) == "1";
}

// The plugin's count of queued CUDA kernels and cuBLASLt calls (tessera_cuda_kernel_launches). A
// same-dtype dense copy is a cudaMemcpyAsync, not a kernel, and leaves it unchanged.
inline uint64_t cuda_kernel_launches() {
  std::string why;
  if (!tessera::ensure_backend_loaded(tessera::DeviceType::CUDA, &why)) return 0;
  std::string path;
  for (const auto& p : tessera::plugins())
    if (p.name == "cuda") path = p.library;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return 0;
  auto fn = reinterpret_cast<tessera_cuda_kernel_launches_fn_t>(dlsym(lib, TESSERA_CUDA_KERNEL_LAUNCHES_NAME));
  const uint64_t n = fn ? fn() : 0;
  dlclose(lib);
  return n;
}

struct Tol {
  double rtol, atol;
};
inline Tol tol_for(tessera::DType t, double scale = 1.0) {
  switch (t) {
    case tessera::DType::Float16: return {3e-3 * scale, 3e-3 * scale};
    case tessera::DType::BFloat16: return {1.6e-2 * scale, 1.6e-2 * scale};
    case tessera::DType::Float32: return {2e-5 * scale, 2e-5 * scale};
    default: return {0.0, 0.0};
  }
}

// Within tolerance, or equal (an infinity equals the same infinity: |inf - inf| is NaN, which no
// tolerance accepts), or both NaN.
inline bool close_enough(double got, double expected, Tol tol) {
  if (got == expected) return true;
  if (std::isnan(got) && std::isnan(expected)) return true;
  return std::abs(got - expected) <= tol.atol + tol.rtol * std::abs(expected);
}

// Compares on the host in double (see close_enough); names the first five elements that differ.
inline void expect_close(const tessera::Tensor& got, const tessera::Tensor& expected, Tol tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), expected.sizes()) << what;
  ASSERT_EQ(got.dtype(), expected.dtype()) << what;
  tessera::Tensor g = got.cpu().to(tessera::kFloat64).contiguous();
  tessera::Tensor e = expected.cpu().to(tessera::kFloat64).contiguous();
  const double* gp = g.data_ptr<double>();
  const double* ep = e.data_ptr<double>();
  int64_t bad = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (!close_enough(gp[i], ep[i], tol)) {
      if (++bad <= 5) ADD_FAILURE() << what << ": element " << i << " got " << gp[i] << " expected " << ep[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.numel() << " elements differ";
}

}  // namespace cuda_test

#define REQUIRE_CUDA_DEVICE()                                                                             \
  do {                                                                                                    \
    const std::string why = ::cuda_test::no_device_reason();                                              \
    if (!why.empty() && ::cuda_test::cuda_required()) FAIL() << "TESSERA_REQUIRE_CUDA=1 and no CUDA device: " << why; \
    if (!why.empty()) GTEST_SKIP() << "no CUDA device: " << why;                                          \
  } while (0)

// Runs the statements and expects that no call went to the CPU fallback on this thread
// (tessera::cpu_fallback_calls_on_this_thread, the dispatcher's own count) and that the plugin
// queued at least one CUDA kernel.
#define EXPECT_RUNS_ON_CUDA(what, ...)                                                                   \
  do {                                                                                                   \
    const uint64_t fallbacks_before_ = tessera::cpu_fallback_calls_on_this_thread();                    \
    const uint64_t launches_before_ = ::cuda_test::cuda_kernel_launches();                               \
    __VA_ARGS__;                                                                                         \
    EXPECT_EQ(tessera::cpu_fallback_calls_on_this_thread(), fallbacks_before_) << what << ": the CPU fallback ran"; \
    EXPECT_GT(::cuda_test::cuda_kernel_launches(), launches_before_) << what << ": no CUDA kernel was queued"; \
  } while (0)

// Runs the statements and expects that no call went to the CPU fallback, whatever the plugin
// queued (a same-dtype dense copy is one cudaMemcpyAsync and launches no kernel).
#define EXPECT_NO_CPU_FALLBACK(what, ...)                                                                \
  do {                                                                                                   \
    const uint64_t fallbacks_before_ = tessera::cpu_fallback_calls_on_this_thread();                    \
    __VA_ARGS__;                                                                                         \
    EXPECT_EQ(tessera::cpu_fallback_calls_on_this_thread(), fallbacks_before_) << what << ": the CPU fallback ran"; \
  } while (0)
