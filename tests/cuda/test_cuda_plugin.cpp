// The CUDA plugin through the runtime, on any machine: it is discovered, loads without a driver or
// GPU, reports zero devices with the reason, registers its kernels with their dtypes, and cuBLASLt
// is found at run time.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include <cuda_runtime_api.h>

#include "cublaslt_loader.h"
#include "cudnn_loader.h"
#include "tessera/cuda/cuda_plugin.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"
#include "tessera/tessera.h"

namespace {

const tessera::PluginInfo* find_cuda_plugin(std::vector<tessera::PluginInfo>& all) {
  for (const auto& p : all)
    if (p.name == "cuda") return &p;
  return nullptr;
}

std::string cuda_reason(int32_t* count) {
  const tessera::BackendDevice& b = tessera::backend_device(tessera::DeviceType::CUDA);
  char reason[512] = {0};
  *count = b.iface->device_count(b.self, reason, sizeof(reason));
  return reason;
}

bool driver_present() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

TEST(CudaPlugin, IsDiscoveredAsTheCudaBackend) {
  auto all = tessera::plugins();
  const tessera::PluginInfo* p = find_cuda_plugin(all);
  ASSERT_NE(p, nullptr) << "no plugin named 'cuda' among " << all.size() << " discovered plugins";
  EXPECT_EQ(p->kind, tessera::PluginKind::Backend);
  EXPECT_TRUE(p->has_device);
  EXPECT_EQ(p->device_type, tessera::DeviceType::CUDA);
  EXPECT_NE(p->status, tessera::PluginStatus::Failed) << p->reason;
  EXPECT_NE(p->library.find("libtessera_cuda.so"), std::string::npos) << p->library;
}

TEST(CudaPlugin, LoadsAndCountsDevicesWithoutFailing) {
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(tessera::DeviceType::CUDA, &why)) << why;
  auto all = tessera::plugins();
  const tessera::PluginInfo* p = find_cuda_plugin(all);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->status, tessera::PluginStatus::Loaded) << p->reason;
  int32_t n = -1;
  const std::string reason = cuda_reason(&n);
  EXPECT_EQ(tessera::device_count("cuda"), n);
  if (n == 0) {
    EXPECT_FALSE(reason.empty()) << "zero devices must come with a reason";
    EXPECT_TRUE(reason.find("CUDA driver") != std::string::npos || reason.find("no CUDA device") != std::string::npos ||
                reason.find("CUDA initialisation failed") != std::string::npos)
        << reason;
  } else {
    EXPECT_TRUE(reason.empty()) << reason;
  }
}

TEST(CudaPlugin, WithoutDriverReportsInsufficientDriverAndTheFix) {
  if (driver_present()) GTEST_SKIP() << "libcuda.so.1 is present: this checks the machine without a driver";
  int32_t n = -1;
  const std::string reason = cuda_reason(&n);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(reason, "CUDA driver not found (cudaErrorInsufficientDriver): install the NVIDIA driver");
  EXPECT_EQ(tessera::device_count("cuda"), 0);
}

TEST(CudaPlugin, ZeroDevicesAreListedNowhereAndPropertiesSayWhy) {
  int32_t n = -1;
  const std::string reason = cuda_reason(&n);
  if (n > 0) GTEST_SKIP() << "this machine has " << n << " CUDA devices";
  for (const auto& d : tessera::devices()) EXPECT_NE(d.device.type(), tessera::DeviceType::CUDA) << d.name;
  const tessera::BackendDevice& b = tessera::backend_device(tessera::DeviceType::CUDA);
  ASSERT_NE(b.iface->device_properties, nullptr);
  char buf[1024];
  const size_t need = b.iface->device_properties(b.self, 0, buf, sizeof(buf));
  const std::string json(buf);
  EXPECT_EQ(need, json.size());
  EXPECT_NE(json.find("\"available\": false"), std::string::npos) << json;
  EXPECT_NE(json.find(reason), std::string::npos) << json;
}

