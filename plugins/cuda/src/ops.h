// The plugin's kernels as the dispatcher calls them (see tessera_kernel_call_t): each reads its
// tensors and attributes from the call, plans the launch and enqueues on the call's stream. A case
// a kernel does not handle (dtype, layout, size) throws sdk::Error(UNIMPLEMENTED) so that the
// runtime takes the CPU fallback for that call.
#pragma once
#include "tessera/sdk.hpp"

namespace tessera::cuda {

// Registers every kernel with the dtypes it supports. An op the runtime's catalogue lacks is
// skipped with a warning under TESSERA_LOG=plugins; any other refusal fails plugin init.
void register_kernels(const sdk::Host& host);

// Kernels and cuBLASLt matmuls queued by the ops so far (exported as tessera_cuda_kernel_launches).
uint64_t g_kernel_launches_total();
// Poolings cuDNN ran (Note [Pooling on cuDNN]; the device properties' "cudnn_poolings").
uint64_t cudnn_poolings_total();
// batch_norms cuDNN ran (Note [batch_norm on cuDNN]; "cudnn_batch_norms").
uint64_t cudnn_batch_norms_total();

}  // namespace tessera::cuda
