// Host side of the OpenCL kernels: argument marshalling, launch, and registration with the runtime.
#pragma once
#include "tessera/sdk.hpp"

namespace tessera::opencl {

// Registers every kernel of the backend. An operator the runtime does not define is skipped with a
// message under TESSERA_LOG=opencl (so the plugin keeps loading against an older catalogue).
void register_kernels(const sdk::Host& host);

}  // namespace tessera::opencl
