// oneDNN (v2 API) inside the CPU plugin: the engine, a thread-safe primitive cache and a strided
// matmul entry point shared by matmul, linear and the math path of attention.
#pragma once
#include <cstdint>

#include <dnnl.hpp>

namespace tessera::cpu::nn {

dnnl::engine& cpu_engine();

// One operand of a (batched) matmul: `nd` dims (batch..., rows, cols), strides in elements.
// Batch dims of size 1 broadcast against the other operand (oneDNN's broadcast rule).
struct MatOperand {
  int nd = 0;
  int64_t dims[12] = {};
  int64_t strides[12] = {};
  void* ptr = nullptr;
  dnnl::memory::data_type dt = dnnl::memory::data_type::f32;
};

// c = scale * (a @ b) (+ bias, a [1, N] operand). Primitives are cached by shape, strides, dtypes
// and scale (Note [Primitive cache] in onednn_ops.cpp). Thread-safe.
void onednn_matmul(const MatOperand& a, const MatOperand& b, const MatOperand& c, const MatOperand* bias,
                   float scale = 1.f);

// Number of primitives in the cache (for tests and logs).
int64_t onednn_cache_size();

}  // namespace tessera::cpu::nn
