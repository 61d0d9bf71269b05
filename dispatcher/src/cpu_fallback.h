// The CPU fallback of the call path (cpu_fallback.cpp; resolve() in call_path.cpp calls it when a
// device has no kernel for an op and the CPU has one).
#pragma once
#include "op_registry.h"

namespace tessera::detail {

// Runs `op` on the CPU: copies the frame's tensors to the CPU, calls the CPU kernel and copies the
// outputs back to `dev` (an output that aliases an input is copied into that input). Counts the
// call for fallback_report() and warns once per op and device type. Returns the number of outputs.
int cpu_fallback(OperatorEntry& op, const CallFrame& f, Device dev, DType dtype, Tensor* outs,
                 bool answered_unimplemented);

}  // namespace tessera::detail
