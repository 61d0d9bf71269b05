// Every op of the core op set (dispatcher/include/tessera/ops.h), once. A case makes CPU inputs for
// a dtype and applies the op to the same inputs moved to the device under test.
#include "cases.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <tuple>

#include <tessera/dispatcher.h>

#include "tessera/dispatcher.h"

namespace tessera::cts {

// ---------------------------------------------------------------- random inputs

Tensor Gen::random(std::vector<int64_t> sizes, DType dtype, Domain domain) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const bool floating = is_floating(dtype);
  const bool is_unsigned = dtype == kUInt8 || dtype == kBool;
  for (auto& x : v) {
    if (dtype == kBool) {
      x = uni(rng_) < 0.5 ? 0.0 : 1.0;
      continue;
    }
    if (floating) {
      switch (domain) {
        case Domain::Any: x = normal(rng_); break;
        case Domain::Positive: x = 0.5 + 2.0 * uni(rng_); break;
        case Domain::Small: x = -2.0 + 4.0 * uni(rng_); break;
        case Domain::NonZero: x = (uni(rng_) < 0.5 ? -1.0 : 1.0) * (0.5 + 1.5 * uni(rng_)); break;
        case Domain::Unit: x = -0.9 + 1.8 * uni(rng_); break;
      }
    } else {
      int64_t lo = -20, hi = 20;
      if (domain == Domain::Positive) lo = 1, hi = 10;
      if (domain == Domain::Small || domain == Domain::Unit) lo = -3, hi = 3;
      if (is_unsigned && lo < 0) lo = domain == Domain::Positive ? 1 : 0, hi = hi * 2;
      std::uniform_int_distribution<int64_t> dist(lo, hi);
      int64_t k = dist(rng_);
      if (domain == Domain::NonZero) {
        while (k == 0) k = dist(rng_);
      }
      x = double(k);
    }
  }
  return tessera::tensor(v, sizes, tessera::dtype(dtype));
}

Tensor Gen::permutation(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i;
  std::shuffle(v.begin(), v.end(), rng_);
  return tessera::tensor(v, {n});
}

Tensor Gen::boolean(std::vector<int64_t> sizes) { return random(std::move(sizes), kBool); }

Tensor Gen::indices(std::vector<int64_t> sizes, int64_t bound) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::uniform_int_distribution<int64_t> dist(0, bound - 1);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng_);
  return tessera::tensor(v, sizes);
}

// ---------------------------------------------------------------- the table

