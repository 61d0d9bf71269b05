// The CUDA 2:4 linear kernels (plugins/sparse/cuda) against a naive double loop over the densified
// weight: the CUDA-core kernel on the canonical storage that tessera::sparse::to_sparse_semi_structured
// writes, the tensor-core kernel (mma.sp) on the layout build_mma_layout makes from it. Skip, with
// the CUDA runtime's reason, where no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cusparselt_plan.h"
#include "sparse_cuda_ext.h"
#include "sparse_linear.cuh"
#include "tessera/plugin_loader.h"
#include "tessera/semi_structured.h"
#include "tessera/sparse_format.h"
#include "tessera/stream.h"
#include "tessera/tessera.h"

namespace {

namespace sp = tessera::sparse;
namespace scu = tessera::sparse_cuda;

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

// Empty when a GPU is usable, else the CUDA runtime's reason.
std::string no_gpu_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(err);
  return count == 0 ? "no usable CUDA device: 0 devices" : "";
}

// y (batch, rows) = x W^T + bias against a naive double loop; tol scales with the sum of |terms|.
void expect_linear_close(const tessera::Tensor& y, const tessera::Tensor& x, const tessera::Tensor& w,
                         const tessera::Tensor& bias, double tol) {
  const int64_t batch = x.size(0), cols = x.size(1), rows = w.size(0);
  tessera::Tensor yd = y.to(tessera::kFloat64), wd = w.to(tessera::kFloat64), xd = x.to(tessera::kFloat64),
                  bd = bias.to(tessera::kFloat64);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = bd.data_ptr<double>()[r], mag = std::abs(acc);
      for (int64_t c = 0; c < cols; ++c) {
        const double t = xd.data_ptr<double>()[b * cols + c] * wd.data_ptr<double>()[r * cols + c];
        acc += t;
        mag += std::abs(t);
      }
      ASSERT_NEAR(yd.data_ptr<double>()[b * rows + r], acc, tol * (1 + mag)) << "batch row " << b << " row " << r;
    }
}

