// Attention (and the attention family of newer opsets): decomposed at import onto the contract's
// scaled_dot_product_attention, matmul and softmax.
#include <cmath>

#include "convert.h"

namespace tessera::onnx::detail {

namespace {

// Attention (opset 23): 4-D [batch, heads, seq, head_dim] or 3-D [batch, seq, heads*head_dim]
// inputs; grouped key/value heads repeated; no past state, softcap or qk output.
Tensor heads_4d(NodeCtx& c, const Tensor& t, int64_t heads, const char* which) {
  if (t.dim() == 4) return t;
  if (t.dim() != 3) c.fail(std::string(which) + " must be 3-D or 4-D");
  if (heads <= 0) c.fail(std::string("3-D ") + which + " needs the q_num_heads/kv_num_heads attribute");
  Sizes s = c.sizes(t);
  if (!s[2].is_constant() || s[2].constant() % heads != 0) c.fail(std::string(which) + "'s hidden size is not a multiple of the heads");
  Tensor r = reshape_to(c, t, {s[0], s[1], SymSize(heads), SymSize(s[2].constant() / heads)});
  return r.permute({0, 2, 1, 3});
}

void Attention(NodeCtx& c) {
  if (c.has(6)) c.fail("the nonpad_kv_seqlen input is not supported");
  if (c.has(4) != c.has(5)) c.fail("past_key and past_value must be given together");
  if (c.output_used(3)) c.fail("the qk_matmul_output output is not supported");
  if (c.attr_float("softcap", 0.0) != 0.0) c.fail("softcap is not supported");
  c.ignore_attrs({"softmax_precision"});
  if (c.attr_int("qk_matmul_output_mode", 0) != 0) c.fail("qk_matmul_output_mode is not supported");
  Tensor q0 = c.in(0);
  Tensor q = heads_4d(c, q0, c.attr_int("q_num_heads", 0), "Q");
  Tensor k = heads_4d(c, c.in(1), c.attr_int("kv_num_heads", 0), "K");
  Tensor v = heads_4d(c, c.in(2), c.attr_int("kv_num_heads", 0), "V");
  SymSize past(int64_t(0));
  if (c.has(4)) {  // the cache: present = past ++ new along the sequence
    Tensor pk = c.in(4), pv = c.in(5);
    if (pk.dim() != 4 || pv.dim() != 4) c.fail("past_key and past_value must be 4-D");
    past = c.sizes(pk)[2];
    k = tessera::cat({pk, k}, 2);
    v = tessera::cat({pv, v}, 2);
  }
  c.out(1, k);
  c.out(2, v);
  const SymSize hq = c.sizes(q)[1], hk = c.sizes(k)[1];
  if (!hq.same_as(hk)) {
    if (!hq.is_constant() || !hk.is_constant() || hq.constant() % hk.constant() != 0) c.fail("query heads are not a multiple of key/value heads");
    std::vector<int64_t> idx;
    for (int64_t h = 0; h < hq.constant(); ++h) idx.push_back(h / (hq.constant() / hk.constant()));
    Tensor ci = host_tensor(idx, {int64_t(idx.size())}, kInt64);
    k = tessera::index_select(k, 1, ci);
    v = tessera::index_select(v, 1, ci);
  }
  std::optional<Tensor> mask = c.opt(3);
  bool causal = c.attr_int("is_causal", 0) != 0;
  if (causal && (mask || !past.same_as(SymSize(int64_t(0))))) {
    // Causal with a cache or a mask: query i sees keys j <= i + past (bottom-right aligned), as an
    // explicit mask combined with the given one.
    const SymSize ql = c.sizes(q)[2], kl = c.sizes(k)[2];
    if (!ql.is_constant() || !kl.is_constant() || !past.is_constant())
      c.fail("is_causal with a mask or a cache needs static sequence lengths");
    c.check_elements(ql.constant() * kl.constant(), "the causal mask");
    std::vector<int64_t> allowed;
    for (int64_t i = 0; i < ql.constant(); ++i)
      for (int64_t j = 0; j < kl.constant(); ++j) allowed.push_back(j <= i + past.constant() ? 1 : 0);
    Tensor a = host_tensor(allowed, {ql.constant(), kl.constant()}, kBool);
    if (!mask) mask = a;
    else if (mask->dtype() == kBool) mask = tessera::logical_and(*mask, a);
    else mask = tessera::add(*mask, tessera::where(a, host_scalar(0, mask->dtype()), host_scalar(-INFINITY, mask->dtype())));
    causal = false;
  }
  std::optional<double> scale;
  if (c.has_attr("scale")) scale = c.attr_float("scale", 1.0);
  Tensor y = tessera::scaled_dot_product_attention(q, k, v, mask, causal, scale);
  if (q0.dim() == 3) {
    Sizes s = c.sizes(y);  // [b, h, s, d] -> [b, s, h*d]
    y = reshape_to(c, y.permute({0, 2, 1, 3}), {s[0], s[2], s[1] * s[3]});
  }
  c.out(0, y);
}

}  // namespace

void add_attention_converters(ConverterTable& t) {
  t["Attention"] = Attention;
}

}  // namespace tessera::onnx::detail
