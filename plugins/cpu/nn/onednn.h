// oneDNN (v2 API) inside the CPU plugin: the engine, a thread-safe primitive cache and a strided
// matmul entry point shared by matmul, linear and the math path of attention.
#pragma once
#include <cstdint>

#include <dnnl.hpp>

#include "tessera/plugin_abi.h"

namespace tessera::cpu::nn {

dnnl::engine& cpu_engine();

// Note [bf16 without oneDNN support]: oneDNN 2.6 builds bf16 matmul and convolution primitives only
// on CPUs with AVX-512 (avx512_core and up); on an AVX2-only CPU (or under ONEDNN_MAX_CPU_ISA=AVX2)
// it refuses them. Probed once with a tiny bf16 matmul; when false, the bf16 kernels of matmul,
// linear, conv2d and attention run through f32 (run_via_f32: inputs widened exactly, the f32
// result rounded to bf16 once), which is at least as accurate as the native path.
bool onednn_has_bf16();
// `dt` is bf16 and oneDNN has no bf16 kernels here: the kernel runs through f32.
inline bool bf16_via_f32(int32_t dt) { return dt == TESSERA_DTYPE_BFLOAT16 && !onednn_has_bf16(); }

// One operand of a (batched) matmul: `nd` dims (batch..., rows, cols), strides in elements.
// Batch dims of size 1 broadcast against the other operand (oneDNN's broadcast rule).
struct MatOperand {
  int nd = 0;
  int64_t dims[12] = {};
  int64_t strides[12] = {};
  void* ptr = nullptr;
  dnnl::memory::data_type dt = dnnl::memory::data_type::f32;
  // The storage version of the tensor behind `ptr` (tessera_tensor_t::version), 0 when unknown or
  // a temporary. A weight operand with a version may be prepacked (Note [Weight cache]).
  uint64_t version = 0;
};

// What runs on a product inside the oneDNN primitive, after the bias (post-ops, Note [Linear
// epilogues] in onednn_ops.cpp): an activation, then the addition of `residual`, an operand with
// c's dims (its own strides).
struct MatEpilogue {
  enum class Activation : uint8_t { None, Relu, GeluErf, GeluTanh };
  Activation activation = Activation::None;
  const MatOperand* residual = nullptr;
};

// c = epilogue(scale * (a @ b) (+ bias, a [1, N] operand)). Primitives are cached by shape,
// strides, dtypes, scale and epilogue (Note [Primitive cache] in onednn_ops.cpp). Thread-safe.
void onednn_matmul(const MatOperand& a, const MatOperand& b, const MatOperand& c, const MatOperand* bias,
                   float scale = 1.f, const MatEpilogue* epilogue = nullptr);

// Number of primitives in the cache (for tests and logs).
int64_t onednn_cache_size();

// The weight cache (Note [Weight cache] in onednn_ops.cpp): bytes of prepacked weights held,
// the number of packs made so far, and a drop of every entry (returns the bytes released).
struct WeightCacheStats {
  uint64_t bytes = 0;
  uint64_t entries = 0;
  uint64_t packs = 0;
  uint64_t hits = 0;
};
WeightCacheStats weight_cache_stats();
uint64_t weight_cache_clear();
// The cache's bound (TESSERA_CPU_WEIGHT_CACHE_MB, read at plugin init); 0 turns packing off.
void set_weight_cache_limit_mb(int64_t mb);

// How f32 3x3 convolutions are computed (TESSERA_CPU_CONV_ALGO, read at plugin init; Note
// [Winograd convolution] in onednn_ops.cpp): Auto takes Winograd where it pays, Direct never,
// Winograd wherever oneDNN has it.
enum class ConvAlgo { Auto, Direct, Winograd };
void set_conv_algo(ConvAlgo algo);
ConvAlgo conv_algo();

// The storage version of a kernel argument (0 when the runtime is older than ABI 1.2).
uint64_t tensor_version(const tessera_tensor_t* t);

}  // namespace tessera::cpu::nn