namespace {

const std::vector<DType> kFloating = {kFloat16, kBFloat16, kFloat32, kFloat64};
const std::vector<DType> kSigned = {kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
const std::vector<DType> kNumeric = {kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
const std::vector<DType> kAll = {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};

using Inputs = std::vector<Tensor>;
using MakeFn = std::function<Inputs(Gen&, DType)>;
using RunFn = std::function<Tensor(const Inputs&, DType)>;

MakeFn unary_inputs(Domain d, std::vector<int64_t> sizes = {4, 6}) {
  return [d, sizes](Gen& g, DType t) { return Inputs{g.random(sizes, t, d)}; };
}
MakeFn binary_inputs(Domain da, Domain db, std::vector<int64_t> sa = {4, 6}, std::vector<int64_t> sb = {4, 6}) {
  return [=](Gen& g, DType t) { return Inputs{g.random(sa, t, da), g.random(sb, t, db)}; };
}

// `specials` (NaN, inf, values far in a function's tails) followed by fresh random values.
MakeFn special_inputs(std::vector<double> specials, std::vector<int64_t> sizes) {
  return [specials, sizes](Gen& g, DType t) {
    Tensor r = g.random(sizes, kFloat64).contiguous();
    std::vector<double> v(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
    std::copy(specials.begin(), specials.begin() + std::min(specials.size(), v.size()), v.begin());
    return Inputs{tessera::tensor(v, sizes, tessera::dtype(t))};
  };
}

void add_case(std::vector<Case>& v, std::string label, std::string op, std::vector<DType> dtypes, MakeFn make,
              RunFn run, double tol_scale = 1.0) {
  v.push_back(Case{std::move(label), std::move(op), std::move(dtypes), tol_scale, std::move(make), std::move(run)});
}

std::vector<Case> build() {
  std::vector<Case> v;
  using D = Domain;
  // ---- elementwise binary
  add_case(v, "add", "add", kNumeric, binary_inputs(D::Any, D::Any),
           [](const Inputs& x, DType) { return tessera::add(x[0], x[1]); });
  add_case(v, "add_alpha", "add", kNumeric, binary_inputs(D::Small, D::Small),
           [](const Inputs& x, DType) { return tessera::add(x[0], x[1], 2); });
  add_case(v, "add_broadcast", "add", kNumeric, binary_inputs(D::Any, D::Any, {3, 4, 6}, {6}),
           [](const Inputs& x, DType) { return x[0] + x[1]; });
  // 4-D operands: also run channels-last (Options::strided), where the output is channels-last too
  // and the kernel must write through its strides (Note [Channels-last activations]).
  add_case(v, "add_nchw_bias", "add", kNumeric, binary_inputs(D::Any, D::Any, {2, 3, 4, 5}, {1, 3, 1, 1}),
           [](const Inputs& x, DType) { return tessera::add(x[0], x[1]); });
  add_case(v, "mul_nchw", "mul", kNumeric, binary_inputs(D::Small, D::Small, {2, 3, 4, 5}, {2, 3, 4, 5}),
           [](const Inputs& x, DType) { return tessera::mul(x[0], x[1]); });
  add_case(v, "relu_nchw", "relu", kSigned, unary_inputs(D::Any, {2, 3, 4, 5}),
           [](const Inputs& x, DType) { return tessera::relu(x[0]); });
  add_case(v, "sub", "sub", kSigned, binary_inputs(D::Any, D::Any),
           [](const Inputs& x, DType) { return tessera::sub(x[0], x[1]); });
  add_case(v, "mul", "mul", kNumeric, binary_inputs(D::Small, D::Small),
           [](const Inputs& x, DType) { return tessera::mul(x[0], x[1]); });
  add_case(v, "mul_scalar", "mul", kNumeric, unary_inputs(D::Small),
           [](const Inputs& x, DType) { return x[0] * 3; });
  add_case(v, "div", "div", {kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64},
           binary_inputs(D::Any, D::NonZero), [](const Inputs& x, DType) { return tessera::div(x[0], x[1]); });
  add_case(v, "pow", "pow", kFloating, binary_inputs(D::Positive, D::Small),
           [](const Inputs& x, DType) { return tessera::pow(x[0], x[1]); }, 4);
  add_case(v, "pow_scalar", "pow", kFloating, unary_inputs(D::Any),
           [](const Inputs& x, DType) { return tessera::pow(x[0], Scalar(2)); });
  add_case(v, "maximum", "maximum", kNumeric, binary_inputs(D::Any, D::Any),
           [](const Inputs& x, DType) { return tessera::maximum(x[0], x[1]); });
  add_case(v, "minimum", "minimum", kNumeric, binary_inputs(D::Any, D::Any),
           [](const Inputs& x, DType) { return tessera::minimum(x[0], x[1]); });
  // Comparisons use few distinct values so that equal pairs occur.
  add_case(v, "eq", "eq", kAll, binary_inputs(D::Small, D::Small),
           [](const Inputs& x, DType) { return tessera::eq(x[0], x[1]); });
  add_case(v, "ne", "ne", kAll, binary_inputs(D::Small, D::Small),
           [](const Inputs& x, DType) { return tessera::ne(x[0], x[1]); });
  add_case(v, "lt", "lt", kNumeric, binary_inputs(D::Small, D::Small),
           [](const Inputs& x, DType) { return tessera::lt(x[0], x[1]); });
  add_case(v, "le", "le", kNumeric, binary_inputs(D::Small, D::Small),
           [](const Inputs& x, DType) { return tessera::le(x[0], x[1]); });
  add_case(v, "gt", "gt", kNumeric, binary_inputs(D::Small, D::Small),
           [](const Inputs& x, DType) { return tessera::gt(x[0], x[1]); });
  add_case(v, "ge", "ge", kNumeric, binary_inputs(D::Small, D::Small),
           [](const Inputs& x, DType) { return tessera::ge(x[0], x[1]); });
  add_case(v, "logical_and", "logical_and", kAll, binary_inputs(D::Small, D::Small),
           [](const Inputs& x, DType) { return tessera::logical_and(x[0], x[1]); });
  add_case(v, "logical_or", "logical_or", kAll, binary_inputs(D::Small, D::Small),
           [](const Inputs& x, DType) { return tessera::logical_or(x[0], x[1]); });
  add_case(v, "where", "where", kAll,
           [](Gen& g, DType t) { return Inputs{g.boolean({4, 6}), g.random({4, 6}, t), g.random({4, 6}, t)}; },
           [](const Inputs& x, DType) { return tessera::where(x[0], x[1], x[2]); });

  // ---- unary
  add_case(v, "neg", "neg", kSigned, unary_inputs(D::Any), [](const Inputs& x, DType) { return tessera::neg(x[0]); });
  add_case(v, "abs", "abs", kSigned, unary_inputs(D::Any), [](const Inputs& x, DType) { return tessera::abs(x[0]); });
  add_case(v, "relu", "relu", kSigned, unary_inputs(D::Any), [](const Inputs& x, DType) { return tessera::relu(x[0]); });
  add_case(v, "exp", "exp", kFloating, unary_inputs(D::Small), [](const Inputs& x, DType) { return tessera::exp(x[0]); });
  add_case(v, "log", "log", kFloating, unary_inputs(D::Positive), [](const Inputs& x, DType) { return tessera::log(x[0]); });
  add_case(v, "sqrt", "sqrt", kFloating, unary_inputs(D::Positive), [](const Inputs& x, DType) { return tessera::sqrt(x[0]); });
  add_case(v, "rsqrt", "rsqrt", kFloating, unary_inputs(D::Positive), [](const Inputs& x, DType) { return tessera::rsqrt(x[0]); });
  add_case(v, "sin", "sin", kFloating, unary_inputs(D::Small), [](const Inputs& x, DType) { return tessera::sin(x[0]); });
  add_case(v, "cos", "cos", kFloating, unary_inputs(D::Small), [](const Inputs& x, DType) { return tessera::cos(x[0]); });
  add_case(v, "tanh", "tanh", kFloating, unary_inputs(D::Small), [](const Inputs& x, DType) { return tessera::tanh(x[0]); });
  add_case(v, "sigmoid", "sigmoid", kFloating, unary_inputs(D::Small), [](const Inputs& x, DType) { return tessera::sigmoid(x[0]); });
  add_case(v, "gelu", "gelu", kFloating, unary_inputs(D::Small), [](const Inputs& x, DType) { return tessera::gelu(x[0]); });
  add_case(v, "gelu_tanh", "gelu", kFloating, unary_inputs(D::Small),
           [](const Inputs& x, DType) { return tessera::gelu(x[0], "tanh"); });
  add_case(v, "silu", "silu", kFloating, unary_inputs(D::Small), [](const Inputs& x, DType) { return tessera::silu(x[0]); });
  add_case(v, "erf", "erf", kFloating, unary_inputs(D::Small), [](const Inputs& x, DType) { return tessera::erf(x[0]); });

  // ---- the pointwise ops for ONNX models (docs/pointwise-ops.md): activations, rounding, inverse trigonometric
  // and hyperbolic functions, predicates, bitwise and shift ops, the integer-division family. 4-D
  // cases also run channels-last; the *_special cases carry NaN, infinities, -0.0, halves and zero divisors.
  {
    const std::vector<DType> ints = {kUInt8, kInt8, kInt16, kInt32, kInt64};
    const std::vector<DType> bits = {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64};
    const std::vector<DType> float_and_int = {kInt32, kFloat16, kBFloat16, kFloat32, kFloat64};
    const std::vector<double> specials = {NAN, INFINITY, -INFINITY, -0.0, 0.5, 1.5, 2.5, -0.5, -2.5, 1e30, -3.0, 3.0};
    const std::vector<double> divisors = {0.0, -0.0, 2.0, -2.0, INFINITY, NAN, 0.0, 1.5, -1.5, 3.0, -INFINITY, 0.25};
    auto unary = [&](const char* label, const char* op, std::vector<DType> dt, MakeFn make, Tensor (*fn)(const Tensor&)) {
      add_case(v, label, op, std::move(dt), std::move(make), [fn](const Inputs& x, DType) { return fn(x[0]); });
    };
    auto binary = [&](const char* label, const char* op, std::vector<DType> dt, MakeFn make,
                      Tensor (*fn)(const Tensor&, const Tensor&)) {
      add_case(v, label, op, std::move(dt), std::move(make), [fn](const Inputs& x, DType) { return fn(x[0], x[1]); });
    };
    auto special_pair = [specials, divisors](Gen& g, DType t) {
      return Inputs{special_inputs(specials, {3, 4})(g, t)[0], special_inputs(divisors, {3, 4})(g, t)[0]};
    };
    add_case(v, "leaky_relu", "leaky_relu", kFloating, unary_inputs(D::Any),
             [](const Inputs& x, DType) { return tessera::leaky_relu(x[0], 0.2); });
    add_case(v, "elu", "elu", kFloating, unary_inputs(D::Any),
             [](const Inputs& x, DType) { return tessera::elu(x[0], 0.5, 2.0, 1.5); });
    unary("selu", "selu", kFloating, unary_inputs(D::Any), tessera::selu);
    add_case(v, "celu", "celu", kFloating, unary_inputs(D::Any), [](const Inputs& x, DType) { return tessera::celu(x[0], 2.0); });
    unary("hardsigmoid", "hardsigmoid", kFloating, unary_inputs(D::Any), tessera::hardsigmoid);
    unary("hardswish_nchw", "hardswish", kFloating, unary_inputs(D::Any, {2, 3, 4, 5}), tessera::hardswish);
    add_case(v, "hardtanh", "hardtanh", kSigned, unary_inputs(D::Any),
             [](const Inputs& x, DType) { return tessera::hardtanh(x[0], -1.5, 2.5); });
    add_case(v, "softplus", "softplus", kFloating, unary_inputs(D::Any),
             [](const Inputs& x, DType) { return tessera::softplus(x[0], 2.0, 1.0); });
    unary("mish", "mish", kFloating, unary_inputs(D::Any), tessera::mish);
    unary("softsign", "softsign", float_and_int, unary_inputs(D::Any), tessera::softsign);
    add_case(v, "activations_special", "mish", kFloating, special_inputs(specials, {3, 4}), [](const Inputs& x, DType) {
      return tessera::cat({tessera::mish(x[0]), tessera::elu(x[0]), tessera::softplus(x[0]), tessera::hardswish(x[0]),
                           tessera::softsign(x[0]), tessera::leaky_relu(x[0])}, 0);
    });
    add_case(v, "prelu_nchw", "prelu", kFloating,
             [](Gen& g, DType t) { return Inputs{g.random({2, 3, 4, 5}, t), g.random({3}, t)}; },
             [](const Inputs& x, DType) { return tessera::prelu(x[0], x[1]); });
    add_case(v, "_prelu_kernel", "_prelu_kernel", kFloating,
             [](Gen& g, DType t) { return Inputs{g.random({2, 3, 4}, t), g.random({3, 1}, t)}; },
             [](const Inputs& x, DType) {
               Dispatcher& d = Dispatcher::instance();
               return std::get<Tensor>(d.call_boxed(d.op("_prelu_kernel"), Stack{x[0], x[1]}).at(0));
             });
    unary("floor", "floor", kNumeric, unary_inputs(D::Any), tessera::floor);
    unary("ceil", "ceil", kNumeric, unary_inputs(D::Any), tessera::ceil);
    unary("round", "round", kNumeric, unary_inputs(D::Any), tessera::round);
    unary("trunc", "trunc", kNumeric, unary_inputs(D::Any), tessera::trunc);
    add_case(v, "rounding_special", "round", kFloating, special_inputs(specials, {3, 4}), [](const Inputs& x, DType) {
      return tessera::cat({tessera::round(x[0]), tessera::floor(x[0]), tessera::ceil(x[0]), tessera::trunc(x[0])}, 0);
    });
    unary("sign", "sign", kAll, unary_inputs(D::Small), tessera::sign);
    unary("sign_special", "sign", kFloating, special_inputs(specials, {3, 4}), tessera::sign);
    unary("reciprocal", "reciprocal", float_and_int, unary_inputs(D::NonZero), tessera::reciprocal);
    unary("tan", "tan", kFloating, unary_inputs(D::Unit), tessera::tan);
    unary("asin", "asin", kFloating, unary_inputs(D::Unit), tessera::asin);
    unary("acos", "acos", kFloating, unary_inputs(D::Unit), tessera::acos);
    unary("atan", "atan", float_and_int, unary_inputs(D::Small), tessera::atan);
    unary("sinh", "sinh", kFloating, unary_inputs(D::Small), tessera::sinh);
    unary("cosh", "cosh", kFloating, unary_inputs(D::Small), tessera::cosh);
    unary("asinh", "asinh", kFloating, unary_inputs(D::Small), tessera::asinh);
    add_case(v, "acosh", "acosh", kFloating, [](Gen& g, DType t) { return Inputs{g.random({4, 6}, t, D::Positive) + 1}; },
             [](const Inputs& x, DType) { return tessera::acosh(x[0]); });
    unary("atanh", "atanh", kFloating, unary_inputs(D::Unit), tessera::atanh);
    unary("log1p", "log1p", kFloating, unary_inputs(D::Unit), tessera::log1p);
    unary("expm1", "expm1", kFloating, unary_inputs(D::Small), tessera::expm1);
    unary("isnan", "isnan", kAll, unary_inputs(D::Any), tessera::isnan);
    unary("isinf", "isinf", kAll, unary_inputs(D::Any), tessera::isinf);
    add_case(v, "predicates_special", "isnan", kFloating, special_inputs(specials, {3, 4}), [](const Inputs& x, DType) {
      return tessera::cat({tessera::isnan(x[0]), tessera::isinf(x[0]), tessera::logical_not(x[0])}, 0);
    });
    unary("logical_not", "logical_not", kAll, unary_inputs(D::Small), tessera::logical_not);
    unary("bitwise_not", "bitwise_not", bits, unary_inputs(D::Any), tessera::bitwise_not);
    binary("remainder", "remainder", kNumeric, binary_inputs(D::Any, D::NonZero), tessera::remainder);
    binary("remainder_broadcast", "remainder", kSigned, binary_inputs(D::Any, D::NonZero, {3, 4, 6}, {6}),
           tessera::remainder);
    binary("remainder_nchw", "remainder", kSigned, binary_inputs(D::Any, D::NonZero, {2, 3, 4, 5}, {1, 3, 1, 1}),
           tessera::remainder);
    binary("remainder_empty", "remainder", kNumeric, binary_inputs(D::Any, D::NonZero, {0, 3}, {3}), tessera::remainder);
    binary("fmod", "fmod", kNumeric, binary_inputs(D::Any, D::NonZero), tessera::fmod);
    binary("floor_divide", "floor_divide", kNumeric, binary_inputs(D::Any, D::NonZero), tessera::floor_divide);
    add_case(v, "division_special", "remainder", kFloating, special_pair, [](const Inputs& x, DType) {
      return tessera::cat({tessera::remainder(x[0], x[1]), tessera::fmod(x[0], x[1]), tessera::floor_divide(x[0], x[1])}, 0);
    });
    binary("bitwise_and", "bitwise_and", bits, binary_inputs(D::Any, D::Any), tessera::bitwise_and);
    binary("bitwise_or", "bitwise_or", bits, binary_inputs(D::Any, D::Any), tessera::bitwise_or);
    binary("bitwise_xor", "bitwise_xor", bits, binary_inputs(D::Any, D::Any, {3, 4, 6}, {4, 1}), tessera::bitwise_xor);
    // Shifts of 1..10: past the width of the 8-bit types.
    binary("bitwise_left_shift", "bitwise_left_shift", ints, binary_inputs(D::Any, D::Positive),
           tessera::bitwise_left_shift);
    binary("bitwise_right_shift", "bitwise_right_shift", ints, binary_inputs(D::Any, D::Positive),
           tessera::bitwise_right_shift);
    binary("logical_xor", "logical_xor", kAll, binary_inputs(D::Small, D::Small), tessera::logical_xor);
    binary("atan2", "atan2", kFloating, binary_inputs(D::Any, D::Any), tessera::atan2);
  }

  // ---- reductions
  add_case(v, "sum", "sum", kNumeric, unary_inputs(D::Small), [](const Inputs& x, DType) { return tessera::sum(x[0]); }, 4);
  add_case(v, "sum_dim", "sum", kNumeric, unary_inputs(D::Small, {3, 4, 5}),
           [](const Inputs& x, DType) { return tessera::sum(x[0], {1}); }, 2);
  add_case(v, "sum_keepdim", "sum", kNumeric, unary_inputs(D::Small, {3, 4, 5}),
           [](const Inputs& x, DType) { return tessera::sum(x[0], {0, 2}, true); }, 4);
  add_case(v, "mean", "mean", kFloating, unary_inputs(D::Any, {3, 4, 5}),
           [](const Inputs& x, DType) { return tessera::mean(x[0], {2}); }, 2);
  add_case(v, "amax", "amax", kNumeric, unary_inputs(D::Any), [](const Inputs& x, DType) { return tessera::amax(x[0], {1}); });
  add_case(v, "amin", "amin", kNumeric, unary_inputs(D::Any), [](const Inputs& x, DType) { return tessera::amin(x[0], {1}); });
  add_case(v, "prod", "prod", kSigned, unary_inputs(D::Unit, {4, 3}),
           [](const Inputs& x, DType) { return tessera::prod(x[0], {1}); }, 2);
  add_case(v, "var", "var", kFloating, unary_inputs(D::Any), [](const Inputs& x, DType) { return tessera::var(x[0], {1}); }, 4);
  // Distinct values: ties would make the index depend on the scan order.
  add_case(v, "argmax", "argmax", {kInt32, kInt64, kFloat32, kFloat64},
           [](Gen& g, DType t) { return Inputs{g.permutation(24).reshape({4, 6}).to(t)}; },
           [](const Inputs& x, DType) { return tessera::argmax(x[0], 1); });

  // ---- nn
  add_case(v, "matmul", "matmul", {kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64},
           binary_inputs(D::Small, D::Small, {4, 8}, {8, 5}),
           [](const Inputs& x, DType) { return tessera::matmul(x[0], x[1]); }, 8);
  add_case(v, "matmul_batched", "matmul", kFloating, binary_inputs(D::Small, D::Small, {2, 3, 8}, {8, 5}),
           [](const Inputs& x, DType) { return tessera::matmul(x[0], x[1]); }, 8);
  add_case(v, "linear", "linear", kFloating,
           [](Gen& g, DType t) { return Inputs{g.random({3, 8}, t), g.random({5, 8}, t), g.random({5}, t)}; },
           [](const Inputs& x, DType) { return tessera::linear(x[0], x[1], x[2]); }, 8);
  add_case(v, "softmax", "softmax", kFloating, unary_inputs(D::Any),
           [](const Inputs& x, DType) { return tessera::softmax(x[0], -1); }, 4);
  add_case(v, "log_softmax", "log_softmax", kFloating, unary_inputs(D::Any),
           [](const Inputs& x, DType) { return tessera::log_softmax(x[0], 1); }, 4);
  add_case(v, "layer_norm", "layer_norm", kFloating,
           [](Gen& g, DType t) { return Inputs{g.random({3, 8}, t), g.random({8}, t), g.random({8}, t)}; },
           [](const Inputs& x, DType) { return tessera::layer_norm(x[0], {8}, x[1], x[2]); }, 8);
  add_case(v, "rms_norm", "rms_norm", kFloating,
           [](Gen& g, DType t) { return Inputs{g.random({3, 8}, t), g.random({8}, t)}; },
           [](const Inputs& x, DType) { return tessera::rms_norm(x[0], {8}, x[1]); }, 8);
  add_case(v, "conv2d", "conv2d", kFloating,
           [](Gen& g, DType t) { return Inputs{g.random({1, 2, 6, 6}, t), g.random({3, 2, 3, 3}, t), g.random({3}, t)}; },
           [](const Inputs& x, DType) { return tessera::conv2d(x[0], x[1], x[2], {1, 1}, {1, 1}); }, 16);
  add_case(v, "max_pool2d", "max_pool2d", kFloating, unary_inputs(D::Any, {1, 2, 6, 6}),
           [](const Inputs& x, DType) { return tessera::max_pool2d(x[0], {2, 2}); });
  add_case(v, "avg_pool2d", "avg_pool2d", kFloating, unary_inputs(D::Any, {1, 2, 6, 6}),
           [](const Inputs& x, DType) { return tessera::avg_pool2d(x[0], {2, 2}); }, 2);
  add_case(v, "embedding", "embedding", kFloating,
           [](Gen& g, DType t) { return Inputs{g.random({10, 4}, t), g.indices({5}, 10)}; },
           [](const Inputs& x, DType) { return tessera::embedding(x[0], x[1]); });
  add_case(v, "scaled_dot_product_attention", "scaled_dot_product_attention", kFloating,
           [](Gen& g, DType t) {
             return Inputs{g.random({1, 2, 4, 8}, t), g.random({1, 2, 4, 8}, t), g.random({1, 2, 4, 8}, t)};
           },
           [](const Inputs& x, DType) { return tessera::scaled_dot_product_attention(x[0], x[1], x[2]); }, 16);
  add_case(v, "sdpa_causal", "scaled_dot_product_attention", kFloating,
           [](Gen& g, DType t) {
             return Inputs{g.random({1, 2, 4, 8}, t), g.random({1, 2, 4, 8}, t), g.random({1, 2, 4, 8}, t)};
           },
           [](const Inputs& x, DType) { return tessera::scaled_dot_product_attention(x[0], x[1], x[2], std::nullopt, true); },
           16);
  // A bool mask with a fully masked row (PyTorch: that row is 0) and a row with one key left.
  add_case(v, "sdpa_masked_rows", "scaled_dot_product_attention", kFloating,
           [](Gen& g, DType t) {
             std::vector<bool> keep(5 * 6, true);
             for (int j = 0; j < 6; ++j) keep[size_t(6 + j)] = false;
             for (int j = 0; j < 5; ++j) keep[size_t(18 + j)] = false;
             return Inputs{g.random({1, 2, 5, 8}, t), g.random({1, 2, 6, 8}, t), g.random({1, 2, 6, 8}, t),
                           tessera::tensor(keep, {5, 6})};
           },
           [](const Inputs& x, DType) { return tessera::scaled_dot_product_attention(x[0], x[1], x[2], x[3]); }, 16);
  // A float32 additive mask for every floating query dtype (PyTorch adds it in float32, not
  // rounded to the query's dtype: 64 + x keeps x only in float32).
  add_case(v, "sdpa_float32_mask", "scaled_dot_product_attention", kFloating,
           [](Gen& g, DType t) {
             return Inputs{g.random({2, 2, 5, 8}, t), g.random({2, 2, 6, 8}, t), g.random({2, 2, 6, 8}, t),
                           tessera::add(g.random({2, 1, 5, 6}, kFloat32), tessera::full({1}, 64.0))};
           },
           [](const Inputs& x, DType) { return tessera::scaled_dot_product_attention(x[0], x[1], x[2], x[3]); }, 16);
  add_case(v, "cat", "cat", kAll, binary_inputs(D::Any, D::Any, {2, 6}, {3, 6}),
           [](const Inputs& x, DType) { return tessera::cat({x[0], x[1]}, 0); });
  add_case(v, "stack", "stack", kAll, binary_inputs(D::Any, D::Any),
           [](const Inputs& x, DType) { return tessera::stack({x[0], x[1]}, 1); });
  add_case(v, "index_select", "index_select", kAll,
           [](Gen& g, DType t) { return Inputs{g.random({5, 4}, t), g.indices({7}, 5)}; },
           [](const Inputs& x, DType) { return tessera::index_select(x[0], 0, x[1]); });
  add_case(v, "gather", "gather", kAll,
           [](Gen& g, DType t) { return Inputs{g.random({4, 6}, t), g.indices({4, 3}, 6)}; },
           [](const Inputs& x, DType) { return tessera::gather(x[0], 1, x[1]); });

  // ---- memory and factories on the device
  add_case(v, "fill_", "fill_", kAll, unary_inputs(D::Any),
           [](const Inputs& x, DType) {
             Tensor y = x[0].clone();
             y.fill_(is_floating(y.dtype()) ? Scalar(1.5) : Scalar(int64_t(1)));
             return y;
           });
  add_case(v, "zeros_like", "full_like", kAll, unary_inputs(D::Any),
           [](const Inputs& x, DType) { return tessera::zeros_like(x[0]); });
  add_case(v, "ones_like", "full_like", kAll, unary_inputs(D::Any, {3, 5}),
           [](const Inputs& x, DType) { return tessera::ones_like(x[0].t()); });
  add_case(v, "copy_", "copy_", kAll, unary_inputs(D::Any),
           [](const Inputs& x, DType) {
             Tensor y = empty_like(x[0]);
             y.copy_(x[0]);
             return y;
           });
  add_case(v, "copy_transposed", "copy_", kAll, unary_inputs(D::Any, {5, 7}),
           [](const Inputs& x, DType) { return x[0].t().contiguous(); });
  add_case(v, "to_float32", "copy_", kAll, unary_inputs(D::Small),
           [](const Inputs& x, DType) { return x[0].to(kFloat32); });
  add_case(v, "from_float64", "copy_", kAll,
           [](Gen& g, DType t) { return Inputs{g.random({4, 6}, t).to(kFloat64)}; },
           [](const Inputs& x, DType t) { return x[0].to(t); });
  add_case(v, "clone", "clone", kAll, unary_inputs(D::Any), [](const Inputs& x, DType) { return x[0].clone(); });
  add_case(v, "zeros", "zeros", kAll, unary_inputs(D::Any),
           [](const Inputs& x, DType t) { return tessera::zeros({3, 5}, tessera::dtype(t).device(x[0].device())); });
  add_case(v, "full", "full", kAll, unary_inputs(D::Any),
           [](const Inputs& x, DType t) {
             return tessera::full({3, 5}, t == kBool ? Scalar(true) : Scalar(int64_t(2)),
                                  tessera::dtype(t).device(x[0].device()));
           });
  // clamp: both bounds, one bound, min > max (gives max), NaN elements (stay NaN); an int tensor with a
  // float bound computes in float32.
  add_case(v, "clamp", "clamp", kSigned, unary_inputs(D::Any),
           [](const Inputs& x, DType) { return tessera::clamp(x[0], -2, 3); });
  add_case(v, "clamp_min", "clamp", kFloating, unary_inputs(D::Any),
           [](const Inputs& x, DType) { return tessera::clamp(x[0], 0.25); });
  add_case(v, "clamp_max", "clamp", kNumeric, unary_inputs(D::Small),
           [](const Inputs& x, DType) { return tessera::clamp(x[0], std::nullopt, 2); });
  add_case(v, "clamp_inverted", "clamp", kFloating, unary_inputs(D::Any),
           [](const Inputs& x, DType) { return tessera::clamp(x[0], 1.5, -1.5); });
  add_case(v, "clamp_float_bound", "clamp", {kInt32, kInt64}, unary_inputs(D::Any),
           [](const Inputs& x, DType) { return tessera::clamp(x[0], -1.5, 2.5); });
  add_case(v, "arange", "arange", {kInt32, kInt64, kFloat32, kFloat64}, unary_inputs(D::Any),
           [](const Inputs& x, DType t) { return tessera::arange(0, 12, 1, tessera::dtype(t).device(x[0].device())); });

  // ---- edge cases: C++ numbers in expressions, conversions, function tails, empty tensors.
  // A number keeps its own value until the op's compute type (uint8 / -3 is not uint8 / 253).
  add_case(v, "div_number_negative", "div", kNumeric, unary_inputs(D::Small),
           [](const Inputs& x, DType) { return x[0] / -3; });
  add_case(v, "mul_number_negative", "mul", kNumeric, unary_inputs(D::Small),
           [](const Inputs& x, DType) { return x[0] * -3; });
  add_case(v, "add_number_floating", "add", kNumeric, unary_inputs(D::Small),
           [](const Inputs& x, DType) { return x[0] + 2.5; });
  add_case(v, "mul_number_large", "mul", kFloating,
           [](Gen& g, DType t) { return Inputs{(g.random({4, 6}, kFloat64, D::Unit) * 0.01).to(t)}; },
           [](const Inputs& x, DType) { return x[0] * 1e5; });
  // Any nonzero value (0.5, NaN) converts to true; NaN and inf to INT64_MIN as on x86-64.
  const std::vector<double> nonfinite = {NAN, INFINITY, -INFINITY, 1e30, -3.7, 2.9, 0.5, -0.5, -0.0};
  add_case(v, "to_bool", "copy_", kAll, unary_inputs(D::Unit), [](const Inputs& x, DType) { return x[0].to(kBool); });
  add_case(v, "to_bool_nonfinite", "copy_", kFloating, special_inputs(nonfinite, {3, 4}),
           [](const Inputs& x, DType) { return x[0].to(kBool); });
  add_case(v, "to_int64_nonfinite", "copy_", kFloating, special_inputs(nonfinite, {3, 4}),
           [](const Inputs& x, DType) { return x[0].to(kInt64); });
  add_case(v, "clamp_nonfinite", "clamp", kFloating, special_inputs(nonfinite, {3, 4}),
           [](const Inputs& x, DType) { return tessera::clamp(x[0], -1, 1); });
  // fake_quantize (Note [Fake quantize]): values inside the range, below quant_min and above quant_max
  // (x in [-4, 4] against a range of about [-0.3, 2.2]); per-channel along dim 1 of a transposed view.
  add_case(v, "fake_quantize_per_tensor", "fake_quantize_per_tensor_affine", {kFloat32}, unary_inputs(D::Any),
           [](const Inputs& x, DType) {
             const Device d = x[0].device();
             return tessera::fake_quantize_per_tensor_affine(
                 x[0], tessera::tensor(std::vector<float>{0.01f}).to(d), tessera::tensor(std::vector<int32_t>{30}).to(d), 0, 255);
           });
  add_case(v, "fake_quantize_per_channel", "fake_quantize_per_channel_affine", {kFloat32},
           [](Gen& g, DType t) { return Inputs{g.random({5, 3}, t).t()}; },
           [](const Inputs& x, DType) {
             const Device d = x[0].device();
             return tessera::fake_quantize_per_channel_affine(
                 x[0], tessera::tensor(std::vector<float>{0.02f, 0.5f, 0.003f, 0.1f, 1.0f}).to(d),
                 tessera::tensor(std::vector<int64_t>{0, -3, 10, 0, 127}).to(d), 1, -128, 127);
           });
  // The optimizer's fused step (Note [Fused optimizer step]): AdamW's third step on one parameter,
  // its moments (the second positive) and gradient; the result lists the three tensors it writes.
  add_case(v, "fused_adam", "_fused_adam_", {kFloat32, kFloat64},
           [](Gen& g, DType t) {
             return Inputs{g.random({5, 7}, t), g.random({5, 7}, t, D::Small), g.random({5, 7}, t, D::Positive),
                           g.random({5, 7}, t)};
           },
           [](const Inputs& x, DType) {
             Tensor p = x[0].clone(), m = x[1].clone(), s = x[2].clone();
             FusedAdamArgs a;
             a.lr = 0.01;
             a.weight_decay = 0.1;
             a.bias_correction1 = 1 - std::pow(a.beta1, 3);
             a.bias_correction2 = 1 - std::pow(a.beta2, 3);
             a.decoupled_weight_decay = true;
             tessera::_fused_adam_(p, m, s, x[3], a);
             return tessera::cat({p.reshape({-1}), m.reshape({-1}), s.reshape({-1})}, 0);
           });
  // SGD with Nesterov momentum and weight decay, a later step (the buffer is read).
  add_case(v, "fused_sgd", "_fused_sgd_", {kFloat32, kFloat64}, binary_inputs(D::Any, D::Small, {4, 9}, {4, 9}),
           [](const Inputs& x, DType) {
             Tensor p = x[0].clone(), buf = x[1].clone();
             FusedSgdArgs a;
             a.weight_decay = 0.1;
             a.nesterov = true;
             tessera::_fused_sgd_(p, buf, x[0] * 0.5 - x[1], a);
             return tessera::cat({p.reshape({-1}), buf.reshape({-1})}, 0);
           });
  // The list forms: two parameters of different shapes in one call (Adam, coupled weight decay;
  // SGD's first step with dampening), the results of every written tensor laid end to end.
  add_case(v, "multi_tensor_adam", "_multi_tensor_adam_", {kFloat32, kFloat64},
           [](Gen& g, DType t) {
             return Inputs{g.random({5, 7}, t), g.random({5, 7}, t, D::Small), g.random({5, 7}, t, D::Positive),
                           g.random({5, 7}, t), g.random({11}, t), g.random({11}, t, D::Small),
                           g.random({11}, t, D::Positive), g.random({11}, t)};
           },
           [](const Inputs& x, DType) {
             std::vector<Tensor> w;
             for (int i : {0, 1, 2, 4, 5, 6}) w.push_back(x[size_t(i)].clone());
             FusedAdamArgs a;
             a.lr = 0.01;
             a.weight_decay = 0.1;
             a.bias_correction1 = 1 - std::pow(a.beta1, 2);
             a.bias_correction2 = 1 - std::pow(a.beta2, 2);
             tessera::_multi_tensor_adam_({w[0], w[3]}, {w[1], w[4]}, {w[2], w[5]}, {x[3], x[7]}, a);
             std::vector<Tensor> flat;
             for (const Tensor& t : w) flat.push_back(t.reshape({-1}));
             return tessera::cat(flat, 0);
           });
  add_case(v, "multi_tensor_sgd", "_multi_tensor_sgd_", {kFloat32, kFloat64},
           [](Gen& g, DType t) {
             return Inputs{g.random({4, 9}, t), g.random({4, 9}, t, D::Small), g.random({6}, t),
                           g.random({6}, t, D::Small)};
           },
           [](const Inputs& x, DType) {
             Tensor p = x[0].clone(), q = x[2].clone(), bp = x[1].clone(), bq = x[3].clone();
             FusedSgdArgs a;
             a.dampening = 0.2;
             a.weight_decay = 0.05;
             a.first_step = true;
             tessera::_multi_tensor_sgd_({p, q}, {bp, bq}, {x[1] * 2.0, x[3] - x[2]}, a);
             return tessera::cat({p.reshape({-1}), q.reshape({-1}), bp.reshape({-1}), bq.reshape({-1})}, 0);
           });
  // Tails where 1 + tanh(u) or 1 + erf(u) cancel, exp overflows, or x^3 overflows.
  const std::vector<double> tails = {-1e10, -100, -30, -10, -5, 5, 10, 30, 100, 1e10};
  const std::vector<DType> wide = {kFloat32, kFloat64};
  add_case(v, "gelu_tails", "gelu", wide, special_inputs(tails, {3, 4}),
           [](const Inputs& x, DType) { return tessera::gelu(x[0]); });
  add_case(v, "gelu_tanh_tails", "gelu", wide, special_inputs(tails, {3, 4}),
           [](const Inputs& x, DType) { return tessera::gelu(x[0], "tanh"); });
  add_case(v, "sigmoid_tails", "sigmoid", wide, special_inputs(tails, {3, 4}),
           [](const Inputs& x, DType) { return tessera::sigmoid(x[0]); });
  add_case(v, "silu_tails", "silu", wide, special_inputs(tails, {3, 4}),
           [](const Inputs& x, DType) { return tessera::silu(x[0]); });
  add_case(v, "tanh_tails", "tanh", wide, special_inputs(tails, {3, 4}),
           [](const Inputs& x, DType) { return tessera::tanh(x[0]); });
  // A row with a NaN is all NaN; huge maxima neither overflow exp nor lose log_softmax's -1e30.
  const std::vector<double> rows = {1, NAN, 2, 0, 1e30, 1e30, 0, -1, 1000, 999, 998, 0};
  add_case(v, "softmax_nan_and_huge_rows", "softmax", kFloating, special_inputs(rows, {4, 4}),
           [](const Inputs& x, DType) { return tessera::softmax(x[0], -1); }, 4);
  add_case(v, "log_softmax_nan_and_huge_rows", "log_softmax", kFloating, special_inputs(rows, {4, 4}),
           [](const Inputs& x, DType) { return tessera::log_softmax(x[0], 1); }, 4);
  // No elements: reductions give their identities (sum 0, mean NaN), matmul with k = 0 zeros.
  add_case(v, "add_empty", "add", kNumeric, binary_inputs(D::Any, D::Any, {0, 3}, {0, 3}),
           [](const Inputs& x, DType) { return tessera::add(x[0], x[1]); });
  add_case(v, "zeros_empty", "zeros", kAll, unary_inputs(D::Any),
           [](const Inputs& x, DType t) { return tessera::zeros({2, 0}, tessera::dtype(t).device(x[0].device())); });
  add_case(v, "sum_empty_dim", "sum", kNumeric, unary_inputs(D::Any, {3, 0}),
           [](const Inputs& x, DType) { return tessera::sum(x[0], {1}); });
  add_case(v, "sum_empty", "sum", kNumeric, unary_inputs(D::Any, {0, 4}),
           [](const Inputs& x, DType) { return tessera::sum(x[0]); });
  add_case(v, "mean_empty_dim", "mean", kFloating, unary_inputs(D::Any, {3, 0}),
           [](const Inputs& x, DType) { return tessera::mean(x[0], {1}); });
  add_case(v, "sum_0dim", "sum", kNumeric, unary_inputs(D::Small, {}),
           [](const Inputs& x, DType) { return tessera::sum(x[0], {0}); });
  add_case(v, "matmul_k0", "matmul", {kInt64, kFloat32, kFloat64}, binary_inputs(D::Any, D::Any, {3, 0}, {0, 4}),
           [](const Inputs& x, DType) { return tessera::matmul(x[0], x[1]); });

  // ---- structural and nn ops for ONNX models (slicing, pad, norms, scatter, topk, resize, ...)
  add_case(v, "slice_copy_step", "slice_copy", kAll, unary_inputs(D::Any, {5, 7}),
           [](const Inputs& x, DType) { return tessera::slice_copy(x[0], 1, 1, 6, 2); });
  add_case(v, "slice_copy_negative_step", "slice_copy", kAll, unary_inputs(D::Any, {5, 7}),
           [](const Inputs& x, DType) { return tessera::slice_copy(x[0], 0, -1, INT64_MIN, -2); });
  add_case(v, "slice_copy_transposed", "slice_copy", kNumeric, unary_inputs(D::Any, {5, 7}),
           [](const Inputs& x, DType) { return tessera::slice_copy(x[0].t(), 0, -4, INT64_MAX); });
  add_case(v, "slice_copy_empty", "slice_copy", kNumeric, unary_inputs(D::Any, {0, 3}),
           [](const Inputs& x, DType) { return tessera::slice_copy(x[0], 1, 1); });
  add_case(v, "expand_copy", "expand_copy", kAll, unary_inputs(D::Any, {3, 1}),
           [](const Inputs& x, DType) { return tessera::expand_copy(x[0], {2, -1, 5}); });
  add_case(v, "pad_constant", "pad", kAll, unary_inputs(D::Any, {2, 3, 4}),
           [](const Inputs& x, DType) { return tessera::pad(x[0], {1, 2, -1, 1}, "constant", 1.0); });
  add_case(v, "pad_reflect", "pad", kAll, unary_inputs(D::Any, {2, 3, 4}),
           [](const Inputs& x, DType) { return tessera::pad(x[0], {3, 2, 2, 0}, "reflect"); });
  add_case(v, "pad_replicate", "pad", kAll, unary_inputs(D::Any, {2, 3, 4}),
           [](const Inputs& x, DType) { return tessera::pad(x[0], {2, 5, 1, 1, 1, 0}, "replicate"); });
  add_case(v, "pad_circular", "pad", kAll, unary_inputs(D::Any, {2, 3, 4}),
           [](const Inputs& x, DType) { return tessera::pad(x[0], {4, 1, -1, 2}, "circular"); });
  add_case(v, "batch_norm", "batch_norm", kFloating,
           [](Gen& g, DType t) {
             return Inputs{g.random({2, 3, 4, 5}, t), g.random({3}, t), g.random({3}, t), g.random({3}, t),
                           g.random({3}, t, Domain::Positive)};
           },
           [](const Inputs& x, DType) { return tessera::batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5, false); },
           2);
  add_case(v, "group_norm", "group_norm", kFloating,
           [](Gen& g, DType t) { return Inputs{g.random({2, 4, 3, 3}, t), g.random({4}, t), g.random({4}, t)}; },
           [](const Inputs& x, DType) { return tessera::group_norm(x[0], 2, x[1], x[2]); }, 4);
  add_case(v, "instance_norm", "group_norm", kFloating, unary_inputs(D::Any, {2, 3, 4, 4}),
           [](const Inputs& x, DType) { return tessera::group_norm(x[0], 3); }, 4);
  add_case(v, "argmin", "argmin", {kInt32, kInt64, kFloat32, kFloat64},
           [](Gen& g, DType t) { return Inputs{g.permutation(24).reshape({4, 6}).to(t)}; },
           [](const Inputs& x, DType) { return tessera::argmin(x[0], 0); });
  add_case(v, "cumsum", "cumsum", kAll, unary_inputs(D::Small, {3, 5}),
           [](const Inputs& x, DType) { return tessera::cumsum(x[0], 1); }, 4);
  add_case(v, "topk_values", "topk", kNumeric,
           [](Gen& g, DType t) { return Inputs{g.permutation(24).reshape({4, 6}).to(t)}; },
           [](const Inputs& x, DType) { return std::get<0>(tessera::topk(x[0], 3, 1)); });
  add_case(v, "topk_indices_smallest", "topk", kNumeric,
           [](Gen& g, DType t) { return Inputs{g.permutation(24).reshape({4, 6}).to(t)}; },
           [](const Inputs& x, DType) { return std::get<1>(tessera::topk(x[0], 2, 0, false)); });
  add_case(v, "scatter", "scatter", kAll,
           [](Gen& g, DType t) {
             Tensor rows = tessera::slice_copy(g.permutation(4), 0, 0, 2).reshape({2, 1});
             return Inputs{g.random({4, 3}, t), tessera::expand_copy(rows, {2, 3}), g.random({2, 3}, t)};
           },
           [](const Inputs& x, DType) { return tessera::scatter(x[0], 0, x[1], x[2]); });
  add_case(v, "scatter_reduce_sum", "scatter_reduce", kNumeric,
           [](Gen& g, DType t) { return Inputs{g.random({4, 3}, t, D::Small), g.indices({5, 3}, 4), g.random({5, 3}, t, D::Small)}; },
           [](const Inputs& x, DType) { return tessera::scatter_reduce(x[0], 0, x[1], x[2], "sum"); }, 4);
  add_case(v, "scatter_reduce_amax", "scatter_reduce", kNumeric,
           [](Gen& g, DType t) { return Inputs{g.random({4, 3}, t), g.indices({5, 3}, 4), g.random({5, 3}, t)}; },
           [](const Inputs& x, DType) { return tessera::scatter_reduce(x[0], 0, x[1], x[2], "amax", false); });
  add_case(v, "tril", "tril", kAll, unary_inputs(D::Any, {2, 4, 5}),
           [](const Inputs& x, DType) { return tessera::tril(x[0], 1); });
  add_case(v, "triu", "triu", kAll, unary_inputs(D::Any, {2, 4, 5}),
           [](const Inputs& x, DType) { return tessera::triu(x[0], -1); });
  add_case(v, "flip", "flip", kAll, unary_inputs(D::Any, {3, 4, 2}),
           [](const Inputs& x, DType) { return tessera::flip(x[0], {0, 2}); });
  add_case(v, "repeat", "repeat", kAll, unary_inputs(D::Any, {2, 3}),
           [](const Inputs& x, DType) { return tessera::repeat(x[0], {2, 1, 3}); });
  add_case(v, "conv_transpose2d", "conv_transpose2d", kFloating,
           [](Gen& g, DType t) { return Inputs{g.random({1, 4, 5, 5}, t), g.random({4, 3, 3, 3}, t), g.random({6}, t)}; },
           [](const Inputs& x, DType) { return tessera::conv_transpose2d(x[0], x[1], x[2], {2}, {1}, {1}, 2, {1}); }, 8);
  add_case(v, "resize_nearest", "_resize", kAll, unary_inputs(D::Any, {1, 2, 3, 4}),
           [](const Inputs& x, DType) {
             Dispatcher& d = Dispatcher::instance();
             Stack r = d.call_boxed(d.op("_resize"), Stack{x[0], std::vector<int64_t>{5, 8}, std::string("nearest"),
                                                          std::string("asymmetric"), std::string("floor")});
             return std::get<Tensor>(r[0]);
           });
  add_case(v, "resize_linear", "_resize", kFloating, unary_inputs(D::Any, {1, 2, 3, 4}),
           [](const Inputs& x, DType) {
             Dispatcher& d = Dispatcher::instance();
             Stack r = d.call_boxed(d.op("_resize"), Stack{x[0], std::vector<int64_t>{6, 7}, std::string("linear"),
                                                          std::string("half_pixel"), std::string("round_prefer_floor")});
             return std::get<Tensor>(r[0]);
           }, 2);
  add_case(v, "resize_cubic_scales", "_resize", kFloating,
           [](Gen& g, DType t) { return Inputs{g.random({1, 2, 4, 5}, t), tessera::tensor(std::vector<double>{1.5, 0.8}, {2})}; },
           [](const Inputs& x, DType) {
             Dispatcher& d = Dispatcher::instance();
             Stack r = d.call_boxed(d.op("_resize"), Stack{x[0], std::vector<int64_t>{6, 4}, std::string("cubic"),
                                                          std::string("half_pixel"), std::string("round_prefer_floor"),
                                                          -0.75, true, std::optional<Tensor>(x[1])});
             return std::get<Tensor>(r[0]);
           }, 4);
  add_case(v, "logsumexp", "logsumexp", kFloating, unary_inputs(D::Any, {3, 4, 5}),
           [](const Inputs& x, DType) { return tessera::logsumexp(x[0], {0, 2}, true); }, 2);
  add_case(v, "linalg_vector_norm", "linalg_vector_norm", kFloating, unary_inputs(D::Any, {3, 4, 5}),
           [](const Inputs& x, DType) { return tessera::linalg_vector_norm(x[0], 2, IntArrayRef({1})); }, 4);
  return v;
}

}  // namespace

const std::vector<Case>& cases() {
  static const std::vector<Case> table = build();
  return table;
}

}  // namespace tessera::cts
