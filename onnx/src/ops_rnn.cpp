// Recurrent ops (RNN, GRU, LSTM), unrolled over the sequence at import onto linear, slices and
// elementwise ops. Note [Unrolled recurrences].
#include <algorithm>
#include <cctype>
#include <cmath>

#include "convert.h"

namespace tessera::onnx::detail {

namespace {

// Note [Unrolled recurrences]
// The contract has no loop, so a recurrence becomes one small graph per time step: the input
// projection of every step is one linear over the whole sequence; each step adds its hidden state
// times R^T and applies the gates. The sequence length must be static (it sets the number of
// steps); batch may be dynamic. A missing initial state is zero, and the first step leaves its
// terms out rather than multiplying by a tensor of zeros. sequence_lens is taken only when every
// entry is the full length (variable lengths would need masking per batch entry). clip bounds the
// inputs of the gates' activations; LSTM's h(C) takes the cell unclipped, as ONNX Runtime does.

// The most time steps (times directions) a node may unroll into.
constexpr int64_t kMaxSteps = int64_t(1) << 14;

struct Activation {
  std::string name;  // lower case
  double alpha = 0, beta = 0;
};

// The activations of a node, one list per direction. `dflt` names the op's functions (f, g, h).
std::vector<std::vector<Activation>> activations(NodeCtx& c, const std::vector<std::string>& dflt, int64_t dirs) {
  const size_t n = dflt.size();
  std::vector<std::string> names;
  if (c.has_attr("activations")) {
    for (const auto& a : c.node().attribute()) {
      if (a.name() != "activations") continue;
      if (a.type() != ::onnx::AttributeProto::STRINGS) c.fail("attribute 'activations' must be a list of strings");
      names.assign(a.strings().begin(), a.strings().end());
    }
    c.ignore_attrs({"activations"});
  }
  if (names.empty()) names = dflt;
  if (names.size() == n && dirs == 2) {  // one list for both directions
    const std::vector<std::string> one = names;
    names.insert(names.end(), one.begin(), one.end());
  }
  if (names.size() != n * size_t(dirs))
    c.fail("activations has " + std::to_string(names.size()) + " entries; expected " + std::to_string(n * size_t(dirs)) +
           " (" + std::to_string(n) + " per direction)");
  const std::vector<double> alphas = c.attr_floats("activation_alpha"), betas = c.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;  // alpha and beta are consumed in order by the functions that take them
  std::vector<std::vector<Activation>> out(static_cast<size_t>(dirs));
  for (size_t k = 0; k < names.size(); ++k) {
    Activation a;
    a.name = names[k];
    std::transform(a.name.begin(), a.name.end(), a.name.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    double da = 0, db = 0;
    bool takes_alpha = true, takes_beta = false;
    bool must_give = false;  // ONNX's defaults (Affine 1, 0; ThresholdedRelu 1; ScaledTanh none) vs ONNX Runtime's 0
    if (a.name == "affine" || a.name == "scaledtanh") must_give = takes_beta = true;
    else if (a.name == "thresholdedrelu") must_give = true;
    else if (a.name == "leakyrelu") da = 0.01;
    else if (a.name == "hardsigmoid") { da = 0.2; db = 0.5; takes_beta = true; }
    else if (a.name == "elu") da = 1;
    else if (a.name == "relu" || a.name == "tanh" || a.name == "sigmoid" || a.name == "softsign" || a.name == "softplus")
      takes_alpha = false;
    else
      c.fail("activation '" + names[k] + "' is not supported (Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, "
             "ScaledTanh, HardSigmoid, Elu, Softsign, Softplus are)");
    if (must_give && (ai >= alphas.size() || (takes_beta && bi >= betas.size())))
      c.fail("activation " + names[k] + " needs its activation_alpha" + (takes_beta ? " and activation_beta" : "") +
             " given: it has no default that ONNX and ONNX Runtime agree on");
    a.alpha = takes_alpha && ai < alphas.size() ? alphas[ai++] : da;
    a.beta = takes_beta && bi < betas.size() ? betas[bi++] : db;
    out[k / n].push_back(a);
  }
  return out;
}

Tensor scalar_like(double v, const Tensor& x) { return host_scalar(v, x.dtype()); }

Tensor apply(const Activation& a, const Tensor& x, std::optional<double> clip) {
  Tensor v = clip ? tessera::clamp(x, Scalar(-*clip), Scalar(*clip)) : x;
  const std::string& n = a.name;
  if (n == "tanh") return tessera::tanh(v);
  if (n == "sigmoid") return tessera::sigmoid(v);
  if (n == "relu") return tessera::relu(v);
  if (n == "affine") return tessera::add(tessera::mul(v, scalar_like(a.alpha, v)), scalar_like(a.beta, v));
  if (n == "leakyrelu") return tessera::leaky_relu(v, Scalar(a.alpha));
  if (n == "thresholdedrelu") return tessera::where(tessera::gt(v, scalar_like(a.alpha, v)), v, scalar_like(0, v));
  if (n == "scaledtanh")
    return tessera::mul(tessera::tanh(tessera::mul(v, scalar_like(a.beta, v))), scalar_like(a.alpha, v));
  if (n == "hardsigmoid") {
    Tensor y = tessera::add(tessera::mul(v, scalar_like(a.alpha, v)), scalar_like(a.beta, v));
    return tessera::clamp(y, Scalar(0.0), Scalar(1.0));
  }
  if (n == "elu") return tessera::elu(v, Scalar(a.alpha));
  if (n == "softsign") return tessera::softsign(v);
  TESSERA_INTERNAL_ASSERT(n == "softplus");
  // log(exp(x) + 1) as relu(x) + log1p(exp(-|x|)): no overflow for large |x|
  return tessera::add(tessera::relu(v), tessera::log1p(tessera::exp(tessera::neg(tessera::abs(v)))));
}

// a + b where either may be absent (a missing state's term).
Tensor add_opt(const Tensor& a, const std::optional<Tensor>& b) { return b ? tessera::add(a, *b) : a; }

// Columns [k * h, (k + 1) * h) of a [batch, G * h] tensor, or entries of a [G * h] vector.
Tensor part(const Tensor& t, int64_t k, int64_t h) { return tessera::slice_copy(t, t.dim() - 1, k * h, (k + 1) * h); }

// What every recurrent node shares: the sequence as [seq, batch, input], its sizes, the directions
// and clip (the inputs checked against them).
struct Recurrence {
  int64_t dirs = 1, hidden = 0, steps = 0;
  bool reverse_only = false, batch_first = false;
  SymSize batch;
  Tensor x;  // [seq, batch, input]
  std::optional<double> clip;
};

Recurrence recurrence(NodeCtx& c, int64_t gates) {
  Recurrence r;
  const std::string direction = c.attr_string("direction", "forward");
  if (direction == "bidirectional") r.dirs = 2;
  else if (direction == "reverse") r.reverse_only = true;
  else if (direction != "forward") c.fail("direction '" + direction + "' is not one of forward, reverse, bidirectional");
  const int64_t layout = c.attr_int("layout", 0);
  if (layout != 0 && layout != 1) c.fail("layout " + std::to_string(layout) + " is not 0 or 1");
  r.batch_first = layout == 1;
  if (c.has_attr("clip")) {
    r.clip = c.attr_float("clip", 0.0);
    if (!(*r.clip > 0)) c.fail("clip must be positive");
  }
  c.ignore_attrs({"output_sequence"});  // opset 1: whether Y is made; outputs are taken by name here
  Tensor x = c.in(0), w = c.in(1), rw = c.in(2);
  if (x.dim() != 3 || w.dim() != 3 || rw.dim() != 3) c.fail("X, W and R must be 3-D");
  const Sizes ws = c.sizes(w), rs = c.sizes(rw);
  r.hidden = c.has_attr("hidden_size") ? c.attr_int("hidden_size", 0) : (rs[2].is_constant() ? rs[2].constant() : -1);
  if (r.hidden <= 0 || r.hidden > (int64_t(1) << 20))
    c.fail("hidden_size must be in [1, 2^20] (and R's last dim static when it is absent)");
  auto expect = [&](const SymSize& s, int64_t want, const char* what) {
    if (!s.is_constant() || s.constant() != want)
      c.fail(std::string(what) + " is " + s.str() + ", expected " + std::to_string(want));
  };
  expect(ws[0], r.dirs, "W's dim 0 (directions)");
  expect(rs[0], r.dirs, "R's dim 0 (directions)");
  expect(ws[1], gates * r.hidden, "W's dim 1 (gates x hidden_size)");
  expect(rs[1], gates * r.hidden, "R's dim 1 (gates x hidden_size)");
  expect(rs[2], r.hidden, "R's dim 2 (hidden_size)");
  if (r.batch_first) x = x.permute({1, 0, 2});
  const Sizes xs = c.sizes(x);
  if (!xs[0].is_constant())
    c.fail("the sequence length " + xs[0].str() + " is dynamic; the recurrence is unrolled at import and needs it static");
  r.steps = xs[0].constant();
  if (r.steps <= 0 || r.steps * r.dirs > kMaxSteps)
    c.fail("the sequence length " + std::to_string(r.steps) + " is out of [1, " + std::to_string(kMaxSteps / r.dirs) + "]");
  r.batch = xs[1];
  r.x = x;
  // B [dirs, 2 * G * hidden]; P [dirs, 3 * hidden] (LSTM).
  auto check_2d = [&](int i, int64_t width, const char* what) {
    if (!c.has(i)) return;
    Tensor t = c.in(i);
    if (t.dim() != 2) c.fail(std::string(what) + " must be 2-D [directions, " + std::to_string(width) + "]");
    const Sizes s = c.sizes(t);
    expect(s[0], r.dirs, (std::string(what) + "'s dim 0 (directions)").c_str());
    expect(s[1], width, (std::string(what) + "'s dim 1").c_str());
  };
  check_2d(3, 2 * gates * r.hidden, "B");
  if (gates == 4) check_2d(7, 3 * r.hidden, "P");
  if (c.has(4)) {
    if (!c.has_ints(4)) c.fail("sequence_lens must be known at import (bind it); run-time lengths are not supported");
    for (int64_t len : c.const_ints(4))
      if (len != r.steps)
        c.fail("sequence_lens entry " + std::to_string(len) + " differs from the sequence length " + std::to_string(r.steps) +
               "; only full-length sequences are supported");
  }
  return r;
}

// Entry d of a per-direction input ([dirs, ...] -> [...]); states given batch-first are
// [batch, dirs, hidden].
Tensor direction(NodeCtx& c, const Tensor& t, int64_t d, bool batch_first = false) {
  Tensor u = batch_first ? t.permute({1, 0, 2}) : t;
  Sizes s = c.sizes(u);
  s.erase(s.begin());
  return reshape_to(c, tessera::slice_copy(u, 0, d, d + 1), s);
}

std::optional<Tensor> initial_state(NodeCtx& c, const Recurrence& r, int i, int64_t d) {
  if (!c.has(i)) return std::nullopt;
  Tensor s = c.in(i);
  if (s.dim() != 3) c.fail("an initial state must be 3-D");
  const Sizes have = c.sizes(s);
  const size_t d0 = r.batch_first ? 1 : 0;
  if (!have[d0].same_as(SymSize(r.dirs)) || !have[1 - d0].same_as(r.batch) || !have[2].same_as(SymSize(r.hidden)))
    c.fail("an initial state must be [directions, batch, hidden_size] (batch first with layout=1)");
  return direction(c, s, d, r.batch_first);
}

// Step t of the projected sequence [seq, batch, G * hidden] as [batch, G * hidden].
Tensor step(NodeCtx& c, const Tensor& xw, int64_t t) {
  Sizes s = c.sizes(xw);
  return reshape_to(c, tessera::slice_copy(xw, 0, t, t + 1), {s[1], s[2]});
}

// The outputs: Y [seq, dirs, batch, hidden] from each direction's per-step states, and the final
// states [dirs, batch, hidden] (batch-first layouts permuted).
void outputs(NodeCtx& c, const Recurrence& r, const std::vector<std::vector<Tensor>>& ys, const std::vector<Tensor>& hs,
             const std::vector<Tensor>& cs) {
  if (c.output_used(0)) {
    std::vector<Tensor> per_dir;
    per_dir.reserve(ys.size());
    for (const auto& y : ys) per_dir.push_back(tessera::stack(y, 0));
    Tensor y = tessera::stack(per_dir, 1);
    c.out(0, r.batch_first ? y.permute({2, 0, 1, 3}) : y);
  }
  auto state = [&](const std::vector<Tensor>& v) {
    Tensor s = tessera::stack(v, 0);
    return r.batch_first ? s.permute({1, 0, 2}) : s;
  };
  if (c.output_used(1)) c.out(1, state(hs));
  if (!cs.empty() && c.output_used(2)) c.out(2, state(cs));
}

// Runs `cell(t, state)` over the steps of direction d in its order; returns the per-step states in
// sequence order.
template <typename Cell>
std::vector<Tensor> unroll(const Recurrence& r, int64_t d, Cell cell) {
  std::vector<Tensor> ys(size_t(r.steps));
  const bool backward = r.reverse_only || d == 1;
  for (int64_t k = 0; k < r.steps; ++k) {
    const int64_t t = backward ? r.steps - 1 - k : k;
    ys[size_t(t)] = cell(t);
  }
  return ys;
}

void RNN(NodeCtx& c) {
  Recurrence r = recurrence(c, 1);
  auto acts = activations(c, {"Tanh"}, r.dirs);
  std::vector<std::vector<Tensor>> ys;
  std::vector<Tensor> hs;
  for (int64_t d = 0; d < r.dirs; ++d) {
    Tensor w = direction(c, c.in(1), d), rw = direction(c, c.in(2), d);
    std::optional<Tensor> bias;
    if (c.has(3)) {
      Tensor b = direction(c, c.in(3), d);
      bias = tessera::add(part(b, 0, r.hidden), part(b, 1, r.hidden));
    }
    Tensor xw = tessera::linear(r.x, w, bias);
    std::optional<Tensor> h = initial_state(c, r, 5, d);
    ys.push_back(unroll(r, d, [&](int64_t t) {
      std::optional<Tensor> rec;
      if (h) rec = tessera::linear(*h, rw);
      h = apply(acts[size_t(d)][0], add_opt(step(c, xw, t), rec), r.clip);
      return *h;
    }));
    hs.push_back(*h);
  }
  outputs(c, r, ys, hs, {});
}

// GRU, gates z, r, h: z = f(x Wz + h Rz + b), r likewise, h~ = g(x Wh + (r * h) Rh + Wbh + Rbh)
// (or g(x Wh + Wbh + r * (h Rh + Rbh)) with linear_before_reset), h' = (1 - z) * h~ + z * h.
void GRU(NodeCtx& c) {
  Recurrence r = recurrence(c, 3);
  auto acts = activations(c, {"Sigmoid", "Tanh"}, r.dirs);
  const bool lbr = c.attr_int("linear_before_reset", 0) != 0;
  const int64_t hid = r.hidden;
  std::vector<std::vector<Tensor>> ys;
  std::vector<Tensor> hs;
  for (int64_t d = 0; d < r.dirs; ++d) {
    Tensor w = direction(c, c.in(1), d), rw = direction(c, c.in(2), d);
    Tensor r_zr = tessera::slice_copy(rw, 0, 0, 2 * hid), r_h = tessera::slice_copy(rw, 0, 2 * hid, 3 * hid);
    std::optional<Tensor> bias, rb_h;  // bias: Wb + Rb for z and r, Wb alone for h
    if (c.has(3)) {
      Tensor b = direction(c, c.in(3), d);
      Tensor wb = tessera::slice_copy(b, 0, 0, 3 * hid), rb = tessera::slice_copy(b, 0, 3 * hid, 6 * hid);
      bias = tessera::cat({tessera::add(part(wb, 0, 2 * hid), part(rb, 0, 2 * hid)), part(wb, 2, hid)}, 0);
      rb_h = part(rb, 2, hid);
    }
    Tensor xw = tessera::linear(r.x, w, bias);
    std::optional<Tensor> h = initial_state(c, r, 5, d);
    const Activation &f = acts[size_t(d)][0], &g = acts[size_t(d)][1];
    ys.push_back(unroll(r, d, [&](int64_t t) {
      Tensor xt = step(c, xw, t);
      std::optional<Tensor> rec;
      if (h) rec = tessera::linear(*h, r_zr);
      Tensor zr = add_opt(part(xt, 0, 2 * hid), rec);
      Tensor z = apply(f, part(zr, 0, hid), r.clip), rg = apply(f, part(zr, 1, hid), r.clip);
      std::optional<Tensor> hr;  // the reset gate's share of the candidate
      if (lbr) {
        std::optional<Tensor> lin = h ? std::optional<Tensor>(tessera::linear(*h, r_h, rb_h)) : rb_h;
        if (lin) hr = tessera::mul(rg, *lin);
      } else {
        if (h) hr = tessera::linear(tessera::mul(rg, *h), r_h);
        if (rb_h) hr = add_opt(*rb_h, hr);
      }
      Tensor cand = apply(g, add_opt(part(xt, 2, hid), hr), r.clip);
      Tensor next = tessera::mul(tessera::sub(scalar_like(1, z), z), cand);
      h = h ? tessera::add(next, tessera::mul(z, *h)) : next;
      return *h;
    }));
    hs.push_back(*h);
  }
  outputs(c, r, ys, hs, {});
}

// LSTM, gates i, o, f, c with peepholes P = [pi, po, pf]: i = f(x Wi + h Ri + b + pi * C),
// f likewise (or 1 - i with input_forget), C' = f * C + i * g(x Wc + h Rc + b),
// o = f(x Wo + h Ro + b + po * C'), h' = o * h(C').
void LSTM(NodeCtx& c) {
  Recurrence r = recurrence(c, 4);
  auto acts = activations(c, {"Sigmoid", "Tanh", "Tanh"}, r.dirs);
  const bool input_forget = c.attr_int("input_forget", 0) != 0;
  const int64_t hid = r.hidden;
  std::vector<std::vector<Tensor>> ys;
  std::vector<Tensor> hs, cs;
  for (int64_t d = 0; d < r.dirs; ++d) {
    Tensor w = direction(c, c.in(1), d), rw = direction(c, c.in(2), d);
    std::optional<Tensor> bias, pi, po, pf;
    if (c.has(3)) {
      Tensor b = direction(c, c.in(3), d);
      bias = tessera::add(part(b, 0, 4 * hid), part(b, 1, 4 * hid));
    }
    if (c.has(7)) {
      Tensor p = direction(c, c.in(7), d);
      pi = part(p, 0, hid), po = part(p, 1, hid), pf = part(p, 2, hid);
    }
    Tensor xw = tessera::linear(r.x, w, bias);
    std::optional<Tensor> h = initial_state(c, r, 5, d), cell = initial_state(c, r, 6, d);
    const Activation &fa = acts[size_t(d)][0], &ga = acts[size_t(d)][1], &ha = acts[size_t(d)][2];
    auto peep = [](const std::optional<Tensor>& p, const std::optional<Tensor>& s) -> std::optional<Tensor> {
      if (!p || !s) return std::nullopt;
      return tessera::mul(*p, *s);
    };
    ys.push_back(unroll(r, d, [&](int64_t t) {
      Tensor gates = step(c, xw, t);
      if (h) gates = tessera::add(gates, tessera::linear(*h, rw));
      Tensor i = apply(fa, add_opt(part(gates, 0, hid), peep(pi, cell)), r.clip);
      Tensor f = input_forget ? tessera::sub(scalar_like(1, i), i)
                              : apply(fa, add_opt(part(gates, 2, hid), peep(pf, cell)), r.clip);
      Tensor next = tessera::mul(i, apply(ga, part(gates, 3, hid), r.clip));
      if (cell) next = tessera::add(tessera::mul(f, *cell), next);
      cell = next;
      Tensor o = apply(fa, add_opt(part(gates, 1, hid), peep(po, cell)), r.clip);
      h = tessera::mul(o, apply(ha, *cell, std::nullopt));  // clip bounds the gates, not the cell (as ONNX Runtime)
      return *h;
    }));
    hs.push_back(*h);
    cs.push_back(*cell);
  }
  outputs(c, r, ys, hs, cs);
}

}  // namespace

void add_rnn_converters(ConverterTable& t) {
  t["RNN"] = RNN;
  t["GRU"] = GRU;
  t["LSTM"] = LSTM;
}

}  // namespace tessera::onnx::detail
