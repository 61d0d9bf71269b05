// Int8 kernels of the CPU plugin on oneDNN (quantized_linear.cpp): the ops _quantized_linear_prepack
// and _quantized_linear of the op contract (docs/quantization.md).
#pragma once
#include "tessera/sdk.hpp"

namespace tessera::cpu {

// Registers the int8 kernels on the CPU backend. Called once from register_nn_kernels; a refused
// registration throws sdk::Error (plugin init fails).
void register_quantized_kernels(const tessera::sdk::Host& host);

}  // namespace tessera::cpu
