// Shape rules of the nn, indexing and list ops of the catalogue (meta_rules.h).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "memory_format_internal.h"
#include "meta_rules.h"

namespace tessera::meta {

// ---- nn

void check_same_dtype(const MetaCall& m, const TensorImpl& a, const TensorImpl& b, const char* an,
                      const char* bn) {
  TESSERA_CHECK(a.dtype() == b.dtype(), m.op_name, ": expected ", an, " and ", bn,
                " to have the same dtype, got ", a.dtype(), " and ", b.dtype(), "; convert one with .to(",
                a.dtype(), ")");
}

void meta_matmul(MetaCall& m) {
  const TensorImpl& a = need(m, 0, "self");
  const TensorImpl& b = need(m, 1, "other");
  check_same_dtype(m, a, b, "self", "other");
  m.add_output(sizes_by<shape::rules::matmul<int64_t>>(m), a.dtype());
}

void meta_linear(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& w = need(m, 1, "weight");
  check_same_dtype(m, x, w, "input", "weight");
  Sz out = sizes_by<shape::rules::linear<int64_t>>(m);
  if (m.has(2)) {
    const TensorImpl& bias = *m.tensors[2];
    check_same_dtype(m, x, bias, "input", "bias");
    shape::check_broadcast_to<int64_t>(m.op_name, bias.sizes(), out.ref());
  }
  m.add_output(out, x.dtype());
}

void meta_softmax(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  shape::wrap(m.op_name, attr_int(m, op::softmax::attr::dim), x.dim());
  if (x.numel() == 0 && !is_floating(x.dtype())) {  // PyTorch returns an empty input before its dtype check
    m.add_output(x.sizes(), x.dtype());
    return;
  }
  meta_unary_float_only(m);
}

void check_normalized(const MetaCall& m, const TensorImpl& x, IntArrayRef ns) {
  TESSERA_CHECK(!ns.empty(), m.op_name, ": normalized_shape must not be empty");
  bool ok = int64_t(ns.size()) <= x.dim();
  for (size_t i = 0; ok && i < ns.size(); ++i) ok = x.sizes()[size_t(x.dim()) - ns.size() + i] == ns[i];
  TESSERA_CHECK(ok, m.op_name, ": given normalized_shape=", ns, ", expected input with shape [*, ",
                shape::sizes_str(ns).substr(1), ", but got input of size ", x.sizes());
}

void meta_layer_norm(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  IntArrayRef ns = attr_ints(m, op::layer_norm::attr::normalized_shape);
  check_floating_input(m, x);
  check_normalized(m, x, ns);
  for (int i = 1; i <= 2; ++i)
    if (m.has(i))
      TESSERA_CHECK(m.t(i).sizes() == ns, m.op_name, ": ", i == 1 ? "weight" : "bias", " must have shape ",
                    ns, ", got ", m.t(i).sizes());
  DType r = float_of(x.dtype());
  m.compute_dtype = r;
  m.cast_mask = 0b111;
  m.add_output(x.sizes(), r);
}

void meta_conv2d(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  const TensorImpl& w = need(m, 1, "weight");
  check_same_dtype(m, x, w, "input", "weight");
  Sz out = sizes_by<shape::rules::conv2d<int64_t>>(m);
  if (m.has(2)) {
    TESSERA_CHECK(m.t(2).dim() == 1 && m.t(2).sizes()[0] == w.sizes()[0], m.op_name,
                  ": bias must have shape [", w.sizes()[0], "], got ", m.t(2).sizes());
    check_same_dtype(m, x, m.t(2), "input", "bias");
  }
  m.add_output(out, x.dtype());
  // Note [Channels-last activations] (docs/semantics.md): PyTorch's rule, a channels-last input or
  // weight gives a channels-last output, so that consecutive convs keep the layout their kernels
  // read without a reorder.
  if (out.size() == 4 && (detail::suggests_channels_last(x) || detail::suggests_channels_last(w)))
    m.outputs[0].make_channels_last();
}

void meta_max_pool2d(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  m.add_output(sizes_by<shape::rules::max_pool2d<int64_t>>(m), x.dtype());
  // Note [Channels-last activations] (docs/semantics.md): PyTorch's pools keep their input's layout
  // (a channels-last x is 4-D, and so is the output).
  if (detail::suggests_channels_last(x)) m.outputs[0].make_channels_last();
}

void meta_avg_pool2d(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  TESSERA_CHECK(x.dtype() != kBool, m.op_name, ": not supported for bool tensors");
  m.add_output(sizes_by<shape::rules::avg_pool2d<int64_t>>(m), x.dtype());
  if (detail::suggests_channels_last(x)) m.outputs[0].make_channels_last();  // as max_pool2d
}

void check_index_dtype(const MetaCall& m, const TensorImpl& idx, const char* name) {
  TESSERA_CHECK(idx.dtype() == kInt64 || idx.dtype() == kInt32, m.op_name, ": ", name,
                " must be an int64 or int32 tensor, got ", idx.dtype(), "; convert with .to(kInt64)");
}

void meta_embedding(MetaCall& m) {
  const TensorImpl& w = need(m, 0, "weight");
  const TensorImpl& idx = need(m, 1, "indices");
  Sz out = sizes_by<shape::rules::embedding<int64_t>>(m);
  check_index_dtype(m, idx, "indices");
  m.add_output(out, w.dtype());
}

void meta_sdpa(MetaCall& m) {
  const TensorImpl& q = need(m, 0, "query");
  const TensorImpl& k = need(m, 1, "key");
  const TensorImpl& v = need(m, 2, "value");
  check_same_dtype(m, q, k, "query", "key");
  check_same_dtype(m, q, v, "query", "value");
  // PyTorch refuses integer and bool attention ("expected scalar type Float but found Long").
  TESSERA_CHECK(is_floating(q.dtype()), m.op_name, ": query, key and value have dtype ", q.dtype(),
                "; expected a floating dtype (float16, bfloat16, float32 or float64); convert them with .to(float32)");
  Sz out = sizes_by<shape::rules::attention<int64_t>>(m);
  if (m.has(3)) {
    const TensorImpl& mask = m.t(3);
    Sz scores(q.sizes().begin(), q.sizes().end() - 1);
    scores.push_back(k.sizes()[size_t(k.dim() - 2)]);
    shape::check_broadcast_to<int64_t>(m.op_name, mask.sizes(), scores.ref());
    // PyTorch's rule: a float32 mask is added in float32 to the float32 scores of every floating
    // query dtype, without rounding it to the query's dtype first.
    TESSERA_CHECK(mask.dtype() == kBool || mask.dtype() == kFloat32 || mask.dtype() == q.dtype(), m.op_name,
                  ": attn_mask has dtype ", mask.dtype(), "; expected bool, float32 or the query's dtype ", q.dtype(),
                  " (convert it with .to(", q.dtype(), "))");
    TESSERA_CHECK(!attr_bool(m, op::scaled_dot_product_attention::attr::is_causal), m.op_name,
                  ": give either attn_mask or is_causal=true, not both");
  }
  m.compute_dtype = q.dtype();
  m.cast_mask = 0b111;
  m.add_output(out, q.dtype());
}

// The common dtype of a Tensor[] argument (each element defined).
DType list_dtype(const MetaCall& m) {
  TESSERA_CHECK(m.list_size > 0, m.op_name, ": expected a non-empty list of tensors");
  ResultTypeState s;
  for (int i = 0; i < m.list_size; ++i) {
    const TensorImpl* t = m.tensors[m.list_begin + i];
    TESSERA_CHECK(t, m.op_name, ": tensor ", i, " of the list is undefined");
    s.add_tensor(t->dtype(), false, false);
  }
  return s.result();
}

// cat and stack: every element converted to the common dtype, sizes by the op's rule.
template <Sz (*Rule)(const shape::SizeArgs<int64_t>&)>
void meta_list_op(MetaCall& m) {
  const DType common = list_dtype(m);
  Sz out = sizes_by<Rule>(m);
  m.compute_dtype = common;
  m.cast_all = true;
  m.add_output(out, common);
}

void meta_cat(MetaCall& m) { meta_list_op<shape::rules::cat<int64_t>>(m); }
void meta_stack(MetaCall& m) { meta_list_op<shape::rules::stack<int64_t>>(m); }

void meta_index_select(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  const TensorImpl& idx = need(m, 1, "index");
  check_index_dtype(m, idx, "index");
  m.add_output(sizes_by<shape::rules::index_select<int64_t>>(m), x.dtype());
}

void meta_gather(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "self");
  const TensorImpl& idx = need(m, 1, "index");
  check_index_dtype(m, idx, "index");
  int64_t d = shape::wrap(m.op_name, attr_int(m, op::gather::attr::dim), x.dim());
  TESSERA_CHECK(idx.dim() == x.dim() || (x.dim() == 0 && idx.dim() <= 1), m.op_name,
                ": index must have as many dimensions as self (", x.dim(), "), got ", idx.dim());
  for (int64_t i = 0; i < x.dim(); ++i)
    TESSERA_CHECK(i == d || idx.sizes()[size_t(i)] <= x.sizes()[size_t(i)], m.op_name, ": size of index ",
                  idx.sizes(), " must not exceed self ", x.sizes(), " except at dimension ", d);
  m.add_output(sizes_by<shape::rules::gather<int64_t>>(m), x.dtype());
}

