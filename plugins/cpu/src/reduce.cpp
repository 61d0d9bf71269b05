// Reductions over a set of dims (sum, mean, amax, amin, prod, var) argmax and argmin.
// Note [Reduction layout]
// The input's dims are split into kept and reduced ones. Each output element reduces a strided
// sub-tensor (the reduced dims, merged where contiguous). Two fast paths cover the common layouts
// of contiguous f32/f64 inputs: reduced dims innermost (row reductions through the per-ISA
// sum/max/min) and reduced dims in the middle of [outer, reduced, inner] (column sums through
// accumulate_*). Floating sums accumulate in double and round once.
#include <cmath>
#include <limits>

#include "kernels.h"
#include "vec_kernels.h"

namespace tessera::cpu {
namespace {

enum class ReduceOp : int { Sum, Mean, Max, Min, Prod, Var };

struct ReduceArgs {
  bool reduce[kMaxDims] = {};
  bool keepdim = false;
  double correction = 1;
};

// Finds dims (an int list, an int, or None = all), keepdim and correction among the attributes by
// kind, so that schema orders (`dim, keepdim` or `dim, correction, keepdim`) both work.
ReduceArgs parse_reduce_args(const KernelCall& c, const tessera_tensor_t* x) {
  ReduceArgs r;
  const int nd = x->ndim;
  check_rank(nd, "the reduction input");
  bool dims_seen = false, any = false;
  bool int_seen = false;
  for (int i = 0; i < c.num_attrs(); ++i) {
    const tessera_value_t& v = c.attr(i);
    if (!dims_seen && (v.kind == TESSERA_VALUE_INT_LIST || v.kind == TESSERA_VALUE_NONE ||
                       (v.kind == TESSERA_VALUE_INT && i == 0))) {
      dims_seen = true;
      if (v.kind == TESSERA_VALUE_INT_LIST) {
        for (int k = 0; k < v.count; ++k) {
          int64_t d = v.u.ints[k];
          const int64_t n = nd == 0 ? 1 : nd;
          TESSERA_SDK_CHECK(d >= -n && d < n, "dimension " + std::to_string(d) + " out of range for a tensor of rank " +
                                                  std::to_string(nd));
          if (d < 0) d += n;
          if (nd > 0) r.reduce[d] = true;
          any = true;
        }
      } else if (v.kind == TESSERA_VALUE_INT) {
        int64_t d = v.u.i;
        if (d < 0) d += nd;
        TESSERA_SDK_CHECK(nd == 0 || (d >= 0 && d < nd), "dimension out of range");
        if (nd > 0) r.reduce[d] = true;
        any = true;
      }
      continue;
    }
    if (v.kind == TESSERA_VALUE_BOOL) {
      r.keepdim = v.u.b != 0;
    } else if ((v.kind == TESSERA_VALUE_INT || v.kind == TESSERA_VALUE_DOUBLE) && !int_seen) {
      int_seen = true;
      r.correction = v.kind == TESSERA_VALUE_INT ? double(v.u.i) : v.u.d;
    }
  }
  if (!any)
    for (int d = 0; d < nd; ++d) r.reduce[d] = true;
  return r;
}

// Output strides over the input's dims (0 on reduced dims), from the output tensor (kept or
// squeezed reduced dims).
void output_strides(const tessera_tensor_t* x, const tessera_tensor_t* out, const ReduceArgs& a, int64_t* os) {
  const bool kept = out->ndim == x->ndim;
  int j = 0;
  for (int d = 0; d < x->ndim; ++d) {
    if (a.reduce[d]) {
      os[d] = 0;
      if (kept) ++j;
    } else {
      os[d] = out->strides[j++];
    }
  }
}

template <typename T>
void reduce_general(ReduceOp op, const tessera_tensor_t* x, const tessera_tensor_t* out, const ReduceArgs& a) {
  const int nd = x->ndim;
  // kept dims -> index space of outputs; reduced dims -> inner loop
  int64_t kept_sizes[kMaxDims], kept_xs[kMaxDims], kept_os[kMaxDims];
  int64_t red_sizes[kMaxDims], red_xs[kMaxDims];
  int64_t os_full[kMaxDims];
  output_strides(x, out, a, os_full);
  int nk = 0, nr = 0;
  int64_t nred = 1;
  for (int d = 0; d < nd; ++d) {
    if (a.reduce[d]) {
      red_sizes[nr] = x->sizes[d];
      red_xs[nr++] = x->strides[d];
      nred *= x->sizes[d];
    } else {
      kept_sizes[nk] = x->sizes[d];
      kept_xs[nk] = x->strides[d];
      kept_os[nk++] = os_full[d];
    }
  }
  const int64_t esz = int64_t(sizeof(T));
  StridedLoop red;
  {
    char* base[1] = {nullptr};
    const int64_t* st[1] = {red_xs};
    red.setup(nr, red_sizes, 1, base, st, &esz);
  }
  int64_t nout = 1;
  for (int k = 0; k < nk; ++k) nout *= kept_sizes[k];
  const char* xbase = static_cast<const char*>(x->data) + x->byte_offset;
  char* obase = static_cast<char*>(out->data) + out->byte_offset;
  const int32_t od = out->dtype;
  using A = acc_t<T>;
  using S = std::conditional_t<is_float_v<T>, double, int64_t>;
  TESSERA_SDK_CHECK(nred > 0 || op == ReduceOp::Sum || op == ReduceOp::Prod || op == ReduceOp::Mean ||
                        op == ReduceOp::Var,
                    "cannot compute amax/amin over an empty dimension; the reduction has no identity");
  const int64_t grain = grain_items(OpKind::Reduction, nred, nout);
  parallel_for(0, nout, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t rem = o, xoff = 0, ooff = 0;
      for (int k = nk - 1; k >= 0; --k) {
        const int64_t i = rem % kept_sizes[k];
        rem /= kept_sizes[k];
        xoff += i * kept_xs[k] * esz;
        ooff += i * kept_os[k];
      }
      StridedLoop r = red;
      r.base[0] = const_cast<char*>(xbase + xoff);
      double result;
      if (op == ReduceOp::Sum || op == ReduceOp::Mean || op == ReduceOp::Var || op == ReduceOp::Prod) {
        S acc = op == ReduceOp::Prod ? S(1) : S(0);
        auto body = [&](char** p, const int64_t* st, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            const S v = S(Elem<T>::load(reinterpret_cast<const T*>(p[0] + i * st[0])));
            if constexpr (std::is_integral_v<S>) {  // integer sums and products wrap as PyTorch's
              using U = std::make_unsigned_t<S>;
              acc = S(op == ReduceOp::Prod ? U(acc) * U(v) : U(acc) + U(v));
            } else {
              if (op == ReduceOp::Prod) acc *= v; else acc += v;
            }
          }
        };
        if (nred > 0) r.run_range(0, nred, body);
        if (op == ReduceOp::Var) {
          const double mean = double(acc) / double(nred);
          double sq = 0;
          auto body2 = [&](char** p, const int64_t* st, int64_t n) {
            for (int64_t i = 0; i < n; ++i) {
              const double d = double(Elem<T>::load(reinterpret_cast<const T*>(p[0] + i * st[0]))) - mean;
              sq += d * d;
            }
          };
          if (nred > 0) r.run_range(0, nred, body2);
          // PyTorch: a non-positive denominator gives nan (0/0) or inf
          const double denom = std::max(0.0, double(nred) - a.correction);
          result = sq / denom;
        } else if (op == ReduceOp::Mean) {
          result = nred > 0 ? double(acc) / double(nred) : std::numeric_limits<double>::quiet_NaN();
        } else {
          // integer sums keep int64 exactness through the store below
          if constexpr (std::is_integral_v<S>) {
            if (!dtype_is_floating(od)) {
              visit(od, [&](auto ot) {
                using OT = decltype(ot);
                Elem<OT>::store(reinterpret_cast<OT*>(obase + ooff * int64_t(sizeof(OT))), acc_t<OT>(acc));
              });
              continue;
            }
          }
          result = double(acc);
        }
      } else {
        A best = Elem<T>::load(reinterpret_cast<const T*>(xbase + xoff));
        bool nan = false;
        auto body = [&](char** p, const int64_t* st, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            const A v = Elem<T>::load(reinterpret_cast<const T*>(p[0] + i * st[0]));
            if (v != v) nan = true;
            if (op == ReduceOp::Max ? v > best : v < best) best = v;
          }
        };
        r.run_range(0, nred, body);
        if constexpr (is_float_v<T>) {
          if (nan) best = std::numeric_limits<A>::quiet_NaN();
        }
        visit(od, [&](auto ot) {
          using OT = decltype(ot);
          Elem<OT>::store(reinterpret_cast<OT*>(obase + ooff * int64_t(sizeof(OT))), acc_t<OT>(best));
        });
        continue;
      }
      visit(od, [&](auto ot) {
        using OT = decltype(ot);
        Elem<OT>::store(reinterpret_cast<OT*>(obase + ooff * int64_t(sizeof(OT))), acc_t<OT>(result));
      });
    }
  });
}

