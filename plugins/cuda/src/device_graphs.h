// TESSERA_EXT_DEVICE_GRAPHS of the CUDA plugin: CUDA Graphs (Note [Device graphs] in plugin_abi.h).
#pragma once

#include "tessera/plugin_abi.h"

namespace tessera::cuda {

const tessera_device_graphs_t* device_graphs();

}  // namespace tessera::cuda
