// Shared helpers of the CPU kernels: element types, conversions, strided iteration.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <list>
#include <string>
#include <vector>

#include "grain.h"
#include "tessera/float16.h"
#include "tessera/sdk.hpp"

namespace tessera::cpu {

using sdk::KernelCall;
using sdk::TensorView;

constexpr int kMaxDims = 16;

// Note [Rank limit in the CPU plugin]
// Index and stride arrays in this plugin hold kMaxDims entries. The dispatcher rejects higher
// ranks, but a tensor can reach a kernel through other routes (the SDK, other plugins), so every
// function that fills such an array from a tensor's rank checks the rank first: an error status
// naming `what` and the rank, never a write past the array.
void check_rank(int ndim, const char* what);

// 16-bit float bits <-> float: the SDK's conversion (tessera/float16.h).
inline float bf16_to_float(uint16_t b) { return fp16::bfloat16_bits_to_float(b); }
inline uint16_t float_to_bf16(float f) { return fp16::float_to_bfloat16_bits(f); }
inline float half_to_float(uint16_t h) { return fp16::half_bits_to_float(h); }
inline uint16_t float_to_half(float f) { return fp16::float_to_half_bits(f); }

struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};

// Element access for every dtype, as the "compute" type of that dtype.
template <typename T> struct Elem;
#define TESSERA_CPU_PLAIN_ELEM(T, ACC)                          \
  template <> struct Elem<T> {                                  \
    using acc = ACC;                                            \
    static acc load(const T* p) { return acc(*p); }             \
    static void store(T* p, acc v) { *p = T(v); }               \
  };
TESSERA_CPU_PLAIN_ELEM(uint8_t, int64_t)
TESSERA_CPU_PLAIN_ELEM(int8_t, int64_t)
TESSERA_CPU_PLAIN_ELEM(int16_t, int64_t)
TESSERA_CPU_PLAIN_ELEM(int32_t, int64_t)
TESSERA_CPU_PLAIN_ELEM(int64_t, int64_t)
TESSERA_CPU_PLAIN_ELEM(float, float)
TESSERA_CPU_PLAIN_ELEM(double, double)
#undef TESSERA_CPU_PLAIN_ELEM
template <> struct Elem<bool> {
  using acc = int64_t;
  static acc load(const bool* p) { return *reinterpret_cast<const uint8_t*>(p) != 0; }
  static void store(bool* p, acc v) { *reinterpret_cast<uint8_t*>(p) = v != 0; }
};
template <> struct Elem<bf16_t> {
  using acc = float;
  static acc load(const bf16_t* p) { return bf16_to_float(p->bits); }
  static void store(bf16_t* p, acc v) { p->bits = float_to_bf16(v); }
};
template <> struct Elem<f16_t> {
  using acc = float;
  static acc load(const f16_t* p) { return half_to_float(p->bits); }
  static void store(f16_t* p, acc v) { p->bits = float_to_half(v); }
};
template <typename T> using acc_t = typename Elem<T>::acc;

template <typename T> constexpr bool is_float_v =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16_t> ||
    std::is_same_v<T, f16_t>;

// Calls f(T{}) with the element type of dtype `d`.
template <typename F>
decltype(auto) visit(int32_t d, F&& f) {
  switch (d) {
    case TESSERA_DTYPE_BOOL: return f(bool{});
    case TESSERA_DTYPE_UINT8: return f(uint8_t{});
    case TESSERA_DTYPE_INT8: return f(int8_t{});
    case TESSERA_DTYPE_INT16: return f(int16_t{});
    case TESSERA_DTYPE_INT32: return f(int32_t{});
    case TESSERA_DTYPE_INT64: return f(int64_t{});
    case TESSERA_DTYPE_FLOAT16: return f(f16_t{});
    case TESSERA_DTYPE_BFLOAT16: return f(bf16_t{});
    case TESSERA_DTYPE_FLOAT32: return f(float{});
    case TESSERA_DTYPE_FLOAT64: return f(double{});
    default:
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                       "cpu: unknown dtype code " + std::to_string(d) + "; expected 0..9");
  }
}

const char* dtype_name(int32_t d);
bool dtype_is_floating(int32_t d);
bool dtype_is_integral(int32_t d);  // excludes bool
// PyTorch's promote_types.
int32_t promote_types(int32_t a, int32_t b);

// A tensor owned by the plugin (temporaries: casts to a common dtype). Contiguous.
struct OwnedTensor {
  std::vector<int64_t> sizes, strides;
  std::vector<unsigned char> storage;  // 64-byte aligned through over-allocation
  tessera_tensor_t t{};
  OwnedTensor(const OwnedTensor&) = delete;
  OwnedTensor& operator=(const OwnedTensor&) = delete;
  OwnedTensor(OwnedTensor&&) = default;
  OwnedTensor(const int64_t* sizes, int ndim, int32_t dtype);
  const tessera_tensor_t* raw() const { return &t; }
};

// Temporaries whose tensor pointers stay valid while the list grows. A list, not a deque:
// libstdc++'s deque allocates its map and a first 512-byte node when constructed, and every
// elementwise kernel makes one, used or not (a malloc and a free on each call of a 1-element add).
using TempList = std::list<OwnedTensor>;

