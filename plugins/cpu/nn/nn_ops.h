// The nn kernels of the CPU plugin, as `void(const KernelCall&)` (adapted to the C ABI by
// TESSERA_SDK_KERNEL in register_nn_kernels). Inputs, outputs and attributes follow the op schemas
// of dispatcher/src/op_catalogue.cpp; see each file for the argument order it reads.
#pragma once
#include "tessera/sdk.hpp"

namespace tessera::cpu::nn {

using sdk::KernelCall;

// normalization.cpp
void softmax_kernel(const KernelCall& call);      // (self, dim)
void log_softmax_kernel(const KernelCall& call);  // (self, dim)
void layer_norm_op(const KernelCall& call);       // (input, normalized_shape, weight?, bias?, eps)
void rms_norm_op(const KernelCall& call);         // (input, normalized_shape, weight?, eps?)
// pooling.cpp
void max_pool2d_kernel(const KernelCall& call);   // (self, kernel_size, stride, padding, dilation)
void avg_pool2d_kernel(const KernelCall& call);   // (self, kernel_size, stride, padding)
// onednn_ops.cpp
void matmul_kernel(const KernelCall& call);       // (self, other)
void linear_kernel(const KernelCall& call);       // (input, weight, bias?)
void linear_epilogue_kernel(const KernelCall& call);  // (input, weight, bias?, residual?; activation)
void conv2d_kernel(const KernelCall& call);       // (input, weight, bias?, stride, padding, dilation, groups)
void conv2d_epilogue_kernel(const KernelCall& call);  // (conv2d's arguments; activation)
// attention.cpp
void sdpa_kernel(const KernelCall& call);         // (query, key, value, attn_mask?, is_causal, scale?)
void sdpa_flash_kernel(const KernelCall& call);
void sdpa_math_kernel(const KernelCall& call);

}  // namespace tessera::cpu::nn
