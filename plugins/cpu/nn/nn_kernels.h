// The nn kernels of the CPU plugin (matmul, linear, conv2d, softmax, log_softmax, layer_norm,
// rms_norm, max_pool2d, avg_pool2d, scaled_dot_product_attention) and the plugin-defined op
// _sdpa_math (the unfused attention path, for tests and benchmarks).
#pragma once
#include "tessera/sdk.hpp"

namespace tessera::cpu {

// Registers every nn kernel on the CPU backend and defines _sdpa_math. Called once from the
// plugin entry. Reads TESSERA_SDPA (math|flash) to force the attention path. An op the runtime's
// catalogue lacks is skipped with a log line under TESSERA_LOG=cpu; any other refusal throws
// sdk::Error (plugin init fails).
void register_nn_kernels(const tessera::sdk::Host& host);

}  // namespace tessera::cpu