TEST(SparseCuda, LinearMatchesDoubleLoop) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  tessera::manual_seed(21);
  for (tessera::DType dt : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16})
    for (int64_t rows : {1, 7, 130})
      for (int64_t cols : {5, 64, 1001})
        for (int64_t batch : {1, 9, 33}) {
          SCOPED_TRACE(std::string(tessera::dtype_name(dt)) + " rows " + std::to_string(rows) + " cols " +
                       std::to_string(cols) + " batch " + std::to_string(batch));
          tessera::Tensor w = sp::prune_2_4(tessera::randn({rows, cols}).to(dt));
          tessera::Tensor x = tessera::randn({batch, cols}).to(dt), bias = tessera::randn({rows}).to(dt);
          tessera::Tensor s = sp::to_sparse_semi_structured(w);
          const auto* h = static_cast<const tessera_semi_structured_header_t*>(s.storage()->data());
          DeviceBuffer<uint8_t> dw(h->total_bytes), dx(x.nbytes()), db(bias.nbytes()), dy(size_t(batch * rows) * x.itemsize());
          ASSERT_EQ(cudaMemcpy(dw.p, h, h->total_bytes, cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(dx.p, x.raw_data_ptr(), x.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(db.p, bias.raw_data_ptr(), bias.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
          const scu::DType cdt = dt == tessera::kFloat32 ? scu::DType::F32
                                 : dt == tessera::kFloat16 ? scu::DType::F16 : scu::DType::BF16;
          ASSERT_EQ(scu::linear(cdt, dw.p + h->values_offset, dw.p + h->indices_offset, rows, cols, dx.p, batch, db.p,
                                dy.p, nullptr),
                    cudaSuccess);
          tessera::Tensor y = tessera::empty({batch, rows}, tessera::TensorOptions().dtype(dt));
          ASSERT_EQ(cudaMemcpy(y.raw_data_ptr(), dy.p, y.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
          expect_linear_close(y, x, w, bias, dt == tessera::kFloat32 ? 1e-4 : 2e-2);
        }
}

// The tensor-core kernel: f16 and bf16, shapes with row, column and batch tails (odd columns take
// the unaligned loads of x), every batch tile width (1, 2 and 4 tiles of 8), with and without bias.
TEST(SparseCuda, MmaLinearMatchesDoubleLoop) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  tessera::manual_seed(22);
  for (tessera::DType dt : {tessera::kFloat16, tessera::kBFloat16})
    for (int64_t rows : {1, 17, 130, 300})
      for (int64_t cols : {5, 32, 64, 1001})
        for (int64_t batch : {1, 9, 16, 33, 100})
          for (bool with_bias : {true, false}) {
            SCOPED_TRACE(std::string(tessera::dtype_name(dt)) + " rows " + std::to_string(rows) + " cols " +
                         std::to_string(cols) + " batch " + std::to_string(batch) + (with_bias ? " bias" : ""));
            tessera::Tensor w = sp::prune_2_4(tessera::randn({rows, cols}).to(dt));
            tessera::Tensor x = tessera::randn({batch, cols}).to(dt);
            tessera::Tensor bias = with_bias ? tessera::randn({rows}).to(dt) : tessera::zeros({rows}).to(dt);
            const sp::SemiStructuredParts parts = sp::semi_structured_parts(sp::to_sparse_semi_structured(w));
            std::string error;
            std::unique_ptr<scu::MmaLayout, decltype(&std::free)> layout(
                scu::build_mma_layout(static_cast<const uint8_t*>(parts.values.raw_data_ptr()),
                                      static_cast<const uint8_t*>(parts.indices.raw_data_ptr()), rows, cols, &error),
                &std::free);
            ASSERT_TRUE(layout) << error;
            DeviceBuffer<uint8_t> dl(layout->total_bytes), dx(x.nbytes()), db(bias.nbytes()),
                dy(size_t(batch * rows) * x.itemsize());
            ASSERT_EQ(cudaMemcpy(dl.p, layout.get(), layout->total_bytes, cudaMemcpyHostToDevice), cudaSuccess);
            ASSERT_EQ(cudaMemcpy(dx.p, x.raw_data_ptr(), x.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
            ASSERT_EQ(cudaMemcpy(db.p, bias.raw_data_ptr(), bias.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
            const scu::DType cdt = dt == tessera::kFloat16 ? scu::DType::F16 : scu::DType::BF16;
            ASSERT_EQ(scu::linear_mma(cdt, dl.p, *layout, dx.p, batch, with_bias ? db.p : nullptr, dy.p, nullptr),
                      cudaSuccess);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            tessera::Tensor y = tessera::empty({batch, rows}, tessera::TensorOptions().dtype(dt));
            ASSERT_EQ(cudaMemcpy(y.raw_data_ptr(), dy.p, y.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
            // f32 accumulation, one rounding of the output: 2^-11 (f16) or 2^-8 (bf16) of |y| <= sum |terms|.
            expect_linear_close(y, x, w, bias, dt == tessera::kFloat16 ? 2e-3 : 8e-3);
          }
}

// ---- Through dispatch: a semi-structured tensor moved to cuda and the sparse_cuda plugin's kernels.

uint64_t sparse_cuda_launches() {
  auto fn = tessera::plugin_extension<tessera_ext_sparse_cuda_kernel_launches_fn_t>(
      "sparse_cuda", TESSERA_EXT_SPARSE_CUDA_KERNEL_LAUNCHES);
  return fn ? fn(nullptr) : 0;
}

tessera_sparse_cuda_stats_t sparse_cuda_stats() {
  tessera_sparse_cuda_stats_t out{};
  auto fn = tessera::plugin_extension<tessera_ext_sparse_cuda_stats_fn_t>("sparse_cuda",
                                                                          TESSERA_EXT_SPARSE_CUDA_STATS);
  EXPECT_NE(fn, nullptr) << "the sparse_cuda plugin has no stats extension";
  if (fn) fn(nullptr, &out);
  return out;
}

// cuSPARSELt as the plugin sees it ("cuSPARSELt 0.8.1 (...)" or why not).
std::string cusparselt_status() {
  auto fn = tessera::plugin_extension<tessera_ext_sparse_cuda_cusparselt_fn_t>(
      "sparse_cuda", TESSERA_EXT_SPARSE_CUDA_CUSPARSELT);
  return fn ? fn(nullptr) : "the sparse_cuda plugin is not loaded";
}

// Sets an environment variable for the life of the object (Note [2:4 on cuSPARSELt]: the plugin
// reads TESSERA_SPARSE_CUDA_PATH and TESSERA_SPARSE_DENSE_BATCH at every call).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* value) : name(n) { EXPECT_EQ(setenv(n, value, 1), 0); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

const tessera::Device kCuda("cuda:0");

TEST(SparseCudaDispatch, ToCudaKeepsItSemiStructured) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  tessera::manual_seed(31);
  tessera::Tensor w = sp::prune_2_4(tessera::randn({40, 70}).to(tessera::kFloat16));
  tessera::Tensor s = sp::to_sparse_semi_structured(w);
  tessera::Tensor c = s.to(kCuda);
  EXPECT_TRUE(sp::is_sparse(c));
  EXPECT_EQ(c.device(), kCuda);
  EXPECT_EQ(c.sizes(), s.sizes());
  EXPECT_NE(sp::describe(c).find("device=cuda:0"), std::string::npos) << sp::describe(c);
  tessera::Tensor back = c.to("cpu");
  EXPECT_TRUE(sp::is_sparse(back));
  EXPECT_EQ(back.storage()->data(), s.storage()->data());  // the canonical form it came from
  tessera::Tensor dense = sp::to_dense(c);
  EXPECT_EQ(dense.device(), kCuda);
  EXPECT_TRUE(tessera::equal(dense.to("cpu"), w));
}

// linear(x, w, bias) and matmul(w, x) on cuda run the plugin's kernels when that path is asked for
// (its launch counter moves) and match a double loop: f16 / bf16 on the tensor cores, f32 on the
// CUDA cores, with tails.
TEST(SparseCudaDispatch, LinearAndMatmulRunThePluginKernels) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const ScopedEnv path("TESSERA_SPARSE_CUDA_PATH", "kernel");
  tessera::manual_seed(32);
  for (tessera::DType dt : {tessera::kFloat16, tessera::kBFloat16, tessera::kFloat32})
    for (int64_t batch : {1, 16, 100}) {
      SCOPED_TRACE(std::string(tessera::dtype_name(dt)) + " batch " + std::to_string(batch));
      const int64_t rows = 130, cols = 1001;
      tessera::Tensor w = sp::prune_2_4(tessera::randn({rows, cols}).to(dt));
      tessera::Tensor x = tessera::randn({batch, cols}).to(dt), bias = tessera::randn({rows}).to(dt);
      tessera::Tensor wc = sp::to_sparse_semi_structured(w).to(kCuda);
      const double tol = dt == tessera::kFloat32 ? 1e-4 : dt == tessera::kFloat16 ? 2e-3 : 8e-3;
      uint64_t before = sparse_cuda_launches();
      tessera::Tensor y = tessera::linear(x.to(kCuda), wc, bias.to(kCuda));
      EXPECT_GT(sparse_cuda_launches(), before) << "linear took the dense path";
      EXPECT_EQ(y.device(), kCuda);
      expect_linear_close(y.to("cpu"), x, w, bias, tol);

      // matmul(w, x^T): (rows, cols) x (cols, batch).
      tessera::Tensor xt = x.t().contiguous();
      before = sparse_cuda_launches();
      tessera::Tensor z = tessera::matmul(wc, xt.to(kCuda));
      EXPECT_GT(sparse_cuda_launches(), before) << "matmul took the dense path";
      expect_linear_close(z.to("cpu").t().contiguous(), x, w, tessera::zeros({rows}).to(dt), tol);
    }
}

// The kernel runs on the thread's current stream of the device (a created stream here): its
// result is complete once that stream is synchronised.
TEST(SparseCudaDispatch, LinearRunsOnTheCurrentStream) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const ScopedEnv path("TESSERA_SPARSE_CUDA_PATH", "kernel");
  tessera::manual_seed(33);
  tessera::Tensor w = sp::prune_2_4(tessera::randn({512, 512}).to(tessera::kFloat16));
  tessera::Tensor x = tessera::randn({64, 512}).to(tessera::kFloat16);
  tessera::Tensor wc = sp::to_sparse_semi_structured(w).to(kCuda), xc = x.to(kCuda);
  tessera::synchronize(kCuda);
  tessera::Stream stream = tessera::Stream::create(kCuda);
  tessera::Tensor y;
  {
    tessera::StreamGuard guard(stream);
    const uint64_t before = sparse_cuda_launches();
    y = tessera::linear(xc, wc);
    EXPECT_GT(sparse_cuda_launches(), before);
    stream.synchronize();
  }
  expect_linear_close(y.to("cpu"), x, w, tessera::zeros({512}).to(tessera::kFloat16), 2e-3);
}

// TESSERA_SPARSE_DENSE_BATCH=N sends batch >= N to the dense path (the plugin reads it per call):
// same result, no sparse launch; below N the (asked-for) sparse kernel runs.
TEST(SparseCudaDispatch, DenseBatchOverrideTakesTheDensePath) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const ScopedEnv path("TESSERA_SPARSE_CUDA_PATH", "kernel");
  tessera::manual_seed(34);
  tessera::Tensor w = sp::prune_2_4(tessera::randn({64, 96}).to(tessera::kFloat16));
  tessera::Tensor wc = sp::to_sparse_semi_structured(w).to(kCuda);
  ASSERT_EQ(setenv("TESSERA_SPARSE_DENSE_BATCH", "8", 1), 0);
  for (int64_t batch : {4, 16}) {
    tessera::Tensor x = tessera::randn({batch, 96}).to(tessera::kFloat16);
    const uint64_t before = sparse_cuda_launches();
    tessera::Tensor y = tessera::linear(x.to(kCuda), wc);
    EXPECT_EQ(sparse_cuda_launches() > before, batch < 8) << "batch " << batch;
    expect_linear_close(y.to("cpu"), x, w, tessera::zeros({64}).to(tessera::kFloat16), 2e-3);
  }
  unsetenv("TESSERA_SPARSE_DENSE_BATCH");
}

// cuSPARSELt (Note [2:4 on cuSPARSELt]): linear with and without bias (the bias in its epilogue)
// and matmul(w, x), f16 and bf16, against a double loop; the weight is compressed once and reused
// by later calls at other batches; another weight is compressed anew. Skips where cuSPARSELt is
// not loaded, saying why (the GPU checks point TESSERA_CUDA_CUSPARSELT at PyTorch's copy and
// count a skip as a failure).
TEST(SparseCudaCusparseLt, LinearAndMatmulMatchADoubleLoopAndCompressOnce) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string status = cusparselt_status();
  if (status.rfind("cuSPARSELt ", 0) != 0) GTEST_SKIP() << status;
  const ScopedEnv path("TESSERA_SPARSE_CUDA_PATH", "cusparselt");
  tessera::manual_seed(35);
  for (tessera::DType dt : {tessera::kFloat16, tessera::kBFloat16}) {
    SCOPED_TRACE(tessera::dtype_name(dt));
    const int64_t rows = 256, cols = 512;
    const double tol = dt == tessera::kFloat16 ? 2e-3 : 8e-3;
    tessera::Tensor w = sp::prune_2_4(tessera::randn({rows, cols}).to(dt));
    tessera::Tensor wc = sp::to_sparse_semi_structured(w).to(kCuda);
    tessera::Tensor bias = tessera::randn({rows}).to(dt);
    const tessera_sparse_cuda_stats_t first = sparse_cuda_stats();
    for (int64_t batch : {64, 128, 8}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      tessera::Tensor x = tessera::randn({batch, cols}).to(dt);
      const tessera_sparse_cuda_stats_t before = sparse_cuda_stats();
      tessera::Tensor y = tessera::linear(x.to(kCuda), wc, bias.to(kCuda));
      tessera::Tensor y0 = tessera::linear(x.to(kCuda), wc);
      const tessera_sparse_cuda_stats_t after = sparse_cuda_stats();
      EXPECT_EQ(after.cusparselt_matmuls, before.cusparselt_matmuls + 2) << "linear did not run cuSPARSELt";
      EXPECT_EQ(after.kernel_launches, before.kernel_launches);
      expect_linear_close(y.to("cpu"), x, w, bias, tol);
      expect_linear_close(y0.to("cpu"), x, w, tessera::zeros({rows}).to(dt), tol);
      tessera::Tensor z = tessera::matmul(wc, x.t().contiguous().to(kCuda));
      EXPECT_EQ(sparse_cuda_stats().cusparselt_matmuls, after.cusparselt_matmuls + 1) << "matmul did not";
      expect_linear_close(z.to("cpu").t().contiguous(), x, w, tessera::zeros({rows}).to(dt), tol);
    }
    EXPECT_EQ(sparse_cuda_stats().cusparselt_compressions, first.cusparselt_compressions + 1)
        << "the weight was compressed more than once";
    tessera::Tensor w2 = sp::prune_2_4(tessera::randn({rows, cols}).to(dt));
    tessera::Tensor x2 = tessera::randn({64, cols}).to(dt);
    tessera::Tensor y2 = tessera::linear(x2.to(kCuda), sp::to_sparse_semi_structured(w2).to(kCuda));
    EXPECT_EQ(sparse_cuda_stats().cusparselt_compressions, first.cusparselt_compressions + 2);
    expect_linear_close(y2.to("cpu"), x2, w2, tessera::zeros({rows}).to(dt), tol);
  }
}

// The automatic rule: below kCusparseLtMinBatch, and for float32 or a shape cuSPARSELt refuses, the
// dense path runs (no sparse launch, same result); from it on, cuSPARSELt where it is loaded.
TEST(SparseCudaCusparseLt, AutoPathIsDenseBelowTheMinimumBatch) {
  if (const std::string why = no_gpu_reason(); !why.empty()) GTEST_SKIP() << why;
  unsetenv("TESSERA_SPARSE_CUDA_PATH");
  tessera::manual_seed(36);
  const bool have_lt = cusparselt_status().rfind("cuSPARSELt ", 0) == 0;
  for (tessera::DType dt : {tessera::kFloat16, tessera::kFloat32})
    for (int64_t batch : {int64_t(8), scu::kCusparseLtMinBatch}) {
      SCOPED_TRACE(std::string(tessera::dtype_name(dt)) + " batch " + std::to_string(batch));
      tessera::Tensor w = sp::prune_2_4(tessera::randn({128, 256}).to(dt));
      tessera::Tensor x = tessera::randn({batch, 256}).to(dt);
      const tessera_sparse_cuda_stats_t before = sparse_cuda_stats();
      tessera::Tensor y = tessera::linear(x.to(kCuda), sp::to_sparse_semi_structured(w).to(kCuda));
      const tessera_sparse_cuda_stats_t after = sparse_cuda_stats();
      const bool lt = dt == tessera::kFloat16 && batch >= scu::kCusparseLtMinBatch && have_lt;
      EXPECT_EQ(after.kernel_launches, before.kernel_launches);
      EXPECT_EQ(after.cusparselt_matmuls, before.cusparselt_matmuls + (lt ? 1 : 0));
      EXPECT_EQ(after.dense_choices, before.dense_choices + (lt ? 0 : 1));
      expect_linear_close(y.to("cpu"), x, w, tessera::zeros({128}).to(dt),
                          dt == tessera::kFloat32 ? 1e-4 : 2e-3);
    }
}

}  // namespace
