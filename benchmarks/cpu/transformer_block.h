// The pre-norm transformer block the block benchmarks time (seq 512, d_model 512, 8 heads, MLP
// 2048, causal attention): its weights and its forward pass through the public API. Shared by
// bench_cpu_block (eager, against PyTorch) and bench_compiled_block (tessera::compile against
// eager and torch.compile) so that both time the same block.
#pragma once

#include <cmath>
#include <optional>

#include "tessera/tessera.h"

namespace tessera::bench {

constexpr int64_t kBlockSeq = 512, kBlockModel = 512, kBlockHeads = 8, kBlockMlp = 2048;

// `t` converted to `dt` through copy_ (a casting copy into a fresh tensor).
inline Tensor cast_to(const Tensor& t, DType dt) {
  if (t.dtype() == dt) return t;
  Tensor out = empty(t.sizes(), dt);
  out.copy_(t);
  return out;
}

struct BlockWeights {
  Tensor ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;
};

// Random weights in `dt`: projections scaled by 1/sqrt(in_features), biases and layer_norm
// offsets about 0.1.
inline BlockWeights make_block_weights(DType dt) {
  auto weight = [&](int64_t out, int64_t in) { return cast_to(randn({out, in}) * (1.0 / std::sqrt(double(in))), dt); };
  auto vec = [&](int64_t n, double scale) { return cast_to(randn({n}) * scale, dt); };
  BlockWeights w;
  w.ln1_w = cast_to(ones({kBlockModel}) + randn({kBlockModel}) * 0.1, dt);
  w.ln1_b = vec(kBlockModel, 0.1);
  w.wq = weight(kBlockModel, kBlockModel), w.bq = vec(kBlockModel, 0.1);
  w.wk = weight(kBlockModel, kBlockModel), w.bk = vec(kBlockModel, 0.1);
  w.wv = weight(kBlockModel, kBlockModel), w.bv = vec(kBlockModel, 0.1);
  w.wo = weight(kBlockModel, kBlockModel), w.bo = vec(kBlockModel, 0.1);
  w.ln2_w = cast_to(ones({kBlockModel}) + randn({kBlockModel}) * 0.1, dt);
  w.ln2_b = vec(kBlockModel, 0.1);
  w.w1 = weight(kBlockMlp, kBlockModel), w.b1 = vec(kBlockMlp, 0.1);
  w.w2 = weight(kBlockModel, kBlockMlp), w.b2 = vec(kBlockModel, 0.1);
  return w;
}

// x [1, L, d_model] -> [1, L, d_model].
inline Tensor transformer_block(const BlockWeights& w, const Tensor& x) {
  const int64_t l = x.size(1), dh = kBlockModel / kBlockHeads;
  Tensor h = layer_norm(x, {kBlockModel}, w.ln1_w, w.ln1_b);
  Tensor q = linear(h, w.wq, w.bq).view({1, l, kBlockHeads, dh}).transpose(1, 2);
  Tensor k = linear(h, w.wk, w.bk).view({1, l, kBlockHeads, dh}).transpose(1, 2);
  Tensor v = linear(h, w.wv, w.bv).view({1, l, kBlockHeads, dh}).transpose(1, 2);
  Tensor a = scaled_dot_product_attention(q, k, v, std::nullopt, /*is_causal=*/true);
  a = a.transpose(1, 2).reshape({1, l, kBlockModel});
  Tensor x1 = x + linear(a, w.wo, w.bo);
  Tensor h2 = layer_norm(x1, {kBlockModel}, w.ln2_w, w.ln2_b);
  return x1 + linear(gelu(linear(h2, w.w1, w.b1)), w.w2, w.b2);
}

}  // namespace tessera::bench