// Casting copy between any dtypes and any strides (same shape; `src` may be broadcast to dst's
// shape when given `src_strides` for dst's ndim). The core of copy_ and of input casts.
void copy_tensor(const tessera_tensor_t* dst, const tessera_tensor_t* src);
// `src` converted to `dtype` (a contiguous copy) or nullptr-equivalent when already that dtype:
// returns the tensor to use, keeping a temporary alive in `holder`.
const tessera_tensor_t* cast_if_needed(const tessera_tensor_t* src, int32_t dtype,
                                       TempList& holder);

// `src` as a contiguous tensor of its dtype: itself when already contiguous, else a copy kept alive in
// `holder`.
const tessera_tensor_t* contiguous_or_copy(const tessera_tensor_t* src, TempList& holder);

// A view over `base`'s storage with its own sizes and element strides (negative ones walk backwards)
// and an extra byte offset: the geometry the copy kernels give copy_tensor.
struct StridedView {
  int64_t sizes[kMaxDims], strides[kMaxDims];
  tessera_tensor_t t;
  StridedView(const tessera_tensor_t* base, int ndim, const int64_t* s, const int64_t* st, int64_t extra_bytes) {
    check_rank(ndim, "a view");
    t = *base;
    t.ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) {
      sizes[i] = s[i];
      strides[i] = st[i];
      n *= s[i];
    }
    t.sizes = sizes;
    t.strides = strides;
    t.numel = n;
    t.byte_offset = base->byte_offset + extra_bytes;
  }
};

// Strides (in elements) of `t` broadcast to `ndim` dims of `sizes` (stride 0 where broadcast).
void broadcast_strides(const tessera_tensor_t* t, int ndim, const int64_t* sizes, int64_t* out);

// Note [Strided loops]
// An N-operand loop over an output shape. Operand 0 is the output; every operand has byte strides
// over the output's dims. Dims of size 1 are dropped and adjacent dims that are contiguous with
// each other for every operand are merged, so a contiguous or a simply broadcast operation runs
// as one inner loop. for_each calls `inner(char** ptrs, const int64_t* byte_strides, int64_t n)`
// for runs of the innermost dim, in parallel over the linear index when the work is large.
struct StridedLoop {
  int ndim = 0;
  int nops = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[8][kMaxDims];  // bytes, [op][dim], dim 0 innermost after setup
  char* base[8];
  int64_t numel = 1;

  // sizes: output shape (outer to inner), op_strides[op]: element strides, elem_size[op].
  void setup(int ndim_in, const int64_t* out_sizes, int nops_in, char* const* ptrs,
             const int64_t* const* op_strides, const int64_t* elem_size);

  template <typename F>
  void run_range(int64_t begin, int64_t end, F& inner) const {
    int64_t idx[kMaxDims] = {0};
    int64_t rem = begin;
    for (int d = 0; d < ndim; ++d) {
      idx[d] = rem % sizes[d];
      rem /= sizes[d];
    }
    char* ptrs[8];
    int64_t inner_strides[8];
    for (int k = 0; k < nops; ++k) {
      ptrs[k] = base[k];
      for (int d = 0; d < ndim; ++d) ptrs[k] += idx[d] * strides[k][d];
      inner_strides[k] = ndim > 0 ? strides[k][0] : 0;
    }
    int64_t pos = begin;
    while (pos < end) {
      const int64_t n = ndim > 0 ? std::min<int64_t>(sizes[0] - idx[0], end - pos) : 1;
      inner(ptrs, inner_strides, n);
      pos += n;
      if (pos >= end) break;
      // advance: idx[0] wraps to 0 (we consumed to the end of the row), carry up
      for (int k = 0; k < nops; ++k) ptrs[k] += (n - 0) * strides[k][0] - sizes[0] * strides[k][0];
      idx[0] = 0;
      for (int d = 1; d < ndim; ++d) {
        ++idx[d];
        for (int k = 0; k < nops; ++k) ptrs[k] += strides[k][d];
        if (idx[d] < sizes[d]) break;
        for (int k = 0; k < nops; ++k) ptrs[k] -= sizes[d] * strides[k][d];
        idx[d] = 0;
      }
    }
  }
};

// Runs `inner` over the loop, in parallel when numel >= 2 * grain (elements per thread).
template <typename F>
void for_each(const StridedLoop& loop, int64_t grain, F inner);
// The same with the grain of an op kind (Note [Grain size]).
template <typename F>
void for_each(const StridedLoop& loop, OpKind kind, F inner);

}  // namespace tessera::cpu

#include "parallel.h"

namespace tessera::cpu {
template <typename F>
void for_each(const StridedLoop& loop, int64_t grain, F inner) {
  parallel_for_dynamic(0, loop.numel, grain, [&](int64_t b, int64_t e) {
    F local = inner;
    loop.run_range(b, e, local);
  });
}
template <typename F>
void for_each(const StridedLoop& loop, OpKind kind, F inner) {
  for_each(loop, grain_for(kind, loop.numel), std::move(inner));
}
}  // namespace tessera::cpu
