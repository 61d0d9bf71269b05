#include "common.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace tessera::cpu {

const char* dtype_name(int32_t d) {
  static const char* names[] = {"bool",    "uint8",    "int8",    "int16",   "int32",
                                "int64",   "float16",  "bfloat16", "float32", "float64"};
  return d >= 0 && d < TESSERA_DTYPE_COUNT_ ? names[d] : "unknown";
}
bool dtype_is_floating(int32_t d) { return d >= TESSERA_DTYPE_FLOAT16 && d <= TESSERA_DTYPE_FLOAT64; }
bool dtype_is_integral(int32_t d) { return d >= TESSERA_DTYPE_UINT8 && d <= TESSERA_DTYPE_INT64; }

int32_t promote_types(int32_t a, int32_t b) {
  if (a == b) return a;
  if (a == TESSERA_DTYPE_BOOL) return b;
  if (b == TESSERA_DTYPE_BOOL) return a;
  const bool fa = dtype_is_floating(a), fb = dtype_is_floating(b);
  if (fa != fb) return fa ? a : b;
  if (fa) {
    if ((a == TESSERA_DTYPE_FLOAT16 && b == TESSERA_DTYPE_BFLOAT16) ||
        (a == TESSERA_DTYPE_BFLOAT16 && b == TESSERA_DTYPE_FLOAT16))
      return TESSERA_DTYPE_FLOAT32;
    return std::max(a, b);
  }
  // both integral
  if (a == TESSERA_DTYPE_UINT8 || b == TESSERA_DTYPE_UINT8) {
    const int32_t other = a == TESSERA_DTYPE_UINT8 ? b : a;
    return other == TESSERA_DTYPE_INT8 ? TESSERA_DTYPE_INT16 : other;
  }
  return std::max(a, b);
}

OwnedTensor::OwnedTensor(const int64_t* s, int ndim, int32_t dtype) : sizes(s, s + ndim), strides(ndim) {
  int64_t n = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    strides[i] = n;
    n *= sizes[i];
  }
  storage.resize(size_t(n) * sdk::dtype_size(dtype) + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(storage.data());
  t.struct_size = sizeof(tessera_tensor_t);
  t.dtype = dtype;
  t.device_type = TESSERA_DEVICE_CPU;
  t.ndim = ndim;
  t.sizes = sizes.data();
  t.strides = strides.data();
  t.numel = n;
  t.data = storage.data();
  t.byte_offset = int64_t((64 - (p & 63)) & 63);
}

void check_rank(int ndim, const char* what) {
  TESSERA_SDK_CHECK(ndim >= 0 && ndim <= kMaxDims,
                    std::string("cpu: ") + what + " has rank " + std::to_string(ndim) +
                        "; the CPU plugin supports ranks 0 to " + std::to_string(kMaxDims) +
                        "; reshape the tensor to fewer dims");
}

void broadcast_strides(const tessera_tensor_t* t, int ndim, const int64_t* sizes, int64_t* out) {
  check_rank(ndim, "a broadcast output");
  check_rank(t->ndim, "a broadcast operand");
  const int off = ndim - t->ndim;
  TESSERA_SDK_CHECK(off >= 0, "cpu: operand of rank " + std::to_string(t->ndim) +
                                  " cannot broadcast to an output of rank " + std::to_string(ndim));
  for (int d = 0; d < ndim; ++d) {
    if (d < off) {
      out[d] = 0;
      continue;
    }
    const int64_t s = t->sizes[d - off];
    if (s == sizes[d]) {
      out[d] = s == 1 ? 0 : t->strides[d - off];
    } else {
      TESSERA_SDK_CHECK(s == 1, "cpu: operand size " + std::to_string(s) + " at dim " + std::to_string(d - off) +
                                    " does not broadcast to output size " + std::to_string(sizes[d]));
      out[d] = 0;
    }
  }
}

