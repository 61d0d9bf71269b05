// Attention (and the attention family of newer opsets): decomposed at import onto the contract's
// scaled_dot_product_attention, matmul and softmax; RotaryEmbedding onto slices and elementwise ops.
#include <cmath>

#include "convert.h"

namespace tessera::onnx::detail {

namespace {

// [batch, heads, seq, head_dim] from a 4-D input as is, or from a 3-D [batch, seq, heads*head_dim].
Tensor heads_4d(NodeCtx& c, const Tensor& t, int64_t heads, const char* which) {
  if (t.dim() == 4) return t;
  if (t.dim() != 3) c.fail(std::string(which) + " must be 3-D or 4-D");
  if (heads <= 0) c.fail(std::string("3-D ") + which + " needs the q_num_heads/kv_num_heads attribute");
  Sizes s = c.sizes(t);
  if (!s[2].is_constant() || s[2].constant() % heads != 0)
    c.fail(std::string(which) + "'s hidden size is not a multiple of the heads");
  Tensor r = reshape_to(c, t, {s[0], s[1], SymSize(heads), SymSize(s[2].constant() / heads)});
  return r.permute({0, 2, 1, 3});
}

// The positions 0..n-1 along dim `d` of `t`, int64 [n]: a constant when n is static, else made at
// run time from t (summed over the other dims, all true, cumulated), so n stays dynamic.
Tensor positions(const NodeCtx& c, const Tensor& t, int64_t d) {
  const SymSize n = c.sizes(t)[size_t(d)];
  if (n.is_constant()) {
    c.check_elements(n.constant(), "an attention mask's positions");
    std::vector<int64_t> v(size_t(n.constant()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(i);
    return host_tensor(v, {n.constant()}, kInt64);
  }
  std::vector<int64_t> others;
  for (int64_t k = 0; k < t.dim(); ++k)
    if (k != d) others.push_back(k);
  Tensor s = others.empty() ? t : tessera::sum(t, others, false);
  Tensor all = tessera::logical_or(tessera::eq(s, s), tessera::ne(s, s));  // true even for NaN
  return tessera::sub(tessera::cumsum(all, 0, kInt64), host_scalar(1, kInt64));
}

// The length of dim `d` of `t` as an int64 scalar tensor (made at run time when it is dynamic).
Tensor length_of(const NodeCtx& c, const Tensor& t, int64_t d) {
  const SymSize n = c.sizes(t)[size_t(d)];
  if (n.is_constant()) return host_scalar(double(n.constant()), kInt64);
  return tessera::add(tessera::amax(positions(c, t, d), {0}, false), host_scalar(1, kInt64));
}

Tensor and_mask(const std::optional<Tensor>& a, const Tensor& b) {
  return a ? tessera::logical_and(*a, b) : b;
}

// The keys each query may attend under is_causal and the windows, and the keys below
// nonpad_kv_seqlen: a query at absolute position p = offset + i sees key j iff d = p - j satisfies
// d >= 0 (causal), d <= left, -d <= right. The offset is the past length (input 4), or per batch
// nonpad_kv_seqlen - q_len (input 6), else 0. Broadcasts to [batch, heads, q, kv]; sizes may be dynamic.
Tensor causal_window_mask(const NodeCtx& c, const Tensor& q, const Tensor& k, bool causal, int64_t left,
                          int64_t right) {
  const SymSize one(int64_t(1));
  const Sizes qs = c.sizes(q), ks = c.sizes(k);
  Tensor i = reshape_to(c, positions(c, q, 2), {qs[2], one});
  Tensor j = reshape_to(c, positions(c, k, 2), {one, ks[2]});
  std::optional<Tensor> n4;  // nonpad_kv_seqlen as [batch, 1, 1, 1]
  Tensor p;                  // the queries' absolute positions
  if (c.has(6)) {
    Tensor n = c.in(6);
    if (n.dim() != 1 || n.dtype() != kInt64) c.fail("nonpad_kv_seqlen must be a 1-D int64 tensor");
    n4 = reshape_to(c, n, {c.sizes(n)[0], one, one, one});
    p = tessera::add(tessera::sub(i, length_of(c, q, 2)), *n4);
  } else {
    p = c.has(4) ? tessera::add(i, length_of(c, c.in(4), 2)) : i;
  }
  Tensor d = tessera::sub(p, j);
  std::optional<Tensor> a;
  if (causal) a = tessera::ge(d, host_scalar(0, kInt64));
  if (left >= 0) a = and_mask(a, tessera::le(d, host_scalar(double(left), kInt64)));
  if (right >= 0) a = and_mask(a, tessera::ge(d, host_scalar(-double(right), kInt64)));
  if (n4) a = and_mask(a, tessera::lt(j, *n4));
  TESSERA_INTERNAL_ASSERT(a.has_value());
  return *a;
}

// Attention (opsets 23-25): 4-D or 3-D inputs; grouped key/value heads repeated; past key/value
// concatenated into present_key/value. The masks (attn_mask, is_causal, the windows,
// nonpad_kv_seqlen) become one mask; the fused scaled_dot_product_attention takes it unless softcap,
// the qk_matmul_output output or softmax_precision need the scores spelled out.
//
// Note [Attention decomposed]
// As ONNX's reference: scores = (Q*sqrt(scale)) (K*sqrt(scale))^T, softcap*tanh(scores/softcap),
// plus the bias (a float attn_mask, -inf where a key is not allowed), softmax (in softmax_precision),
// then the rows whose bias is -inf everywhere (no key allowed) set to 0 (not the NaN of a softmax
// over -inf), and P V. qk_matmul_output is the scores before softcap (mode 0), after it (1), with
// the bias (2), or P (3), in Q's dtype.
void Attention(NodeCtx& c) {
  if (c.has(4) != c.has(5)) c.fail("past_key and past_value must be given together");
  if (c.has(6) && c.has(4)) c.fail("nonpad_kv_seqlen cannot be combined with past_key/past_value");
  const double softcap = c.attr_float("softcap", 0.0);
  if (!(softcap >= 0)) c.fail("softcap must be >= 0, got " + std::to_string(softcap));
  const int64_t mode = c.attr_int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) c.fail("qk_matmul_output_mode must be 0..3, got " + std::to_string(mode));
  const int64_t left = c.attr_int("left_window_size", -1), right = c.attr_int("right_window_size", -1);
  if (left < -1 || right < -1) c.fail("left_window_size/right_window_size must be -1 or >= 0");
  std::optional<DType> precision;
  if (c.has_attr("softmax_precision")) {
    precision = dtype_of_onnx(int32_t(c.attr_int("softmax_precision", 1)));
    if (!precision || !is_floating(*precision))
      c.fail("softmax_precision must be a floating type (1, 10, 11 or 16)");
  }
  Tensor q0 = c.in(0);
  Tensor q = heads_4d(c, q0, c.attr_int("q_num_heads", 0), "Q");
  Tensor k = heads_4d(c, c.in(1), c.attr_int("kv_num_heads", 0), "K");
  Tensor v = heads_4d(c, c.in(2), c.attr_int("kv_num_heads", 0), "V");
  if (!is_floating(q.dtype())) c.fail("Q must be a floating tensor");
  if (c.has(4)) {  // the cache: present = past ++ new along the sequence
    Tensor pk = c.in(4), pv = c.in(5);
    if (pk.dim() != 4 || pv.dim() != 4) c.fail("past_key and past_value must be 4-D");
    k = tessera::cat({pk, k}, 2);
    v = tessera::cat({pv, v}, 2);
  }
  c.out(1, k);
  c.out(2, v);
  const SymSize hq = c.sizes(q)[1], hk = c.sizes(k)[1];
  if (!hq.same_as(hk)) {
    if (!hq.is_constant() || !hk.is_constant() || hk.constant() <= 0 || hq.constant() % hk.constant() != 0)
      c.fail("query heads (" + hq.str() + ") are not a multiple of key/value heads (" + hk.str() + ")");
    std::vector<int64_t> idx;
    for (int64_t h = 0; h < hq.constant(); ++h) idx.push_back(h / (hq.constant() / hk.constant()));
    Tensor ci = host_tensor(idx, {int64_t(idx.size())}, kInt64);
    k = tessera::index_select(k, 1, ci);
    v = tessera::index_select(v, 1, ci);
  }
  const SymSize ql = c.sizes(q)[2], kl = c.sizes(k)[2];

  // The masks: `allowed` (bool, the keys a query may attend) and `additive` (a float attn_mask).
  std::optional<Tensor> allowed, additive;
  if (std::optional<Tensor> m = c.opt(3)) {
    if (m->dim() < 1) c.fail("attn_mask must have rank >= 1");
    const SymSize ml = c.sizes(*m).back();
    if (!ml.same_as(kl)) {  // shorter than the keys: padded with "not allowed"
      if (!ml.is_constant() || !kl.is_constant())
        c.fail("attn_mask's last dim " + ml.str() + " differs from the key length " + kl.str() +
               " and one is dynamic");
      if (ml.constant() > kl.constant())
        c.fail("attn_mask's last dim " + ml.str() + " is longer than the key length " + kl.str());
      const bool b = m->dtype() == kBool;
      Tensor mm = b ? m->to(kUInt8) : *m;
      mm = tessera::pad(mm, {0, kl.constant() - ml.constant()}, "constant", b ? 0.0 : -INFINITY);
      *m = b ? mm.to(kBool) : mm;
    }
    if (m->dtype() == kBool)
      allowed = *m;
    else if (is_floating(m->dtype()))
      additive = *m;
    else
      c.fail("attn_mask must be bool or floating");
  }
  const bool causal = c.attr_int("is_causal", 0) != 0;
  const bool window = left >= 0 || right >= 0;
  bool fused_causal = false;  // the plain causal case: the fused op's own is_causal (offset 0)
  if (causal && !allowed && !additive && !window && !c.has(4) && !c.has(6))
    fused_causal = true;
  else if (causal || window || c.has(6))
    allowed = and_mask(allowed, causal_window_mask(c, q, k, causal, left, right));
  const bool decompose = softcap > 0 || c.output_used(3) || (precision && *precision != q.dtype()) ||
                         (additive && additive->dtype() != q.dtype());
  if (!decompose) {
    std::optional<Tensor> mask = allowed;
    if (additive)
      mask = allowed ? tessera::add(*additive, tessera::where(*allowed, host_scalar(0, q.dtype()),
                                                              host_scalar(-INFINITY, q.dtype())))
                     : *additive;
    std::optional<double> scale;
    if (c.has_attr("scale")) scale = c.attr_float("scale", 1.0);
    Tensor y = tessera::scaled_dot_product_attention(q, k, v, mask, fused_causal, scale);
    if (q0.dim() == 3) {
      Sizes s = c.sizes(y);  // [b, h, s, d] -> [b, s, h*d]
      y = reshape_to(c, y.permute({0, 2, 1, 3}), {s[0], s[2], s[1] * s[3]});
    }
    return c.out(0, y);
  }

  // Note [Attention decomposed]
  if (fused_causal) allowed = causal_window_mask(c, q, k, true, -1, -1);
  double scale = 0;
  if (c.has_attr("scale"))
    scale = c.attr_float("scale", 1.0);
  else {
    const SymSize d = c.sizes(q)[3];
    if (!d.is_constant() || d.constant() <= 0)
      c.fail("the default scale needs a static head size, got " + d.str());
    scale = 1.0 / std::sqrt(double(d.constant()));
  }
  const DType dt = q.dtype();
  Tensor scores;
  if (scale >= 0) {
    Tensor s = host_scalar(std::sqrt(scale), dt);
    scores = tessera::matmul(tessera::mul(q, s), tessera::mul(k, s).transpose(-2, -1));
  } else {
    scores = tessera::matmul(tessera::mul(q, host_scalar(scale, dt)), k.transpose(-2, -1));
  }
  std::optional<Tensor> qk;
  if (mode == 0) qk = scores;
  if (softcap > 0) {
    Tensor cap = host_scalar(softcap, dt);
    scores = tessera::mul(tessera::tanh(tessera::div(scores, cap)), cap);
  }
  if (mode == 1) qk = scores;
  std::optional<Tensor> bias = additive;
  if (allowed) {
    Tensor b = tessera::where(*allowed, host_scalar(0, dt), host_scalar(-INFINITY, dt));
    bias = bias ? tessera::add(*bias, b) : b;
  }
  if (bias) scores = tessera::add(scores, *bias);
  if (mode == 2) qk = scores;
  if (precision) scores = scores.to(*precision);
  Tensor p = tessera::softmax(scores, -1);
  if (bias) {  // a row that allows no key: 0, not NaN
    Tensor none = tessera::eq(tessera::amax(*bias, {-1}, true), host_scalar(-INFINITY, bias->dtype()));
    p = tessera::where(none, host_scalar(0, p.dtype()), p);
  }
  if (mode == 3) qk = p;
  p = p.to(dt);
  Tensor y = tessera::matmul(p, v);
  if (q0.dim() == 3) {
    Sizes s = c.sizes(y);  // [b, h, s, d] -> [b, s, h*d]
    y = reshape_to(c, y.permute({0, 2, 1, 3}), {s[0], s[2], s[1] * s[3]});
  }
  c.out(0, y);
  if (qk) c.out(3, qk->to(dt));
}

// x[..., start:end:step] of a 4-D x.
Tensor slice_last(const NodeCtx& c, const Tensor& x, int64_t start, int64_t end, int64_t step = 1) {
  return call_op(c, "slice_copy.Tensor", {x, int64_t(3), start, end, step});
}

// RotaryEmbedding (opset 23): X 4-D [batch, heads, seq, head] or 3-D [batch, seq, heads*head] with
// num_heads; the first rotary_embedding_dim (default all) features of each head rotated by the
// cos/sin caches (rows picked by position_ids when given), in halves or interleaved pairs.
void RotaryEmbedding(NodeCtx& c) {
  Tensor x0 = c.in(0);
  const int64_t heads = c.attr_int("num_heads", 0);
  const bool interleaved = c.attr_int("interleaved", 0) != 0;
  int64_t rd = c.attr_int("rotary_embedding_dim", 0);
  Tensor x;  // [batch, seq, heads, head]
  const Sizes xs = c.sizes(x0);
  if (x0.dim() == 4) {
    x = x0.permute({0, 2, 1, 3});
  } else if (x0.dim() == 3) {
    if (heads <= 0) c.fail("a 3-D input needs the num_heads attribute");
    if (!xs[2].is_constant() || xs[2].constant() % heads != 0)
      c.fail("the hidden size " + xs[2].str() + " is not a multiple of num_heads");
    x = reshape_to(c, x0, {xs[0], xs[1], SymSize(heads), SymSize(xs[2].constant() / heads)});
  } else {
    c.fail("the input must be 3-D or 4-D");
  }
  const Sizes s = c.sizes(x);
  if (!s[3].is_constant()) c.fail("the head size " + s[3].str() + " must be static");
  const int64_t hd = s[3].constant();
  if (rd == 0) rd = hd;
  if (rd < 0 || rd > hd || rd % 2 != 0)
    c.fail("rotary_embedding_dim " + std::to_string(rd) + " must be even and at most the head size " +
           std::to_string(hd));
  const int64_t half = rd / 2;
  Tensor cs = c.in(1), sn = c.in(2);
  if (c.has(3)) {  // rows of the caches [max_position, half] at position_ids [batch, seq]
    Tensor pos = c.in(3);
    if (pos.dim() != 2 || cs.dim() != 2 || sn.dim() != 2)
      c.fail("with position_ids, position_ids must be 2-D and the caches 2-D");
    if (pos.dtype() != kInt64) pos = pos.to(kInt64);
    cs = tessera::embedding(cs, pos);
    sn = tessera::embedding(sn, pos);
  } else if (cs.dim() != 3 || sn.dim() != 3) {
    c.fail("without position_ids the caches must be 3-D [batch, seq, rotary_dim/2]");
  }
  for (const Tensor* t : {&cs, &sn}) {
    const SymSize last = c.sizes(*t).back();
    if (!last.is_constant() || last.constant() != half)
      c.fail("the caches' last dim " + last.str() +
             " must be rotary_embedding_dim/2 = " + std::to_string(half));
  }
  cs = cs.unsqueeze(2);  // [batch, seq, 1, half]
  sn = sn.unsqueeze(2);
  Tensor x1 = interleaved ? slice_last(c, x, 0, rd, 2) : slice_last(c, x, 0, half);
  Tensor x2 = interleaved ? slice_last(c, x, 1, rd, 2) : slice_last(c, x, half, rd);
  Tensor real = tessera::sub(tessera::mul(cs, x1), tessera::mul(sn, x2));
  Tensor imag = tessera::add(tessera::mul(sn, x1), tessera::mul(cs, x2));
  Tensor rot = interleaved ? reshape_to(c, tessera::stack({real, imag}, 4), {s[0], s[1], s[2], SymSize(rd)})
                           : tessera::cat({real, imag}, 3);
  Tensor y = rd < hd ? tessera::cat({rot, slice_last(c, x, rd, hd)}, 3) : rot;
  y = x0.dim() == 4 ? y.permute({0, 2, 1, 3}) : reshape_to(c, y, xs);
  c.out(0, y);
}

}  // namespace

void add_attention_converters(ConverterTable& t) {
  t["Attention"] = Attention;
  t["RotaryEmbedding"] = RotaryEmbedding;
}

}  // namespace tessera::onnx::detail
