// Helpers shared by the nn kernels of the CPU plugin: errors, row loads/stores through f32,
// contiguous copies, and running a kernel through f32 for the dtypes without a native path.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "../src/common.h"
#include "../src/parallel.h"
#include "nn_isa.h"
#include "tessera/op_names.h"

namespace tessera::cpu::nn {

[[noreturn]] inline void fail(const std::string& msg) {
  throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, msg);
}
[[noreturn]] inline void fail_unimplemented(const std::string& msg) {
  throw sdk::Error(TESSERA_STATUS_UNIMPLEMENTED, msg);
}

// "[2, 3, 4]"
std::string shape_str(const tessera_tensor_t* t);
inline std::string shape_str(const TensorView& t) { return shape_str(t.raw()); }

// A 64-byte aligned, uninitialised buffer of `n` elements of T, freed on scope exit.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(int64_t n) { reset(n); }
  void reset(int64_t n) {
    const size_t bytes = ((size_t(n > 0 ? n : 1) * sizeof(T)) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    ptr_.reset(static_cast<T*>(p));
  }
  T* get() const { return ptr_.get(); }
  T& operator[](int64_t i) const { return ptr_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> ptr_;
};

// n elements starting at `p` (byte address of the first element), `stride` elements apart, of
// floating `dtype`, converted to / from contiguous f32.
void load_f32(const void* p, int32_t dtype, int64_t n, int64_t stride, float* dst);
void store_f32(const float* src, void* p, int32_t dtype, int64_t n, int64_t stride);

// `t` itself when contiguous, else a contiguous copy kept alive in `holder`.
const tessera_tensor_t* contiguous(const tessera_tensor_t* t, TempList& holder);

// 4-D and dense in channels-last order (N, C, H, W) with strides (H W C, 1, W C, C), size-1 dims
// skipped (docs/semantics.md, "Memory formats"). A row-major tensor may be both (C == 1).
bool channels_last_dense(const tessera_tensor_t* t);
// Non-empty, channels-last dense and not also row-major: a tensor only a channels-last path reads
// as it lies (Note [Channels-last convolution] in onednn_ops.cpp, [Channels-last pooling]).
bool channels_last_only(const tessera_tensor_t* t);

// Runs `fn` with every floating input cast to f32 and f32 temporaries for the outputs, then casts
// the outputs back: the path of f16 (and of any dtype a kernel computes only in f32).
void run_via_f32(const KernelCall& call, void (*fn)(const KernelCall&));

// Reads an int[] attribute of `n` entries; a single value is repeated (PyTorch's int[2] rule);
// an empty list gives `fallback` (may be null: then an empty list is an error).
void attr_pair(const KernelCall& call, int index, const char* name, int64_t out[2], const int64_t* fallback);

// TESSERA_SDPA=math|flash, read once at registration ("" when unset).
const std::string& sdpa_forced_path();
void set_sdpa_forced_path(const char* value);

}  // namespace tessera::cpu::nn
