// The accuracy figure of docs/quantization.md: an MLP classifier (3 linear layers, relu between
// them) fitted to a synthetic, learnable data set, quantized with the x86 quantizer, calibrated,
// converted and lowered to the int8 kernels, agrees with its float32 self on >= 99% of 10k fresh
// inputs (top-1). The fit is closed form: the two hidden layers are random features (fixed random
// weights) and the output layer is the ridge least-squares solution on one-hot targets, solved here
// with a Cholesky factorisation in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "tessera/compiler/export.h"
#include "tessera/compiler/quantize.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

constexpr int64_t kIn = 64, kHidden = 256, kClasses = 10;

// Gaussian clusters: class c has a random mean in kIn dims; a sample is its mean plus noise.
struct DataSet {
  std::vector<float> means;  // [kClasses, kIn]
  std::mt19937_64 rng;
  void draw(int64_t n, std::vector<float>& x, std::vector<int64_t>& label) {
    std::normal_distribution<float> noise(0.0f, 1.5f);
    std::uniform_int_distribution<int64_t> cls(0, kClasses - 1);
    x.resize(size_t(n * kIn));
    label.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      label[size_t(i)] = cls(rng);
      for (int64_t d = 0; d < kIn; ++d)
        x[size_t(i * kIn + d)] = means[size_t(label[size_t(i)] * kIn + d)] + noise(rng);
    }
  }
};

// Solves (A + lambda I) X = B for symmetric positive definite A [n, n], B [n, r] in place of B.
void ridge_solve(std::vector<double>& a, std::vector<double>& b, int64_t n, int64_t r, double lambda) {
  for (int64_t i = 0; i < n; ++i) a[size_t(i * n + i)] += lambda;
  for (int64_t j = 0; j < n; ++j) {  // a = L L^T, L in the lower triangle
    double d = a[size_t(j * n + j)];
    for (int64_t k = 0; k < j; ++k) d -= a[size_t(j * n + k)] * a[size_t(j * n + k)];
    ASSERT_GT(d, 0.0) << "the normal equations are not positive definite at " << j;
    a[size_t(j * n + j)] = std::sqrt(d);
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[size_t(i * n + j)];
      for (int64_t k = 0; k < j; ++k) s -= a[size_t(i * n + k)] * a[size_t(j * n + k)];
      a[size_t(i * n + j)] = s / a[size_t(j * n + j)];
    }
  }
  for (int64_t c = 0; c < r; ++c) {
    for (int64_t i = 0; i < n; ++i) {  // L y = b
      double s = b[size_t(i * r + c)];
      for (int64_t k = 0; k < i; ++k) s -= a[size_t(i * n + k)] * b[size_t(k * r + c)];
      b[size_t(i * r + c)] = s / a[size_t(i * n + i)];
    }
    for (int64_t i = n - 1; i >= 0; --i) {  // L^T x = y
      double s = b[size_t(i * r + c)];
      for (int64_t k = i + 1; k < n; ++k) s -= a[size_t(k * n + i)] * b[size_t(k * r + c)];
      b[size_t(i * r + c)] = s / a[size_t(i * n + i)];
    }
  }
}

std::vector<int64_t> argmax_rows(const Tensor& t) {
  Tensor h = t.cpu().contiguous();
  const float* p = h.data_ptr<float>();
  std::vector<int64_t> r;
  for (int64_t i = 0; i < h.size(0); ++i)
    r.push_back(int64_t(std::max_element(p + i * h.size(1), p + (i + 1) * h.size(1)) - (p + i * h.size(1))));
  return r;
}

