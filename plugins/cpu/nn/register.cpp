#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string>
#include <utility>

#include "onednn.h"

#include "nn_common.h"
#include "nn_kernels.h"
#include "nn_ops.h"
#include "quantized.h"
#include "tessera/op_names.h"

namespace tessera::cpu {

namespace {
// A refused registration throws and fails the plugin's init (Note [Op contract]).
void add(const sdk::Host& host, const char* name, tessera_kernel_fn_t fn, uint64_t dtypes = TESSERA_DTYPE_MASK_FLOATING) {
  host.register_kernel(name, dtypes, fn);
}
}  // namespace

void register_nn_kernels(const sdk::Host& host) {
  const char* forced = host.getenv("TESSERA_SDPA");
  const std::string path = forced ? forced : "";
  if (!path.empty() && path != "math" && path != "flash") {
    sdk::log(TESSERA_LOG_WARNING, "cpu",
             "TESSERA_SDPA='" + path + "' is not a known attention path; expected 'math' or 'flash'; using flash");
    nn::set_sdpa_forced_path("");
  } else {
    nn::set_sdpa_forced_path(path.c_str());
    if (!path.empty()) sdk::log(TESSERA_LOG_INFO, "cpu", "scaled_dot_product_attention forced to the " + path + " path (TESSERA_SDPA)");
  }
  sdk::log(TESSERA_LOG_INFO, "cpu", std::string("nn kernels at ISA level ") + nn::nn_isa().name);
  if (const char* mb = host.getenv("TESSERA_CPU_WEIGHT_CACHE_MB"); mb && *mb) {
    char* end = nullptr;
    const long long v = std::strtoll(mb, &end, 10);
    if (*end != '\0' || v < 0 || v > (int64_t(1) << 30))
      sdk::log(TESSERA_LOG_WARNING, "cpu",
               std::string("TESSERA_CPU_WEIGHT_CACHE_MB='") + mb +
                   "' is not a number of MiB (0 to 2^30); keeping the default of 1024");
    else
      nn::set_weight_cache_limit_mb(v);
  }
  if (const char* algo = host.getenv("TESSERA_CPU_CONV_ALGO"); algo && *algo) {
    const std::string a = algo;
    static constexpr std::pair<const char*, nn::ConvAlgo> kAlgos[] = {
        {"auto", nn::ConvAlgo::Auto}, {"direct", nn::ConvAlgo::Direct}, {"winograd", nn::ConvAlgo::Winograd}};
    const auto* found = std::find_if(std::begin(kAlgos), std::end(kAlgos), [&](const auto& e) { return a == e.first; });
    if (found == std::end(kAlgos)) {
      sdk::log(TESSERA_LOG_WARNING, "cpu",
               "TESSERA_CPU_CONV_ALGO='" + a + "' is not a conv2d algorithm; expected 'auto', 'direct' or 'winograd'; using auto");
    } else {
      nn::set_conv_algo(found->second);
      if (found->second != nn::ConvAlgo::Auto)
        sdk::log(TESSERA_LOG_INFO, "cpu", "f32 3x3 conv2d algorithm forced to " + a + " (TESSERA_CPU_CONV_ALGO)");
    }
  }

  // Integer and bool inputs too: the kernels compute integers exactly and refuse bool with the
  // list of supported dtypes (Note [Integer nn ops] in onednn_ops.cpp).
  add(host, op::matmul::name, TESSERA_SDK_KERNEL(nn::matmul_kernel), TESSERA_DTYPE_MASK_ALL);
  add(host, op::linear::name, TESSERA_SDK_KERNEL(nn::linear_kernel), TESSERA_DTYPE_MASK_ALL);
  add(host, op::conv2d::name, TESSERA_SDK_KERNEL(nn::conv2d_kernel), TESSERA_DTYPE_MASK_ALL);
  add(host, op::softmax::name, TESSERA_SDK_KERNEL(nn::softmax_kernel));
  add(host, op::log_softmax::name, TESSERA_SDK_KERNEL(nn::log_softmax_kernel));
  add(host, op::layer_norm::name, TESSERA_SDK_KERNEL(nn::layer_norm_op));
  add(host, op::rms_norm::name, TESSERA_SDK_KERNEL(nn::rms_norm_op));
  add(host, op::max_pool2d::name, TESSERA_SDK_KERNEL(nn::max_pool2d_kernel), TESSERA_DTYPE_MASK_ALL);
  add(host, op::avg_pool2d::name, TESSERA_SDK_KERNEL(nn::avg_pool2d_kernel), TESSERA_DTYPE_MASK_ALL);
  add(host, op::scaled_dot_product_attention::name, TESSERA_SDK_KERNEL(nn::sdpa_kernel));
  // The unfused path as an op of its own, with the shape rule of scaled_dot_product_attention.
  host.define_op(
      "_sdpa_math(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, bool is_causal=False, "
      "float? scale=None) -> Tensor",
      op::scaled_dot_product_attention::name);
  add(host, "_sdpa_math", TESSERA_SDK_KERNEL(nn::sdpa_math_kernel));
  // linear with its activation and residual add, and conv2d with its activation, as oneDNN post-ops
  // for generated code (Note [Linear epilogues] in onednn_ops.cpp), with the shape rules of linear
  // and conv2d.
  host.define_op(
      "_linear_epilogue(Tensor input, Tensor weight, Tensor? bias=None, Tensor? residual=None, "
      "str activation=\"none\") -> Tensor",
      op::linear::name);
  add(host, "_linear_epilogue", TESSERA_SDK_KERNEL(nn::linear_epilogue_kernel),
      TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_BFLOAT16));
  host.define_op(
      "_conv2d_epilogue(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, "
      "int[2] dilation=1, int groups=1, str activation=\"none\") -> Tensor",
      op::conv2d::name);
  add(host, "_conv2d_epilogue", TESSERA_SDK_KERNEL(nn::conv2d_epilogue_kernel),
      TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_BFLOAT16));
  register_quantized_kernels(host);
}

}  // namespace tessera::cpu
