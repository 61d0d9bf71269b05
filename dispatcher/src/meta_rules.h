// Private to the dispatcher: what the shape rules of the op catalogue share (meta_<rule>, one per
// "shape_rule" of dispatcher/ops/ops.json). A shape rule checks a concrete call, picks the result
// dtype (Note [Compute dtype] in op_registry.h) and sizes the outputs with the op's sizes rule
// (Note [Shape rules] in shape_rules.h). The rules live in op_catalogue.cpp (creation, pointwise,
// reductions), meta_nn.cpp (nn, indexing, lists) and meta_quantized.cpp.
#pragma once
#include <string>

#include "op_registry.h"
#include "shape_rules.h"

namespace tessera::meta {

using Sz = shape::Sizes<int64_t>;

// Every shape rule of the catalogue: void meta_<rule>(MetaCall&).
#define TESSERA_META(rule) void meta_##rule(MetaCall& m);
#include "op_catalogue.inc"
#undef TESSERA_META

// ---- attribute access with checks (shape::AttrView)

inline shape::AttrView attrs_of(const MetaCall& m) { return {m.op_name, m.attrs, m.num_attrs}; }
inline const tessera_value_t& attr(const MetaCall& m, int i) { return attrs_of(m).attr(i); }
inline bool attr_none(const MetaCall& m, int i) { return attrs_of(m).attr_none(i); }
inline int64_t attr_int(const MetaCall& m, int i) { return attrs_of(m).attr_int(i); }
inline double attr_double(const MetaCall& m, int i) { return attrs_of(m).attr_double(i); }
inline bool attr_bool(const MetaCall& m, int i) { return attrs_of(m).attr_bool(i); }
inline DType attr_dtype(const MetaCall& m, int i) { return attrs_of(m).attr_dtype(i); }
inline IntArrayRef attr_ints(const MetaCall& m, int i) { return attrs_of(m).attr_ints(i); }
inline void attr_pair(const MetaCall& m, int i, const char* name, int64_t out[2], const int64_t* if_empty = nullptr) {
  attrs_of(m).attr_pair(i, name, out, if_empty);
}

inline const TensorImpl& need(const MetaCall& m, int i, const char* name) {
  TESSERA_CHECK(i < m.num_tensors && m.tensors[i], m.op_name, ": tensor argument '", name, "' is missing");
  return *m.tensors[i];
}

// The sizes of the call's one output by the sizes rule `Rule` of ops.json (shape::rules), on the
// call's concrete sizes: the function capture runs on symbolic sizes.
template <Sz (*Rule)(const shape::SizeArgs<int64_t>&)>
Sz sizes_by(const MetaCall& m) {
  detail::SmallVector<IntArrayRef, 8> sizes;
  for (int i = 0; i < m.num_tensors; ++i) sizes.push_back(m.tensors[i] ? m.tensors[i]->sizes() : IntArrayRef());
  shape::SizeArgs<int64_t> args;
  args.op = m.op_name;
  args.attrs = m.attrs;
  args.num_attrs = m.num_attrs;
  args.tensors = sizes.data();
  args.num_tensors = m.num_tensors;
  args.list_begin = m.list_begin;
  args.list_size = m.list_size;
  return Rule(args);
}

inline void add_rt(ResultTypeState& s, const TensorImpl& t) {
  s.add_tensor(t.dtype(), t.dim() == 0, t.is_wrapped_number());
}
inline DType result_type(const TensorImpl& a, const TensorImpl& b) {
  if (a.dtype() == b.dtype()) return a.dtype();  // one dtype promotes to itself, whatever the dims
  ResultTypeState s;
  add_rt(s, a);
  add_rt(s, b);
  return s.result();
}
inline DType float_of(DType t) { return is_floating(t) ? t : default_dtype(); }

// PyTorch's canCast: no conversion to a lower category (float -> int, int -> bool).
inline bool can_cast(DType from, DType to) { return int(dtype_category(from)) <= int(dtype_category(to)); }

// Ops that PyTorch implements for floating tensors only (gelu, silu, softmax, the norms): an integral or
// bool input is refused instead of being promoted, as PyTorch's kernels refuse it.
inline void check_floating_input(const MetaCall& m, const TensorImpl& x) {
  TESSERA_CHECK(is_floating(x.dtype()), m.op_name, ": not implemented for ", x.dtype(),
                " tensors (it takes floating tensors only); convert the input with .to(kFloat32)");
}

}  // namespace tessera::meta