void meta_rms_norm(MetaCall& m) {
  const TensorImpl& x = need(m, 0, "input");
  IntArrayRef ns = attr_ints(m, op::rms_norm::attr::normalized_shape);
  check_floating_input(m, x);
  check_normalized(m, x, ns);
  if (m.has(1))
    TESSERA_CHECK(m.t(1).sizes() == ns, m.op_name, ": weight must have shape ", ns, ", got ", m.t(1).sizes());
  DType r = float_of(x.dtype());
  m.compute_dtype = r;
  m.cast_mask = 0b11;
  m.add_output(x.sizes(), r);
}


// The tensors of a fused optimizer step, named in order, the parameter first: one floating dtype
// and one shape (a parameter's gradient and optimizer state have its shape).
void check_optimizer_tensors(const MetaCall& m, std::initializer_list<const char*> names) {
  const TensorImpl& p = need(m, 0, *names.begin());
  TESSERA_CHECK(is_floating(p.dtype()), m.op_name, ": the parameter must be a floating tensor, got ", p.dtype());
  int i = 0;
  for (const char* name : names) {
    const TensorImpl& t = need(m, i, name);
    check_same_dtype(m, p, t, "self", name);
    TESSERA_CHECK(t.sizes() == p.sizes(), m.op_name, ": ", name, " has shape ", t.sizes(), " but self has ",
                  p.sizes(), "; a parameter's gradient and optimizer state have its shape");
    // The kernels read and write them as separate arrays in one pass.
    int j = 0;
    for (const char* other : names) {
      const bool shared = j < i && t.numel() > 0 && t.storage() && t.storage().get() == m.t(j).storage().get();
      TESSERA_CHECK(!shared, m.op_name, ": ", other, " and ", name,
                    " share memory; each of the parameter, its gradient and its state needs its own tensor");
      ++j;
    }
    ++i;
  }
}

