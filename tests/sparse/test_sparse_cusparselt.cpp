// The host side of the cuSPARSELt path (Note [2:4 on cuSPARSELt], Note [Loading cuSPARSELt]): the
// path rule, what cuSPARSELt is refused, the environment knob, the caches, and the loader against
// real files (a missing one, a library that is not cuSPARSELt, and pip's libcusparseLt.so.0 where
// the build found it). No GPU is needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cusparselt_loader.h"
#include "cusparselt_plan.h"

namespace {

namespace scu = tessera::sparse_cuda;
using scu::PathRequest;
using scu::SparsePath;

scu::PathQuery query(int32_t dtype, int64_t rows, int64_t cols, int64_t batch) {
  scu::PathQuery q;
  q.dtype = dtype;
  q.rows = rows;
  q.cols = cols;
  q.batch = batch;
  q.cusparselt_loaded = true;
  return q;
}

constexpr int32_t kF16 = TESSERA_DTYPE_FLOAT16, kBf16 = TESSERA_DTYPE_BFLOAT16, kF32 = TESSERA_DTYPE_FLOAT32;

TEST(SparseCusparseLtPath, AutoTakesCusparseLtFromTheMinimumBatchAndDenseBelow) {
  for (int32_t dt : {kF16, kBf16}) {
    EXPECT_EQ(scu::choose_sparse_path(query(dt, 4096, 4096, scu::kCusparseLtMinBatch)).path,
              SparsePath::CusparseLt);
    EXPECT_EQ(scu::choose_sparse_path(query(dt, 4096, 4096, 4096)).path, SparsePath::CusparseLt);
    const scu::PathChoice below =
        scu::choose_sparse_path(query(dt, 4096, 4096, scu::kCusparseLtMinBatch - 8));
    EXPECT_EQ(below.path, SparsePath::Dense);
    EXPECT_NE(below.why.find("where dense is faster"), std::string::npos) << below.why;
    EXPECT_EQ(scu::choose_sparse_path(query(dt, 4096, 4096, 1)).path, SparsePath::Dense);
  }
}

// Auto never picks the plugin's kernels (slower than dense on the H200); float32 and shapes
// cuSPARSELt refuses go dense, saying why.
TEST(SparseCusparseLtPath, AutoSendsWhatCusparseLtRefusesToDense) {
  const scu::PathChoice f32 = scu::choose_sparse_path(query(kF32, 4096, 4096, 1024));
  EXPECT_EQ(f32.path, SparsePath::Dense);
  EXPECT_NE(f32.why.find("float16 and bfloat16 only"), std::string::npos) << f32.why;
  const scu::PathChoice odd = scu::choose_sparse_path(query(kF16, 130, 1001, 1024));
  EXPECT_EQ(odd.path, SparsePath::Dense);
  EXPECT_NE(odd.why.find("(130, 1001) is not a multiple of 16"), std::string::npos) << odd.why;
  scu::PathQuery missing = query(kF16, 4096, 4096, 1024);
  missing.cusparselt_loaded = false;
  const scu::PathChoice absent = scu::choose_sparse_path(missing);
  EXPECT_EQ(absent.path, SparsePath::Dense);
  EXPECT_NE(absent.why.find("not loaded"), std::string::npos) << absent.why;
  scu::PathQuery unaligned = query(kBf16, 4096, 4096, 1024);
  unaligned.aligned = false;
  EXPECT_EQ(scu::choose_sparse_path(unaligned).path, SparsePath::Dense);
}

TEST(SparseCusparseLtPath, ForcedPathsAndTheDenseBatchOverride) {
  scu::PathQuery q = query(kF16, 4096, 4096, 16);
  q.request = PathRequest::Kernel;
  EXPECT_EQ(scu::choose_sparse_path(q).path, SparsePath::Kernel);
  q.request = PathRequest::CusparseLt;  // below the minimum batch, but forced
  EXPECT_EQ(scu::choose_sparse_path(q).path, SparsePath::CusparseLt);
  q.batch = 4096;
  q.request = PathRequest::Dense;
  EXPECT_EQ(scu::choose_sparse_path(q).path, SparsePath::Dense);
  // A forced cuSPARSELt that cannot take the case runs the kernel, the fallback.
  scu::PathQuery refused = query(kF16, 130, 1001, 9);
  refused.request = PathRequest::CusparseLt;
  const scu::PathChoice fallback = scu::choose_sparse_path(refused);
  EXPECT_EQ(fallback.path, SparsePath::Kernel);
  EXPECT_NE(fallback.why.find("cuSPARSELt refused"), std::string::npos) << fallback.why;
  refused.dtype = kF32;
  EXPECT_EQ(scu::choose_sparse_path(refused).path, SparsePath::Kernel);
  // TESSERA_SPARSE_DENSE_BATCH beats everything from its batch on, and nothing below.
  scu::PathQuery o = query(kF16, 4096, 4096, 256);
  o.request = PathRequest::Kernel;
  o.dense_batch = 256;
  EXPECT_EQ(scu::choose_sparse_path(o).path, SparsePath::Dense);
  o.batch = 255;
  EXPECT_EQ(scu::choose_sparse_path(o).path, SparsePath::Kernel);
}

TEST(SparseCusparseLtPath, RefusalsNameTheConstraint) {
  EXPECT_EQ(scu::cusparselt_refusal(kF16, 64, 64, 8, true), "");
  EXPECT_EQ(scu::cusparselt_refusal(kBf16, 16, 4096, 1024, true), "");
  EXPECT_NE(scu::cusparselt_refusal(kF16, 24, 64, 8, true).find("multiple of 16"), std::string::npos);
  EXPECT_NE(scu::cusparselt_refusal(kF16, 64, 40, 8, true).find("multiple of 16"), std::string::npos);
  EXPECT_NE(scu::cusparselt_refusal(kF16, 64, 64, 12, true).find("batch 12 is not a multiple of 8"),
            std::string::npos);
  EXPECT_NE(scu::cusparselt_refusal(kF16, 64, 64, 8, false).find("16-byte aligned"), std::string::npos);
  EXPECT_NE(scu::cusparselt_refusal(kF16, 0, 64, 8, true).find("empty"), std::string::npos);
  EXPECT_NE(scu::cusparselt_refusal(TESSERA_DTYPE_INT8, 64, 64, 8, true).find("float16 and bfloat16"),
            std::string::npos);
}

// Only a refusal that lasts is remembered for the shape; a failure that may pass (memory,
// resources, a launch) is tried again on the next call. The values are cusparse.h's (the plugin
// checks them at compile time); an independent list of its enum, written out here.
TEST(SparseCusparseLtPath, OnlyLastingRefusalsAreRemembered) {
  enum {
    kSuccess = 0, kNotInitialized = 1, kAllocFailed = 2, kInvalidValue = 3, kArchMismatch = 4, kMappingError = 5,
    kExecutionFailed = 6, kInternalError = 7, kMatrixTypeNotSupported = 8, kZeroPivot = 9, kNotSupported = 10,
    kInsufficientResources = 11
  };
  for (int s : {kInvalidValue, kArchMismatch, kMatrixTypeNotSupported, kNotSupported})
    EXPECT_TRUE(scu::lasting_refusal(s)) << s;
  for (int s : {kSuccess, kNotInitialized, kAllocFailed, kMappingError, kExecutionFailed, kInternalError, kZeroPivot,
                kInsufficientResources})
    EXPECT_FALSE(scu::lasting_refusal(s)) << s;
}

TEST(SparseCusparseLtPath, TheEnvironmentNamesAPathOrWarns) {
  std::string warning;
  EXPECT_EQ(scu::parse_path_request(nullptr, &warning), PathRequest::Auto);
  EXPECT_EQ(scu::parse_path_request("", &warning), PathRequest::Auto);
  EXPECT_EQ(scu::parse_path_request("auto", &warning), PathRequest::Auto);
  EXPECT_EQ(scu::parse_path_request("dense", &warning), PathRequest::Dense);
  EXPECT_EQ(scu::parse_path_request("kernel", &warning), PathRequest::Kernel);
  EXPECT_EQ(scu::parse_path_request("cusparselt", &warning), PathRequest::CusparseLt);
  EXPECT_TRUE(warning.empty()) << warning;
  EXPECT_EQ(scu::parse_path_request("cuSPARSELt!", &warning), PathRequest::Auto);
  EXPECT_NE(warning.find("TESSERA_SPARSE_CUDA_PATH='cuSPARSELt!'"), std::string::npos) << warning;
  EXPECT_NE(warning.find("auto, dense, kernel or cusparselt"), std::string::npos) << warning;
}

scu::CompressedKey weight(const void* data, uint64_t version) {
  return scu::CompressedKey{0, data, version, kF16, 64, 64};
}

// A weight is compressed once per storage version: the same key hits, a new version at the same
// address replaces the old entry (handed back to be freed), and the least recently used goes first.
TEST(SparseCusparseLtCache, OneEntryPerWeightAndVersion) {
  int a = 0, b = 0, c = 0;
  scu::LruCache<scu::CompressedKey, int> cache(2);
  EXPECT_TRUE(cache.put(weight(&a, 1), 10).empty());
  ASSERT_NE(cache.find(weight(&a, 1)), nullptr);
  EXPECT_EQ(*cache.find(weight(&a, 1)), 10);
  EXPECT_EQ(cache.find(weight(&a, 2)), nullptr);
  std::vector<int> out = cache.put(weight(&a, 2), 11);  // rewritten in place
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], 10);
  EXPECT_EQ(cache.find(weight(&a, 1)), nullptr);
  EXPECT_TRUE(cache.put(weight(&b, 5), 20).empty());
  ASSERT_NE(cache.find(weight(&a, 2)), nullptr);  // a is now the most recent
  out = cache.put(weight(&c, 7), 30);             // b is pushed out
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], 20);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.find(weight(&a, 2)), nullptr);
  EXPECT_NE(cache.find(weight(&c, 7)), nullptr);
  // The same address on another device is another weight.
  scu::CompressedKey other = weight(&c, 7);
  other.device = 1;
  EXPECT_EQ(cache.find(other), nullptr);
  EXPECT_EQ(cache.clear().size(), 2u);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(SparseCusparseLtCache, PlansDifferByShapeLayoutAndBias) {
  int bias = 0;
  scu::LruCache<scu::PlanKey, int> cache(8);
  const scu::PlanKey base{0, kF16, 4096, 4096, 1024, false, nullptr};
  cache.put(base, 1);
  scu::PlanKey k = base;
  k.batch = 2048;
  EXPECT_EQ(cache.find(k), nullptr);
  k = base;
  k.matmul_layout = true;
  EXPECT_EQ(cache.find(k), nullptr);
  k = base;
  k.bias = &bias;
  EXPECT_EQ(cache.find(k), nullptr);
  EXPECT_TRUE(cache.put(k, 2).empty());  // plans have no "same place": both stay
  EXPECT_EQ(cache.size(), 2u);
  ASSERT_NE(cache.find(base), nullptr);
  EXPECT_EQ(*cache.find(base), 1);
}