TEST(CudaPlugin, DeviceCallsFailWithTheReasonWhenThereIsNoDevice) {
  int32_t n = -1;
  const std::string reason = cuda_reason(&n);
  if (n > 0) GTEST_SKIP() << "this machine has " << n << " CUDA devices";
  const tessera::BackendDevice& b = tessera::backend_device(tessera::DeviceType::CUDA);
  void* handle = reinterpret_cast<void*>(0x1);
  tessera_status_t st = b.iface->memory_allocate(b.self, 0, 256, &handle);
  ASSERT_NE(st, nullptr);
  void* stream = nullptr;
  tessera_status_t st2 = b.iface->stream_create(b.self, 0, &stream);
  ASSERT_NE(st2, nullptr);
  tessera_status_t st3 = b.iface->device_synchronize(b.self, 0);
  ASSERT_NE(st3, nullptr);
  // Freeing NULL and destroying NULL handles are harmless without a device.
  b.iface->memory_free(b.self, 0, nullptr);
  b.iface->stream_destroy(b.self, 0, nullptr);
  EXPECT_THROW(tessera::empty({4}, tessera::TensorOptions(tessera::Device("cuda:0"))), tessera::Error);
  try {
    tessera::empty({4}, tessera::TensorOptions(tessera::Device("cuda:0")));
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
  (void)st;
  (void)st2;
  (void)st3;
}

TEST(CudaPlugin, RegistersKernelsWithTheirDtypes) {
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(tessera::DeviceType::CUDA, &why)) << why;
  auto& d = tessera::Dispatcher::instance();
  auto resolution = [&](const char* op, tessera::DType t) {
    return d.resolution(d.op(op), tessera::DeviceType::CUDA, t);
  };
  for (const char* op : {"add.Tensor", "sub.Tensor", "mul.Tensor", "maximum", "eq.Tensor", "neg", "relu", "fill_", "copy_",
                         "where.self", "cat", "stack", "index_select", "embedding", "arange"}) {
    for (tessera::DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64, tessera::kInt32,
                             tessera::kInt64})
      EXPECT_EQ(resolution(op, t), tessera::Resolution::Kernel) << op << " " << t;
  }
  for (const char* op : {"where.self", "cat", "stack", "index_select", "embedding", "fill_", "copy_", "logical_and",
                         "logical_or", "logical_xor", "logical_not", "isnan"})
    EXPECT_EQ(resolution(op, tessera::kBool), tessera::Resolution::Kernel) << op << " bool";
  // Floating ops take float64 too (computed in double), reductions, norms and matmul included.
  for (const char* op : {"div.Tensor", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "gelu", "silu", "erf",
                         "sum", "mean", "amax", "amin", "prod", "var", "argmax", "argmin", "softmax", "log_softmax",
                         "layer_norm", "rms_norm", "matmul", "linear", "pow.Tensor_Tensor", "pow.Tensor_Scalar", "clamp"}) {
    for (tessera::DType t : {tessera::kFloat32, tessera::kFloat16, tessera::kBFloat16, tessera::kFloat64})
      EXPECT_EQ(resolution(op, t), tessera::Resolution::Kernel) << op << " " << t;
  }
  // Integer reductions, pow and clamp; sums, products and maxima of bool too.
  for (const char* op : {"sum", "prod", "amax", "amin", "argmax", "argmin", "pow.Tensor_Tensor", "pow.Tensor_Scalar", "clamp"}) {
    for (tessera::DType t : {tessera::kUInt8, tessera::kInt8, tessera::kInt16, tessera::kInt32, tessera::kInt64})
      EXPECT_EQ(resolution(op, t), tessera::Resolution::Kernel) << op << " " << t;
  }
  for (const char* op : {"sum", "prod", "amax", "amin"})
    EXPECT_EQ(resolution(op, tessera::kBool), tessera::Resolution::Kernel) << op << " bool";
  for (const char* op : {"softmax", "layer_norm", "linear"})
    EXPECT_NE(resolution(op, tessera::kInt32), tessera::Resolution::Kernel) << op << " has no integer kernel on cuda";
  // Integer matmul (Note [Integer nn ops]), the new kernels of the conformance cases.
  for (tessera::DType t :
       {tessera::kUInt8, tessera::kInt8, tessera::kInt16, tessera::kInt32, tessera::kInt64})
    EXPECT_EQ(resolution("matmul", t), tessera::Resolution::Kernel) << "matmul " << t;
  for (const char* op : {"topk", "_resize", "conv_transpose2d.input", "_linear_epilogue", "_conv2d_epilogue"})
    EXPECT_EQ(resolution(op, tessera::kFloat16), tessera::Resolution::Kernel) << op;
  EXPECT_EQ(resolution("fake_quantize_per_tensor_affine", tessera::kFloat32), tessera::Resolution::Kernel);
  EXPECT_EQ(resolution("fake_quantize_per_channel_affine", tessera::kFloat32), tessera::Resolution::Kernel);
  EXPECT_EQ(resolution("_resize", tessera::kBool), tessera::Resolution::Kernel);
  EXPECT_EQ(resolution("topk", tessera::kInt8), tessera::Resolution::Kernel);
  EXPECT_EQ(resolution("gather", tessera::kFloat64), tessera::Resolution::Kernel);
  for (tessera::DType t : {tessera::kBool, tessera::kInt8, tessera::kFloat16, tessera::kFloat64})
    EXPECT_EQ(resolution("scatter.src", t), tessera::Resolution::Kernel) << t;
  for (tessera::DType t : {tessera::kInt8, tessera::kInt64, tessera::kFloat16, tessera::kFloat32, tessera::kFloat64})
    EXPECT_EQ(resolution("scatter_reduce.two", t), tessera::Resolution::Kernel) << t;
  for (tessera::DType t : {tessera::kFloat16, tessera::kBFloat16, tessera::kFloat32, tessera::kFloat64})
    EXPECT_EQ(resolution("scaled_dot_product_attention", t), tessera::Resolution::Kernel) << t;
  for (tessera::DType t : {tessera::kFloat16, tessera::kBFloat16, tessera::kFloat32, tessera::kFloat64})
    EXPECT_EQ(resolution("conv2d", t), tessera::Resolution::Kernel) << "conv2d on cuDNN " << t;
  for (tessera::DType t : {tessera::kFloat16, tessera::kBFloat16, tessera::kFloat32, tessera::kFloat64, tessera::kInt64}) {
    EXPECT_EQ(resolution("max_pool2d", t), tessera::Resolution::Kernel) << t;
    EXPECT_EQ(resolution("avg_pool2d", t), tessera::Resolution::Kernel) << t;
  }
  EXPECT_EQ(resolution("max_pool2d", tessera::kUInt8), tessera::Resolution::Kernel);
  for (const char* op : {"tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log1p", "expm1",
                         "reciprocal", "softsign", "mish", "hardsigmoid", "hardswish", "leaky_relu", "elu", "selu", "celu",
                         "softplus", "floor", "ceil", "trunc", "round", "sign", "hardtanh"})
    for (tessera::DType t : {tessera::kFloat16, tessera::kBFloat16, tessera::kFloat32, tessera::kFloat64})
      EXPECT_EQ(resolution(op, t), tessera::Resolution::Kernel) << op << " " << t;
  for (const char* op : {"remainder.Tensor", "fmod.Tensor", "floor_divide", "atan2", "prelu", "_prelu_kernel"})
    EXPECT_EQ(resolution(op, tessera::kFloat32), tessera::Resolution::Kernel) << op;
  for (const char* op : {"bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor", "bitwise_left_shift.Tensor",
                         "bitwise_right_shift.Tensor"})
    EXPECT_EQ(resolution(op, tessera::kInt16), tessera::Resolution::Kernel) << op;
  for (const char* op : {"remainder.Tensor", "fmod.Tensor", "floor_divide"})
    for (tessera::DType t : {tessera::kInt64, tessera::kInt8, tessera::kUInt8})
      EXPECT_EQ(resolution(op, t), tessera::Resolution::Kernel) << op << " " << t;
  for (const char* op : {"logsumexp", "linalg_vector_norm", "isinf", "expand_copy", "slice_copy.Tensor", "repeat", "tril", "triu",
                         "flip", "cumsum", "batch_norm", "group_norm", "pad"})
    for (tessera::DType t : {tessera::kFloat16, tessera::kFloat32, tessera::kFloat64})
      EXPECT_EQ(resolution(op, t), tessera::Resolution::Kernel) << op << " " << t;
  for (const char* op :
       {"add.Tensor", "mul.Tensor", "maximum", "minimum", "bitwise_and.Tensor", "bitwise_or.Tensor",
        "bitwise_xor.Tensor", "eq.Tensor", "lt.Tensor", "bitwise_not", "sign"})
    EXPECT_EQ(resolution(op, tessera::kBool), tessera::Resolution::Kernel) << op << " bool";
  EXPECT_NE(resolution("sub.Tensor", tessera::kBool), tessera::Resolution::Kernel)
      << "bool sub (PyTorch refuses it)";
  for (const char* op : {"tril", "repeat", "slice_copy.Tensor", "flip", "pad"})
    EXPECT_EQ(resolution(op, tessera::kBool), tessera::Resolution::Kernel) << op << " bool";
  EXPECT_EQ(resolution("pad", tessera::kInt32), tessera::Resolution::Kernel) << "pad int32";
  for (const char* op : {"floor", "round", "sign", "hardtanh"})
    EXPECT_EQ(resolution(op, tessera::kInt32), tessera::Resolution::Kernel) << op << " int32";
  for (const char* op : {"uniform_", "normal_"})
    for (tessera::DType t : {tessera::kFloat16, tessera::kBFloat16, tessera::kFloat32, tessera::kFloat64})
      EXPECT_EQ(resolution(op, t), tessera::Resolution::Kernel) << op << " " << t;
  EXPECT_NE(resolution("avg_pool2d", tessera::kInt32), tessera::Resolution::Kernel) << "the CPU reports int32 avg_pool2d";
}

