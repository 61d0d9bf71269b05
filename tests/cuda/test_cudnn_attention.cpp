// SDPA on cuDNN (Note [SDPA on cuDNN]): what the plugin refuses to send to cuDNN (no GPU needed),
// that cudnn-frontend runs through the toolkit's real libcudnn opened by the plugin's loader, and on
// a GPU its validation of the graphs the plugin builds. The results are checked in
// test_cuda_kernels.cpp (CudnnAttentionLikeTheCpu).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>

#include "cudnn_attention.h"
#include "cudnn_loader.h"
#include "launch.h"

namespace {

using tessera::cuda::SdpaProblem;

// [batch, heads, len, dim] packed.
void packed(int64_t* strides, int64_t heads, int64_t len, int64_t dim) {
  strides[3] = 1;
  strides[2] = dim;
  strides[1] = len * dim;
  strides[0] = heads * len * dim;
}

SdpaProblem problem(int32_t dtype, int64_t b, int64_t h, int64_t lq, int64_t lk, int64_t d, bool causal) {
  SdpaProblem p;
  p.dtype = dtype;
  p.batch = b;
  p.heads = h;
  p.len_q = lq;
  p.len_k = lk;
  p.head_dim = p.value_dim = d;
  packed(p.q_strides, h, lq, d);
  packed(p.k_strides, h, lk, d);
  packed(p.v_strides, h, lk, d);
  packed(p.o_strides, h, lq, d);
  p.causal = causal;
  p.scale = 0.125;
  return p;
}

TEST(CudnnAttention, RefusalsNameTheConstraint) {
  using tessera::cuda::cudnn_sdpa_refusal;
  const SdpaProblem ok = problem(tessera::cuda::kDtF16, 2, 16, 1024, 1024, 128, true);
  EXPECT_EQ(cudnn_sdpa_refusal(ok, nullptr, nullptr, nullptr, nullptr, nullptr), "");
  SdpaProblem p = ok;
  p.dtype = tessera::cuda::kDtF32;
  EXPECT_NE(cudnn_sdpa_refusal(p, nullptr, nullptr, nullptr, nullptr, nullptr).find("float16 and bfloat16"),
            std::string::npos);
  for (int64_t d : {60, 264}) {
    p = problem(tessera::cuda::kDtBF16, 1, 2, 8, 8, d, false);
    EXPECT_NE(
        cudnn_sdpa_refusal(p, nullptr, nullptr, nullptr, nullptr, nullptr).find("multiples of 8 up to 256"),
        std::string::npos)
        << d;
  }
  p = ok;
  p.k_strides[1] = 0;  // keys broadcast over the heads
  EXPECT_NE(cudnn_sdpa_refusal(p, nullptr, nullptr, nullptr, nullptr, nullptr).find("broadcasts"),
            std::string::npos);
  p = ok;
  p.q_strides[3] = 2;
  EXPECT_NE(cudnn_sdpa_refusal(p, nullptr, nullptr, nullptr, nullptr, nullptr).find("last dim"),
            std::string::npos);
  p = ok;
  p.v_strides[2] = 132;  // 264 bytes: not a multiple of 16
  EXPECT_NE(cudnn_sdpa_refusal(p, nullptr, nullptr, nullptr, nullptr, nullptr).find("16-byte"),
            std::string::npos);
  alignas(16) static char buffer[64];
  EXPECT_EQ(cudnn_sdpa_refusal(ok, buffer, buffer, buffer, nullptr, buffer), "");
  EXPECT_NE(cudnn_sdpa_refusal(ok, buffer + 2, buffer, buffer, nullptr, buffer).find("not 16-byte aligned"),
            std::string::npos);
  p = ok;
  p.len_k = 0;
  EXPECT_NE(cudnn_sdpa_refusal(p, nullptr, nullptr, nullptr, nullptr, nullptr).find("empty"),
            std::string::npos);
  // Masks: [b or 1, h or 1, Lq, Lk] of the inputs' dtype.
  p = ok;
  p.has_bias = true;
  const int64_t mask_sizes[4] = {1, 1, 1024, 1024}, mask_strides[4] = {0, 0, 1024, 1};
  std::copy(mask_sizes, mask_sizes + 4, p.bias_sizes);
  std::copy(mask_strides, mask_strides + 4, p.bias_strides);
  EXPECT_EQ(cudnn_sdpa_refusal(p, nullptr, nullptr, nullptr, nullptr, nullptr), "");
  p.bias_sizes[2] = 1;  // one row for every query: a key padding mask
  EXPECT_NE(
      cudnn_sdpa_refusal(p, nullptr, nullptr, nullptr, nullptr, nullptr).find("broadcasts over the query"),
      std::string::npos);
}

#ifdef TESSERA_CUDA_HAVE_CUDNN_FRONTEND
bool have_gpu() {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return ok;
}

// The frontend runs through the plugin's cuDNN handle (its dynamic loading resolves cuDNN there):
// without a GPU its validation gets as far as asking the CUDA runtime for the device, and says so.
TEST(CudnnAttention, TheFrontendRunsThroughThePluginsCudnn) {
  ASSERT_TRUE(tessera::cuda::cudnn_attention_built());
  const tessera::cuda::CudnnApi& api = tessera::cuda::cudnn_api();
  ASSERT_TRUE(api.loaded) << api.error;
  ASSERT_NE(api.handle, nullptr);
  const std::string why =
      tessera::cuda::validate_cudnn_sdpa(problem(tessera::cuda::kDtF16, 1, 2, 64, 64, 64, true));
  if (have_gpu())
    EXPECT_EQ(why, "");
  else
    EXPECT_NE(why.find("driver"), std::string::npos) << why;
}

// cudnn-frontend accepts every graph the plugin builds: both dtypes, causal or not, head dims up to
// 256, other key lengths, value dims, and an additive mask broadcast over batch and heads. Its
// validation asks the device, so this needs a GPU.
TEST(CudnnAttention, TheFrontendValidatesTheGraphs) {
  if (!have_gpu())
    GTEST_SKIP() << "cudnn-frontend's validation reads the device's properties: no CUDA device";
  ASSERT_TRUE(tessera::cuda::cudnn_attention_built());
  const tessera::cuda::CudnnApi& api = tessera::cuda::cudnn_api();
  ASSERT_TRUE(api.loaded) << api.error;
  for (int32_t dt : {tessera::cuda::kDtF16, tessera::cuda::kDtBF16})
    for (bool causal : {false, true})
      for (int64_t d : {64, 128, 256}) {
        SCOPED_TRACE(std::to_string(dt) + (causal ? " causal d=" : " d=") + std::to_string(d));
        EXPECT_EQ(tessera::cuda::validate_cudnn_sdpa(problem(dt, 1, 16, 1024, 4096, d, causal)), "");
      }
  SdpaProblem p = problem(tessera::cuda::kDtF16, 2, 4, 77, 101, 64, false);
  p.has_bias = true;
  const int64_t mask_sizes[4] = {2, 1, 77, 101}, mask_strides[4] = {77 * 101, 0, 101, 1};
  std::copy(mask_sizes, mask_sizes + 4, p.bias_sizes);
  std::copy(mask_strides, mask_strides + 4, p.bias_strides);
  EXPECT_EQ(tessera::cuda::validate_cudnn_sdpa(p), "");
  // And it says why when a graph is wrong: an output narrower than the values.
  p = problem(tessera::cuda::kDtBF16, 1, 2, 64, 64, 64, false);
  p.o_strides[2] = 32;  // rows of the output overlap
  p.o_strides[1] = 64 * 32;
  p.o_strides[0] = 2 * 64 * 32;
  const std::string why = tessera::cuda::validate_cudnn_sdpa(p);
  EXPECT_FALSE(why.empty()) << "an overlapping output was accepted";
}
#else
TEST(CudnnAttention, ABuildWithoutTheFrontendSaysSo) {
  EXPECT_FALSE(tessera::cuda::cudnn_attention_built());
  EXPECT_NE(tessera::cuda::validate_cudnn_sdpa(SdpaProblem{}).find("without cudnn-frontend"),
            std::string::npos);
}
#endif

}  // namespace
