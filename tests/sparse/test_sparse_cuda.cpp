// The CUDA 2:4 linear kernel (plugins/sparse/cuda) against a naive double loop over the densified
// weight, on the canonical storage that tessera::sparse::to_sparse_semi_structured writes. Skips,
// with the CUDA runtime's reason, where no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sparse_linear.cuh"
#include "tessera/semi_structured.h"
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

TEST(SparseCuda, LinearMatchesDoubleLoop) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    GTEST_SKIP() << "no usable CUDA device: " << (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
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
          tessera::Tensor yd = y.to(tessera::kFloat64), wd = w.to(tessera::kFloat64), xd = x.to(tessera::kFloat64),
                          bd = bias.to(tessera::kFloat64);
          const double tol = dt == tessera::kFloat32 ? 1e-4 : 2e-2;
          for (int64_t b = 0; b < batch; ++b)
            for (int64_t r = 0; r < rows; ++r) {
              double acc = bd.data_ptr<double>()[r], mag = std::abs(acc);
              for (int64_t c = 0; c < cols; ++c) {
                const double t = xd.data_ptr<double>()[b * cols + c] * wd.data_ptr<double>()[r * cols + c];
                acc += t;
                mag += std::abs(t);
              }
              ASSERT_NEAR(yd.data_ptr<double>()[b * rows + r], acc, tol * (1 + mag));
            }
        }
}

}  // namespace
