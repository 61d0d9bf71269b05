// Which nodes of a graph the CUDA compiler plugin takes, and a partition of them as a FusedProgram
// (Note [Fused CUDA kernels], Note [Fused row reductions] in fused_program.h). Reads graphs through
// the SDK's GraphView, so it runs inside the plugin (the host's graph API); no CUDA.
#pragma once

#include <cstdint>
#include <vector>

#include <tessera/sdk.hpp>

#include "fused_program.h"

namespace tessera::cuda_fuser {

// get_capability's answer for the nodes of `g` on a cuda device: a group id per node, -1 for the
// nodes left to the dispatcher. Consecutive nodes share a group while they fit one kernel: one
// float dtype; elementwise ops over one domain S; last-dim reductions of S (sum, mean, amax, amin,
// and softmax, log_softmax, layer_norm, rms_norm whole) and steps on their row values; at most
// kMaxGroupNodes nodes and kMaxInputs values read from outside. A group that is one reduction or
// one softmax / norm alone is left to the dispatcher's kernel: fusing it saves nothing.
inline constexpr int32_t kMaxGroupNodes = kMaxOutputs;
std::vector<int32_t> plan_groups(const sdk::GraphView& g);

// A partition (every call node of `g` in one group of plan_groups) as a program: inputs in
// signature order, the outputs in the graph's order. Throws sdk::Error (UNIMPLEMENTED) naming the
// node it cannot take.
FusedProgram lower(const sdk::GraphView& g);

}  // namespace tessera::cuda_fuser