TEST(QuantAccuracy, Int8MlpClassifierAgreesWithFloat32OnAtLeast99PercentOf10kInputs) {
  const uint64_t seed = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  DataSet data{{}, std::mt19937_64(seed)};
  std::normal_distribution<float> unit(0.0f, 1.0f);
  for (int64_t i = 0; i < kClasses * kIn; ++i) data.means.push_back(unit(data.rng));
  // Random features: He-scaled weights, small biases.
  auto random_layer = [&](int64_t out, int64_t in, Tensor& w, Tensor& b) {
    std::normal_distribution<float> d(0.0f, std::sqrt(2.0f / float(in)));
    std::vector<float> wv(static_cast<size_t>(out * in)), bv(static_cast<size_t>(out));
    for (float& v : wv) v = d(data.rng);
    for (float& v : bv) v = 0.1f * unit(data.rng);
    w = tensor(wv, {out, in});
    b = tensor(bv, {out});
  };
  Tensor w1, b1, w2, b2;
  random_layer(kHidden, kIn, w1, b1);
  random_layer(kHidden, kHidden, w2, b2);

  // Fit the output layer: ridge least squares of one-hot targets on [h2, 1].
  const int64_t n_train = 4096, f = kHidden + 1;
  std::vector<float> xtrain;
  std::vector<int64_t> ytrain;
  data.draw(n_train, xtrain, ytrain);
  Tensor h2 = relu(linear(relu(linear(tensor(xtrain, {n_train, kIn}), w1, b1)), w2, b2)).contiguous();
  const float* hp = h2.data_ptr<float>();
  std::vector<double> gram(static_cast<size_t>(f * f), 0.0), rhs(static_cast<size_t>(f * kClasses), 0.0), row(static_cast<size_t>(f));
  for (int64_t i = 0; i < n_train; ++i) {
    for (int64_t k = 0; k < kHidden; ++k) row[size_t(k)] = hp[i * kHidden + k];
    row[size_t(kHidden)] = 1.0;
    for (int64_t p = 0; p < f; ++p) {
      if (row[size_t(p)] == 0.0) continue;
      for (int64_t q = 0; q < f; ++q) gram[size_t(p * f + q)] += row[size_t(p)] * row[size_t(q)];
      rhs[size_t(p * kClasses + ytrain[size_t(i)])] += row[size_t(p)];
    }
  }
  ridge_solve(gram, rhs, f, kClasses, 1e-2 * double(n_train));
  std::vector<float> w3v(static_cast<size_t>(kClasses * kHidden)), b3v(static_cast<size_t>(kClasses));
  for (int64_t c = 0; c < kClasses; ++c) {
    for (int64_t k = 0; k < kHidden; ++k) w3v[size_t(c * kHidden + k)] = float(rhs[size_t(k * kClasses + c)]);
    b3v[size_t(c)] = float(rhs[size_t(kHidden * kClasses + c)]);
  }
  Tensor w3 = tensor(w3v, {kClasses, kHidden}), b3 = tensor(b3v, {kClasses});

  ExportOptions opts;
  opts.input_names = {"x"};
  opts.parameters = {{"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2},
                     {"fc2.bias", b2}, {"fc3.weight", w3}, {"fc3.bias", b3}};
  opts.dynamic_shapes = {{{0, Dim{"batch", 1, 16384}}}};
  compiler::ExportedProgram f32 = export_program(
      [&](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{linear(relu(linear(relu(linear(in[0], w1, b1)), w2, b2)), w3, b3)};
      },
      {zeros({8, kIn})}, opts);
  auto quantizer = quantization::x86_quantizer();
  quantization::PreparedProgram prepared = quantization::prepare(f32, *quantizer);
  for (int k = 0; k < 4; ++k)  // calibration: 1024 training samples
    quantization::calibrate(prepared, {tensor(std::vector<float>(xtrain.begin() + k * 256 * kIn,
                                                                 xtrain.begin() + (k + 1) * 256 * kIn),
                                              {256, kIn})});
  compiler::ExportedProgram int8 = quantization::convert(prepared);
  ASSERT_EQ(quantization::lower_to_int8(int8), 3);

  const int64_t n_test = 10000;
  std::vector<float> xtest;
  std::vector<int64_t> ytest;
  data.draw(n_test, xtest, ytest);
  Tensor x = tensor(xtest, {n_test, kIn});
  const std::vector<int64_t> pf = argmax_rows(f32.run({x})[0]), pq = argmax_rows(int8.run({x})[0]);
  int64_t agree = 0, f32_correct = 0, int8_correct = 0;
  for (int64_t i = 0; i < n_test; ++i) {
    agree += pf[size_t(i)] == pq[size_t(i)];
    f32_correct += pf[size_t(i)] == ytest[size_t(i)];
    int8_correct += pq[size_t(i)] == ytest[size_t(i)];
  }
  std::printf("int8 vs f32 top-1 agreement %.2f%%; accuracy f32 %.2f%%, int8 %.2f%% (10k inputs)\n",
              100.0 * double(agree) / double(n_test), 100.0 * double(f32_correct) / double(n_test),
              100.0 * double(int8_correct) / double(n_test));
  EXPECT_GE(f32_correct, n_test * 95 / 100) << "the fitted classifier does not learn the data set";
  EXPECT_GE(agree, n_test * 99 / 100);
}

}  // namespace
}  // namespace tessera