// Contiguous f32/f64 input, reduced dims forming one block [outer, red, inner], output contiguous.
template <typename T>
bool reduce_fast(ReduceOp op, const tessera_tensor_t* x, const tessera_tensor_t* out, const ReduceArgs& a) {
  if (op == ReduceOp::Var || op == ReduceOp::Prod) return false;
  if (!TensorView(x).is_contiguous() || !TensorView(out).is_contiguous() || out->dtype != x->dtype) return false;
  if constexpr (std::is_same_v<T, double>) {
    if (op == ReduceOp::Max || op == ReduceOp::Min) return false;
  }
  const int nd = x->ndim;
  int first = -1, last = -1;
  for (int d = 0; d < nd; ++d)
    if (a.reduce[d] && x->sizes[d] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  if (first < 0) return false;
  for (int d = first; d <= last; ++d)
    if (!a.reduce[d] && x->sizes[d] != 1) return false;
  int64_t outer = 1, red = 1, inner = 1;
  for (int d = 0; d < nd; ++d) (d < first ? outer : (d <= last ? red : inner)) *= x->sizes[d];
  if (red == 0) return false;
  const T* xp = reinterpret_cast<const T*>(static_cast<const char*>(x->data) + x->byte_offset);
  T* op_ = reinterpret_cast<T*>(static_cast<char*>(out->data) + out->byte_offset);
  const VecKernels& vk = kernels();
  const double scale = op == ReduceOp::Mean ? 1.0 / double(red) : 1.0;
  if (inner == 1) {
    if (outer == 1 && (op == ReduceOp::Sum || op == ReduceOp::Mean)) {
      // one long row: partial sums per thread
      const int nt = threads_for(OpKind::Reduction, red);
      std::vector<double> partial(size_t(nt) * 8, 0.0);
      const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(nt, red / grain_items(OpKind::Reduction, 1, red)));
      const int64_t step = (red + chunks - 1) / chunks;
      parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t ch = b; ch < e; ++ch) {
          const int64_t s = ch * step, n = std::min(red, s + step) - s;
          if constexpr (std::is_same_v<T, float>) partial[size_t(ch) * 8] = vk.sum_f32(xp + s, n);
          else partial[size_t(ch) * 8] = vk.sum_f64(xp + s, n);
        }
      });
      double total = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) total += partial[size_t(ch) * 8];
      op_[0] = T(total * scale);
      return true;
    }
    parallel_for(0, outer, grain_items(OpKind::Reduction, red, outer), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = xp + o * red;
        if constexpr (std::is_same_v<T, float>) {
          if (op == ReduceOp::Max) op_[o] = vk.max_f32(row, red);
          else if (op == ReduceOp::Min) op_[o] = vk.min_f32(row, red);
          else op_[o] = float(vk.sum_f32(row, red) * scale);
        } else {
          op_[o] = T(vk.sum_f64(row, red) * scale);
        }
      }
    });
    return true;
  }
  if (op != ReduceOp::Sum && op != ReduceOp::Mean) return false;
  // column sums: for each outer block, acc[inner] += rows
  const int64_t ib = 4096;
  const int64_t nblocks = (inner + ib - 1) / ib;
  const int64_t block_grain = grain_items(OpKind::Reduction, red * std::min(ib, inner), outer * nblocks);
  parallel_for(0, outer * nblocks, block_grain, [&](int64_t b, int64_t e) {
    std::vector<double> acc(size_t(std::min(ib, inner)));
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / nblocks, i0 = (t % nblocks) * ib, n = std::min(ib, inner - i0);
      std::fill(acc.begin(), acc.begin() + n, 0.0);
      for (int64_t r = 0; r < red; ++r) {
        const T* row = xp + (o * red + r) * inner + i0;
        if constexpr (std::is_same_v<T, float>) vk.accumulate_f32(acc.data(), row, n);
        else vk.accumulate_f64(acc.data(), row, n);
      }
      for (int64_t i = 0; i < n; ++i) op_[o * inner + i0 + i] = T(acc[size_t(i)] * scale);
    }
  });
  return true;
}

