// Scaled dot-product attention on cuDNN's fused flash attention. Note [SDPA on cuDNN]
// float16 / bfloat16 SDPA first tries cuDNN 9's fused attention through the header-only
// cudnn-frontend (pip's nvidia-cudnn-frontend, found when the plugin is configured) with its
// dynamic loading: the frontend calls cuDNN through the library handle the plugin's loader opened
// (Note [Loading cuDNN]), so nothing links cuDNN. What it takes (cudnn_sdpa_refusal): head dims up
// to 256 and multiples of 8, unit last strides and 16-byte aligned other strides and pointers,
// batch and head dims that do not broadcast (or are 1), top-left causal masking (PyTorch's
// is_causal), and an additive mask of the inputs' dtype shaped [b or 1, h or 1, Lq, Lk] (the
// CUDA plugin turns a boolean or float32 mask into one first). One graph per problem (shapes,
// strides, flags, device) is built once and kept (64 at most, least recently used out); the
// workspace comes from the stream-ordered allocator. Whatever cuDNN refuses or fails at, before
// anything is queued, runs on the plugin's own kernels (Note [CUDA flash attention], Note [CUDA
// attention, a warp per query row]) with the reason logged once; the device properties report
// "cudnn_attention". TESSERA_CUDA_CUDNN_ATTENTION=0 turns the path off (benchmarks compare both).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace tessera::cuda {

struct SdpaProblem {
  int32_t dtype = 0;  // tessera_dtype_t: float16 or bfloat16
  int64_t batch = 0, heads = 0, len_q = 0, len_k = 0, head_dim = 0, value_dim = 0;
  // Element strides of the [batch, heads, seq, dim] views.
  int64_t q_strides[4] = {}, k_strides[4] = {}, v_strides[4] = {}, o_strides[4] = {};
  bool causal = false;
  double scale = 1;
  bool has_bias = false;  // an additive mask of `dtype`
  int64_t bias_sizes[4] = {}, bias_strides[4] = {};
};

// Why cuDNN's attention is not tried for `p` with these pointers (each may be null), or empty.
std::string cudnn_sdpa_refusal(const SdpaProblem& p, const void* q, const void* k, const void* v,
                               const void* bias, const void* o);

// Whether the plugin was built with cudnn-frontend.
bool cudnn_attention_built();

// The frontend's validation of the graph for `p` (no GPU needed): empty when it accepts it.
std::string validate_cudnn_sdpa(const SdpaProblem& p);

// Runs `p` on `stream` of the current device `device` with `handle` (a cudnnHandle_t of that
// device, its stream set by the caller). Empty on success; otherwise why, and nothing was queued.
std::string run_cudnn_sdpa(void* handle, int device, cudaStream_t stream, const SdpaProblem& p, const void* q,
                           const void* k, const void* v, const void* bias, void* o);

// How many SDPA calls cuDNN ran (tests prove the path ran).
uint64_t cudnn_sdpa_calls();

}  // namespace tessera::cuda
