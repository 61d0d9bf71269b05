// The dispatcher's side of the Sparse key (tessera/sparse.h).
#pragma once

#include <optional>
#include <string>

#include "tessera/dispatcher.h"

namespace tessera::detail {

// Tensor::to(device) of a semi-structured tensor (Note [Semi-structured tensors on a device]): to the
// CPU the canonical form; to a device whose kernels plugin offers
// TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT a semi-structured tensor there. nullopt where no
// plugin does (the caller then moves the dense weight, as for any tensor). Throws what the plugin
// refused (an UNIMPLEMENTED answer also gives nullopt).
std::optional<Tensor> sparse_to_device(const Tensor& t, Device device);

// Note [Sparse densify fallback]
// Reached when a call carries the Sparse key and no kernel under it took the call (no sparse
// kernel for the op, the sparse plugin is not loaded or disabled, or its kernel answered
// UNIMPLEMENTED because the size is one where dense wins). Replaces every semi-structured tensor of
// `args` by its dense form (cached on the tensor) and calls the op again. For linear and matmul
// this is the documented dense path and says so under TESSERA_LOG=sparse; for any other op it
// warns once per op, or throws with TESSERA_SPARSE_STRICT=1.
Stack sparse_densify_and_call(OperatorEntry& op, const std::string& op_name, Stack args, const std::string& why);

}  // namespace tessera::detail