void StridedLoop::setup(int ndim_in, const int64_t* out_sizes, int nops_in, char* const* ptrs,
                        const int64_t* const* op_strides, const int64_t* elem_size) {
  check_rank(ndim_in, "a strided loop");
  TESSERA_SDK_CHECK(nops_in >= 1 && nops_in <= 8,
                    "cpu: a strided loop takes 1 to 8 operands, got " + std::to_string(nops_in));
  nops = nops_in;
  numel = 1;
  for (int k = 0; k < nops; ++k) base[k] = ptrs[k];
  // innermost first, dropping size-1 dims
  int perm[kMaxDims];
  int n = 0;
  for (int d = ndim_in - 1; d >= 0; --d) {
    numel *= out_sizes[d];
    if (out_sizes[d] != 1) perm[n++] = d;
  }
  // order dims by the output's stride (stable), so non-contiguous outputs are written in order
  std::stable_sort(perm, perm + n, [&](int a, int b) {
    return std::llabs(op_strides[0][a]) < std::llabs(op_strides[0][b]);
  });
  ndim = 0;
  for (int i = 0; i < n; ++i) {
    const int d = perm[i];
    if (ndim > 0) {
      bool mergeable = true;
      for (int k = 0; k < nops && mergeable; ++k)
        mergeable = op_strides[k][d] * elem_size[k] == strides[k][ndim - 1] * sizes[ndim - 1];
      if (mergeable) {
        sizes[ndim - 1] *= out_sizes[d];
        continue;
      }
    }
    sizes[ndim] = out_sizes[d];
    for (int k = 0; k < nops; ++k) strides[k][ndim] = op_strides[k][d] * elem_size[k];
    ++ndim;
  }
  if (numel == 0) ndim = 0;
}

namespace {
template <typename D, typename S>
inline void convert_one(D* d, const S* s) {
  if constexpr (std::is_same_v<D, bool>) {
    *reinterpret_cast<uint8_t*>(d) = Elem<S>::load(s) != 0;
  } else if constexpr (is_float_v<D> && !is_float_v<S>) {
    Elem<D>::store(d, acc_t<D>(Elem<S>::load(s)));
  } else if constexpr (!is_float_v<D> && is_float_v<S>) {
    Elem<D>::store(d, acc_t<D>(static_cast<int64_t>(Elem<S>::load(s))));
  } else if constexpr (std::is_same_v<D, double>) {
    *d = double(Elem<S>::load(s));
  } else {
    Elem<D>::store(d, acc_t<D>(Elem<S>::load(s)));
  }
}
}  // namespace

void copy_tensor(const tessera_tensor_t* dst, const tessera_tensor_t* src) {
  check_rank(dst->ndim, "the copy destination");
  check_rank(src->ndim, "the copy source");
  if (dst->numel == 0) return;
  int64_t src_strides[kMaxDims];
  broadcast_strides(src, dst->ndim, dst->sizes, src_strides);
  const int64_t esz[2] = {int64_t(sdk::dtype_size(dst->dtype)), int64_t(sdk::dtype_size(src->dtype))};
  char* ptrs[2] = {static_cast<char*>(dst->data) + dst->byte_offset,
                   static_cast<char*>(src->data) + src->byte_offset};
  const int64_t* strides[2] = {dst->strides, src_strides};
  StridedLoop loop;
  loop.setup(dst->ndim, dst->sizes, 2, ptrs, strides, esz);
  if (dst->dtype == src->dtype && loop.ndim <= 1 &&
      (loop.ndim == 0 || (loop.strides[0][0] == esz[0] && loop.strides[1][0] == esz[0]))) {
    parallel_for(0, loop.numel, 1 << 18, [&](int64_t b, int64_t e) {
      std::memcpy(ptrs[0] + b * esz[0], ptrs[1] + b * esz[0], size_t((e - b) * esz[0]));
    });
    return;
  }
  visit(dst->dtype, [&](auto d) {
    using D = decltype(d);
    visit(src->dtype, [&](auto s) {
      using S = decltype(s);
      for_each(loop, 1 << 16, [](char** p, const int64_t* st, int64_t n) {
        char* dp = p[0];
        const char* sp = p[1];
        if (st[0] == int64_t(sizeof(D)) && st[1] == int64_t(sizeof(S))) {
          D* dd = reinterpret_cast<D*>(dp);
          const S* ss = reinterpret_cast<const S*>(sp);
          for (int64_t i = 0; i < n; ++i) convert_one(dd + i, ss + i);
        } else {
          for (int64_t i = 0; i < n; ++i)
            convert_one(reinterpret_cast<D*>(dp + i * st[0]), reinterpret_cast<const S*>(sp + i * st[1]));
        }
      });
    });
  });
}

const tessera_tensor_t* cast_if_needed(const tessera_tensor_t* src, int32_t dtype,
                                       TempList& holder) {
  if (src->dtype == dtype) return src;
  holder.emplace_back(src->sizes, src->ndim, dtype);
  copy_tensor(holder.back().raw(), src);
  return holder.back().raw();
}

const tessera_tensor_t* contiguous_or_copy(const tessera_tensor_t* src, TempList& holder) {
  if (!src || TensorView(src).is_contiguous()) return src;
  holder.emplace_back(src->sizes, src->ndim, src->dtype);
  copy_tensor(holder.back().raw(), src);
  return holder.back().raw();
}

}  // namespace tessera::cpu