TEST(CudaPlugin, ExportsAllocatorEntryPointsThatAnswerWithoutADevice) {
  void* lib = dlopen(TESSERA_CUDA_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto stats = reinterpret_cast<tessera_cuda_memory_stats_fn_t>(dlsym(lib, TESSERA_CUDA_MEMORY_STATS_NAME));
  ASSERT_NE(stats, nullptr);
  // Releasing the cache is the typed extension, not an ad-hoc symbol.
  EXPECT_EQ(dlsym(lib, "tessera_cuda_empty_cache"), nullptr);
  std::string why;
  ASSERT_TRUE(tessera::ensure_backend_loaded(tessera::DeviceType::CUDA, &why)) << why;
  auto empty_cache = tessera::plugin_extension<tessera_ext_empty_cache_fn_t>("cuda", TESSERA_EXT_EMPTY_CACHE);
  ASSERT_NE(empty_cache, nullptr);
  int32_t n = -1;
  cuda_reason(&n);
  tessera_cuda_memory_stats_t s{};
  s.struct_size = sizeof(s);
  if (n == 0) {
    EXPECT_EQ(stats(0, &s), -1);
    EXPECT_EQ(empty_cache(nullptr, -1), 0u);  // nothing to release, must not crash
  } else {
    EXPECT_EQ(stats(0, &s), 0);
    EXPECT_GE(s.reserved_bytes, s.allocated_bytes);
  }
  EXPECT_EQ(stats(1 << 20, &s), -1);
  dlclose(lib);
}

TEST(CublasLtLoader, FindsTheToolkitLibraryAtRunTime) {
  const tessera::cuda::CublasLtApi& api = tessera::cuda::cublaslt_api();
  void* probe = dlopen(TESSERA_CUDA_TOOLKIT_LIBDIR "/libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
  if (!probe && !api.loaded) GTEST_SKIP() << "no cuBLASLt on this machine: " << api.error;
  if (probe) dlclose(probe);
  ASSERT_TRUE(api.loaded) << api.error;
  EXPECT_FALSE(api.path.empty());
  EXPECT_GE(api.version, size_t(CUDART_VERSION / 1000) * 10000) << "cuBLASLt older than the CUDA runtime";
  EXPECT_NE(api.matmul, nullptr);
  EXPECT_NE(api.algo_get_heuristic, nullptr);
}

// Note [Loading cuDNN]: the toolkit's cuDNN 9 on this machine (no GPU needed: cudnnGetVersion
// runs without one); a missing file and a library that is not cuDNN give reasons that say what to do.
TEST(CudnnLoader, FindsCudnn9AndExplainsWhatIsMissing) {
  const tessera::cuda::CudnnApi& api = tessera::cuda::cudnn_api();
  void* probe = dlopen(TESSERA_CUDA_TOOLKIT_LIBDIR "/libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!probe && !api.loaded) GTEST_SKIP() << "no cuDNN on this machine: " << api.error;
  if (probe) dlclose(probe);
  ASSERT_TRUE(api.loaded) << api.error;
  EXPECT_GE(api.version, size_t(90000));
  EXPECT_NE(api.convolution_forward, nullptr);
  EXPECT_NE(api.get_forward_algorithm, nullptr);
  EXPECT_NE(api.get_backward_data_algorithm, nullptr);
  EXPECT_NE(api.convolution_backward_data, nullptr);
  EXPECT_NE(api.convolution_bias_activation_forward, nullptr);
  EXPECT_NE(api.set_activation, nullptr);
  const auto missing = tessera::cuda::load_cudnn_from({"/nonexistent/libcudnn.so.9"});
  EXPECT_FALSE(missing.loaded);
  EXPECT_NE(missing.error.find("/nonexistent/libcudnn.so.9"), std::string::npos) << missing.error;
  EXPECT_NE(missing.error.find("TESSERA_CUDA_CUDNN"), std::string::npos) << missing.error;
  const auto wrong = tessera::cuda::load_cudnn_from({"libm.so.6"});
  EXPECT_FALSE(wrong.loaded);
  EXPECT_NE(wrong.error.find("not a usable cuDNN"), std::string::npos) << wrong.error;
  EXPECT_NE(wrong.error.find("cudnnGetVersion"), std::string::npos) << wrong.error;
}

}  // namespace