tessera_status_t reduce_kernel(void* user_data, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const ReduceOp op = ReduceOp(reinterpret_cast<intptr_t>(user_data));
    const tessera_tensor_t* x = c.raw()->inputs[0];
    const tessera_tensor_t* out = c.raw()->outputs[0];
    const ReduceArgs a = parse_reduce_args(c, x);
    if (op == ReduceOp::Max || op == ReduceOp::Min) {
      // PyTorch: amax / amin have no identity, so no reduced dim may be empty.
      for (int d = 0; d < x->ndim; ++d)
        TESSERA_SDK_CHECK(!a.reduce[d] || x->sizes[d] > 0,
                          std::string(c.op_name()) + ": Expected reduction dim " + std::to_string(d) +
                              " to have non-zero size (input of size " + std::to_string(x->sizes[d]) +
                              " there); reduce over non-empty dims only");
    }
    TempList temps;
    // mean/var of integers compute on the output's floating type
    if ((op == ReduceOp::Mean || op == ReduceOp::Var) && !dtype_is_floating(x->dtype))
      x = cast_if_needed(x, out->dtype, temps);
    visit(x->dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        if (reduce_fast<T>(op, x, out, a)) return;
      }
      reduce_general<T>(op, x, out, a);
    });
  });
}

// argmax, and argmin when `min_tag` is non-null (the first index of the extreme value; NaN wins both).
tessera_status_t argmax_kernel(void* min_tag, const tessera_kernel_call_t* call) {
  const bool is_min = min_tag != nullptr;
  return guarded(call, [&](const KernelCall& c) {
    const tessera_tensor_t* x = c.raw()->inputs[0];
    const tessera_tensor_t* out = c.raw()->outputs[0];
    using A = op::argmax::attr;
    const bool has_dim = c.num_attrs() > A::dim && c.attr(A::dim).kind == TESSERA_VALUE_INT;
    TESSERA_SDK_CHECK(has_dim || x->numel > 0,
                      "argmax: Expected reduction dim to be specified for an empty input (numel 0); pass dim=");
    TempList temps;
    int64_t outer = 1, red = 1, inner = 1;
    int64_t xs_red = 1, xs_outer = 1;
    const char* xbase;
    if (!has_dim || x->ndim == 0) {
      // flattened logical order: a contiguous copy
      temps.emplace_back(x->sizes, x->ndim, x->dtype);
      copy_tensor(temps.back().raw(), x);
      x = temps.back().raw();
      red = x->numel;
    } else {
      int64_t d = c.attr_int(A::dim);
      if (d < 0) d += x->ndim;
      TESSERA_SDK_CHECK(d >= 0 && d < x->ndim, "argmax: dim out of range");
      // make it contiguous to keep the index arithmetic simple
      if (!TensorView(x).is_contiguous()) {
        temps.emplace_back(x->sizes, x->ndim, x->dtype);
        copy_tensor(temps.back().raw(), x);
        x = temps.back().raw();
      }
      for (int i = 0; i < x->ndim; ++i) (i < d ? outer : (i == d ? red : inner)) *= x->sizes[i];
      TESSERA_SDK_CHECK(red > 0, "argmax: Expected reduction dim " + std::to_string(d) +
                                     " to have non-zero size; reduce over a non-empty dim");
    }
    if (outer * inner == 0) return;  // a non-empty dim of an empty tensor: an empty result
    xs_red = inner;
    xs_outer = red * inner;
    xbase = static_cast<const char*>(x->data) + x->byte_offset;
    // output: contiguous int64 of outer*inner elements (kept or squeezed dim alike)
    TESSERA_SDK_CHECK(TensorView(out).is_contiguous(), "argmax: output must be contiguous");
    int64_t* op_ = reinterpret_cast<int64_t*>(static_cast<char*>(out->data) + out->byte_offset);
    visit(x->dtype, [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      const T* xp = reinterpret_cast<const T*>(xbase);
      parallel_for(0, outer * inner, grain_items(OpKind::Reduction, red, outer * inner), [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t o = t / inner, i = t % inner;
          const T* p = xp + o * xs_outer + i;
          A best = Elem<T>::load(p);
          int64_t bi = 0;
          for (int64_t r = 1; r < red; ++r) {
            const A v = Elem<T>::load(p + r * xs_red);
            if (best != best) break;  // the first NaN wins
            if ((is_min ? v < best : v > best) || v != v) {
              best = v;
              bi = r;
            }
          }
          op_[t] = bi;
        }
      });
    });
  });
}

void* tag(int v) { return reinterpret_cast<void*>(intptr_t(v)); }

}  // namespace

void register_reduction_kernels(Registrar& r) {
  r.add(op::sum::name, kMaskAll, &reduce_kernel, tag(int(ReduceOp::Sum)));
  r.add(op::mean::name, kMaskAll, &reduce_kernel, tag(int(ReduceOp::Mean)));
  r.add(op::amax::name, kMaskAll, &reduce_kernel, tag(int(ReduceOp::Max)));
  r.add(op::amin::name, kMaskAll, &reduce_kernel, tag(int(ReduceOp::Min)));
  r.add(op::prod::name, kMaskAll, &reduce_kernel, tag(int(ReduceOp::Prod)));
  r.add(op::var::name, kMaskAll, &reduce_kernel, tag(int(ReduceOp::Var)));
  r.add(op::argmax::name, kMaskAll, &argmax_kernel);
  r.add(op::argmin::name, kMaskAll, &argmax_kernel, tag(1));
}

}  // namespace tessera::cpu
