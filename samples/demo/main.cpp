// tessera_demo: lists the devices the runtime found, then runs one small pre-norm transformer
// block (layer_norm, q/k/v projections, causal scaled_dot_product_attention, output projection,
// residual, layer_norm, GELU MLP, residual) on the CPU through the public API and checks it
// against a naive double-precision evaluation of the same block. Exit status 1 on a mismatch.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace {

constexpr int64_t kSeq = 64, kModel = 128, kHeads = 4, kMlp = 512;
constexpr double kTolerance = 2e-4;  // f32 computation vs the double reference, outputs are O(1)

using tessera::Tensor;

// The value of "key" in a flat JSON object of strings and numbers (enough for device properties).
std::string json_field(const std::string& json, const std::string& key) {
  const auto k = json.find("\"" + key + "\"");
  if (k == std::string::npos) return "?";
  auto p = json.find(':', k);
  if (p == std::string::npos) return "?";
  ++p;
  while (p < json.size() && json[p] == ' ') ++p;
  if (p < json.size() && json[p] == '"') {
    const auto e = json.find('"', p + 1);
    return json.substr(p + 1, e - p - 1);
  }
  const auto e = json.find_first_of(",}", p);
  return json.substr(p, e - p);
}

struct Weights {
  Tensor ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;
};

Tensor param(std::vector<int64_t> sizes, double scale, double offset = 0) {
  return tessera::randn(sizes) * scale + offset;
}

Weights make_weights() {
  const double s = 1.0 / std::sqrt(double(kModel)), s2 = 1.0 / std::sqrt(double(kMlp));
  return {param({kModel}, 0.1, 1.0), param({kModel}, 0.1), param({kModel, kModel}, s), param({kModel}, 0.1),
          param({kModel, kModel}, s), param({kModel}, 0.1), param({kModel, kModel}, s), param({kModel}, 0.1),
          param({kModel, kModel}, s), param({kModel}, 0.1), param({kModel}, 0.1, 1.0), param({kModel}, 0.1),
          param({kMlp, kModel}, s), param({kMlp}, 0.1), param({kModel, kMlp}, s2), param({kModel}, 0.1)};
}

Tensor block(const Weights& w, const Tensor& x) {
  using namespace tessera;
  const int64_t l = x.size(1), dh = kModel / kHeads;
  Tensor h = layer_norm(x, {kModel}, w.ln1_w, w.ln1_b);
  Tensor q = linear(h, w.wq, w.bq).view({1, l, kHeads, dh}).transpose(1, 2);
  Tensor k = linear(h, w.wk, w.bk).view({1, l, kHeads, dh}).transpose(1, 2);
  Tensor v = linear(h, w.wv, w.bv).view({1, l, kHeads, dh}).transpose(1, 2);
  Tensor a = scaled_dot_product_attention(q, k, v, std::nullopt, /*is_causal=*/true);
  a = a.transpose(1, 2).reshape({1, l, kModel});
  Tensor x1 = x + linear(a, w.wo, w.bo);
  Tensor h2 = layer_norm(x1, {kModel}, w.ln2_w, w.ln2_b);
  return x1 + linear(gelu(linear(h2, w.w1, w.b1)), w.w2, w.b2);
}