TEST(CusparseLtLoader, AMissingFileSaysWhatWasTriedAndHowToFixIt) {
  const scu::CusparseLtApi api = scu::load_cusparselt_from({"/nonexistent/libcusparseLt.so.0"});
  EXPECT_FALSE(api.loaded);
  EXPECT_NE(api.error.find("/nonexistent/libcusparseLt.so.0"), std::string::npos) << api.error;
  EXPECT_NE(api.error.find("TESSERA_CUDA_CUSPARSELT"), std::string::npos) << api.error;
  EXPECT_EQ(api.describe(), api.error);
}

TEST(CusparseLtLoader, ALibraryThatIsNotCusparseLtIsRefused) {
  const scu::CusparseLtApi api = scu::load_cusparselt_from({"libm.so.6"});
  EXPECT_FALSE(api.loaded);
  EXPECT_NE(api.error.find("is not a usable cuSPARSELt"), std::string::npos) << api.error;
  EXPECT_NE(api.error.find("cusparseLtInit"), std::string::npos) << api.error;
}

#ifdef TESSERA_TEST_CUSPARSELT_LIBRARY
// pip's cuSPARSELt, found when the build was configured: it opens without a GPU, reports a version
// of 0.6 or later, and the plugin's description names both.
TEST(CusparseLtLoader, OpensPipsLibraryAndReadsItsVersion) {
  const scu::CusparseLtApi api = scu::load_cusparselt_from({TESSERA_TEST_CUSPARSELT_LIBRARY});
  ASSERT_TRUE(api.loaded) << api.error;
  EXPECT_TRUE(api.major > 0 || api.minor >= 6) << api.major << "." << api.minor;
  const std::string d = api.describe();
  EXPECT_NE(d.find("cuSPARSELt " + std::to_string(api.major) + "." + std::to_string(api.minor)),
            std::string::npos)
      << d;
  EXPECT_NE(d.find(TESSERA_TEST_CUSPARSELT_LIBRARY), std::string::npos) << d;
  // Its error strings come through the table (no GPU is involved).
  ASSERT_NE(api.get_error_string, nullptr);
  EXPECT_NE(api.get_error_string(CUSPARSE_STATUS_NOT_SUPPORTED), nullptr);
}
#endif

}  // namespace