// Adam's bias corrections, attributes of the op A (_fused_adam_ or _multi_tensor_adam_).
template <typename A>
void check_bias_corrections(const MetaCall& m) {
  for (int a : {int(A::bias_correction1), int(A::bias_correction2)}) {
    const double bc = attr_double(m, a);
    TESSERA_CHECK(bc > 0 && bc <= 1, m.op_name, ": bias corrections are 1 - beta^t, in (0, 1]; got ", bc);
  }
}

// _fused_adam_ (Note [Fused optimizer step] in nn.h): the parameter, its two moments and its gradient
// have one floating dtype and one shape; the step writes the first three in place.
void meta_fused_adam_(MetaCall& m) {
  check_optimizer_tensors(m, {"self", "exp_avg", "exp_avg_sq", "grad"});
  check_bias_corrections<op::_fused_adam_::attr>(m);
  m.alias_output(0);
  m.alias_output(1);
  m.alias_output(2);
}


// _fused_sgd_: the parameter, its momentum buffer and its gradient have one floating dtype and one
// shape; the step writes the first two in place.
void meta_fused_sgd_(MetaCall& m) {
  check_optimizer_tensors(m, {"self", "momentum_buffer", "grad"});
  m.alias_output(0);
  m.alias_output(1);
}

namespace {
// The list of a multi-tensor optimizer step (Note [Fused optimizer step] in nn.h): `roles` blocks of
// n tensors each (params, then each state, then grads); tensor i of every block has the shape of
// param i, and all have param 0's floating dtype and device. The kernels update the blocks in one
// pass each, in parallel across tensors, so no two tensors of the list may share memory.
void check_multi_tensor_list(const MetaCall& m, std::initializer_list<const char*> roles) {
  const int64_t k = int64_t(roles.size());
  TESSERA_CHECK(m.list_size > 0 && m.list_size % k == 0, m.op_name, ": tensors holds ", k,
                " blocks of one tensor per parameter (", [&] {
                  std::string s;
                  for (const char* r : roles) s += (s.empty() ? "" : ", ") + std::string(r);
                  return s;
                }(), "), so its length must be a positive multiple of ", k, "; got ", m.list_size);
  const int64_t n = m.list_size / k;
  const TensorImpl* const* t = m.tensors + m.list_begin;
  const TensorImpl& first = *t[0];
  TESSERA_CHECK(is_floating(first.dtype()), m.op_name, ": parameters must be floating tensors, got ", first.dtype());
  // No two tensors may share a memory location (the kernels update them in parallel): tensors on
  // different storages never do, which an open-addressing table of the storages finds in
  // microseconds for a model's thousands of tensors (a sort or a node-based map would cost as much
  // as the step itself); the few that share one (parameters carved from one buffer) have their
  // element ranges compared.
  size_t cap = 16;
  while (cap < size_t(m.list_size) * 2) cap *= 2;
  std::vector<std::pair<const void*, int64_t>> owner(cap, {nullptr, -1});
  std::vector<std::pair<int64_t, int64_t>> same_storage;  // (list index, the index that claimed it)
  auto claim = [&](const void* storage, int64_t at) {
    const size_t h = size_t((reinterpret_cast<uintptr_t>(storage) >> 4) * 0x9E3779B97F4A7C15ull);
    for (size_t i = h >> 20 & (cap - 1);; i = (i + 1) & (cap - 1)) {
      if (owner[i].first == nullptr) {
        owner[i] = {storage, at};
        return;
      }
      if (owner[i].first == storage) {
        same_storage.emplace_back(at, owner[i].second);
        return;
      }
    }
  };
  int64_t r = 0;
  for (const char* role : roles) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = r * n + i;
      TESSERA_CHECK(t[at] != nullptr, m.op_name, ": ", role, " ", i, " is undefined");
      const TensorImpl& x = *t[at];
      TESSERA_CHECK(x.dtype() == first.dtype() && x.device() == first.device(), m.op_name, ": ", role, " ", i,
                    " is ", x.dtype(), " on ", x.device(), " but parameter 0 is ", first.dtype(), " on ",
                    first.device(), "; one call takes one dtype on one device (group the parameters)");
      TESSERA_CHECK(x.sizes() == t[i]->sizes(), m.op_name, ": ", role, " ", i, " has shape ", x.sizes(),
                    " but parameter ", i, " has ", t[i]->sizes(), "; a parameter's gradient and state have its shape");
      if (x.numel() > 0 && x.storage()) claim(x.storage().get(), at);
    }
    ++r;
  }
  if (same_storage.empty()) return;
  // The element span [offset, offset + extent) of each tensor on a shared storage; two that meet
  // may overlap (exact for contiguous tensors, conservative for strided ones).
  std::vector<std::pair<std::pair<const void*, int64_t>, std::pair<int64_t, int64_t>>> spans;  // ((storage, lo), (hi, index))
  std::vector<bool> listed(size_t(m.list_size), false);
  for (auto [a, b] : same_storage)
    for (int64_t at : {a, b}) {
      if (listed[size_t(at)]) continue;
      listed[size_t(at)] = true;
      const TensorImpl& x = *t[at];
      int64_t extent = 1;
      for (int64_t d = 0; d < x.dim(); ++d) extent += (x.sizes()[size_t(d)] - 1) * std::abs(x.strides()[size_t(d)]);
      spans.push_back({{x.storage().get(), x.storage_offset()}, {x.storage_offset() + extent, at}});
    }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1, reach = 0; i < spans.size(); ++i) {  // reach: the span ending last so far
    if (spans[i].first.first != spans[i - 1].first.first) {
      reach = i;
      continue;
    }
    TESSERA_CHECK(spans[i].first.second >= spans[reach].second.first, m.op_name, ": tensors ",
                  spans[reach].second.second, " and ", spans[i].second.second,
                  " share memory; every parameter, gradient and state tensor of the list needs memory of its own");
    if (spans[i].second.first > spans[reach].second.first) reach = i;
  }
}
}  // namespace

// _multi_tensor_adam_: _fused_adam_ over a list of parameters [params, exp_avgs, exp_avg_sqs, grads].
void meta_multi_tensor_adam_(MetaCall& m) {
  check_multi_tensor_list(m, {"param", "exp_avg", "exp_avg_sq", "grad"});
  check_bias_corrections<op::_multi_tensor_adam_::attr>(m);
}

// _multi_tensor_sgd_: _fused_sgd_ over a list [params, momentum_buffers, grads].
void meta_multi_tensor_sgd_(MetaCall& m) { check_multi_tensor_list(m, {"param", "momentum_buffer", "grad"}); }

}  // namespace tessera::meta