// ---- the same block in double, plain loops over row-major arrays
using Vec = std::vector<double>;
Vec values(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  return Vec(p, p + c.numel());
}
Vec ref_layer_norm(const Vec& x, const Vec& g, const Vec& b, int64_t rows, int64_t n) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += x[size_t(r * n + i)];
    m /= double(n);
    for (int64_t i = 0; i < n; ++i) v += (x[size_t(r * n + i)] - m) * (x[size_t(r * n + i)] - m);
    v /= double(n);
    for (int64_t i = 0; i < n; ++i)
      y[size_t(r * n + i)] = (x[size_t(r * n + i)] - m) / std::sqrt(v + 1e-5) * g[size_t(i)] + b[size_t(i)];
  }
  return y;
}
Vec ref_linear(const Vec& x, const Vec& w, const Vec& b, int64_t rows, int64_t in, int64_t out) {
  Vec y(size_t(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[size_t(o)];
      for (int64_t i = 0; i < in; ++i) s += x[size_t(r * in + i)] * w[size_t(o * in + i)];
      y[size_t(r * out + o)] = s;
    }
  return y;
}
Vec ref_block(const Weights& w, const Vec& x) {
  const int64_t l = kSeq, d = kModel, dh = kModel / kHeads;
  const Vec h = ref_layer_norm(x, values(w.ln1_w), values(w.ln1_b), l, d);
  const Vec q = ref_linear(h, values(w.wq), values(w.bq), l, d, d);
  const Vec k = ref_linear(h, values(w.wk), values(w.bk), l, d, d);
  const Vec v = ref_linear(h, values(w.wv), values(w.bv), l, d, d);
  Vec a(size_t(l * d));
  for (int64_t hd = 0; hd < kHeads; ++hd)
    for (int64_t i = 0; i < l; ++i) {
      Vec s(size_t(i + 1));  // causal: keys 0..i
      double m = -1e300, z = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < dh; ++c) dot += q[size_t(i * d + hd * dh + c)] * k[size_t(j * d + hd * dh + c)];
        s[size_t(j)] = dot / std::sqrt(double(dh));
        m = std::max(m, s[size_t(j)]);
      }
      for (auto& e : s) z += (e = std::exp(e - m));
      for (int64_t c = 0; c < dh; ++c) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += s[size_t(j)] * v[size_t(j * d + hd * dh + c)];
        a[size_t(i * d + hd * dh + c)] = acc / z;
      }
    }
  const Vec o = ref_linear(a, values(w.wo), values(w.bo), l, d, d);
  Vec x1(x.size());
  for (size_t i = 0; i < x.size(); ++i) x1[i] = x[i] + o[i];
  const Vec h2 = ref_layer_norm(x1, values(w.ln2_w), values(w.ln2_b), l, d);
  Vec f = ref_linear(h2, values(w.w1), values(w.b1), l, d, kMlp);
  for (auto& e : f) e = 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));
  const Vec m2 = ref_linear(f, values(w.w2), values(w.b2), l, kMlp, d);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x1[i] + m2[i];
  return y;
}

}  // namespace

int main() {
  try {
    std::printf("Tessera %s\n", TESSERA_VERSION_STRING);
    const auto devs = tessera::devices();
    std::printf("devices found: %zu\n", devs.size());
    std::string capability = "?";
    for (const auto& d : devs) {
      std::printf("  %-10s plugin %-20s %s\n", d.name.c_str(), d.plugin.c_str(), d.properties.c_str());
      if (d.device.is_cpu()) capability = json_field(d.properties, "capability");
    }
    std::printf("cpu capability: %s\n", capability.c_str());

    tessera::manual_seed(2026);
    const Weights w = make_weights();
    const Tensor x = tessera::randn({1, kSeq, kModel});
    Tensor y = block(w, x);  // first run: loads kernels, creates oneDNN primitives
    const int kRuns = 10;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kRuns; ++i) y = block(w, x);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kRuns;

    const Vec want = ref_block(w, values(x));
    const Vec got = values(y);
    double max_err = 0;
    for (size_t i = 0; i < want.size(); ++i) max_err = std::max(max_err, std::fabs(got[i] - want[i]));
    const bool pass = got.size() == want.size() && max_err <= kTolerance;
    std::printf("transformer block (seq %lld, d_model %lld, %lld heads, MLP %lld, f32, causal) on cpu: %.3f ms\n",
                (long long)kSeq, (long long)kModel, (long long)kHeads, (long long)kMlp, ms);
    std::printf("max abs error vs double reference: %.3g (tolerance %.1g): %s\n", max_err, kTolerance,
                pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera_demo: %s\n", e.what());
    return 1;
  }
}
