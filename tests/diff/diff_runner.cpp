// The C++ half of the differential op test (diff_test.py drives it; see docs/testing.md).
// Reads one JSON document on stdin, {"device": NAME, "cases": [CASE...]}, runs every case through
// the public API on that device and writes {"results": [RESULT...]} on stdout.
//
//   CASE   = {"id": N, "op": NAME, "inputs": [TENSOR...], "scalar": SCALAR?, "attrs": {...}}
//   TENSOR = {"dtype": "float16", "shape": [2, 3], "hex": little-endian bytes, row-major}
//   SCALAR = {"kind": "int" | "float" | "bool", "value": number | true | "nan" | "inf" | "-inf"}
//   RESULT = {"id": N, "dtype", "shape", "hex", "device"}  or  {"id": N, "error": one line}
//
// A case that throws is a result (the driver decides whether an error was expected); the process
// keeps going. Exit status 2 means the request itself was unusable (bad JSON, unknown device).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/dispatcher.h"
#include "tessera/tessera.h"

namespace ts = tessera;
using nlohmann::json;

namespace {

std::vector<uint8_t> from_hex(const std::string& hex) {
  TESSERA_CHECK(hex.size() % 2 == 0, "hex payload has an odd length (", hex.size(), ")");
  std::vector<uint8_t> out(hex.size() / 2);
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    TESSERA_CHECK(false, "bad hex digit '", c, "' in a tensor payload");
    return 0;
  };
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return out;
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

std::vector<int64_t> shape_of(const json& j) { return j.get<std::vector<int64_t>>(); }

ts::Tensor make_input(const json& j, ts::Device device) {
  ts::DType dtype = ts::dtype_from_name(j.at("dtype").get<std::string>());
  std::vector<int64_t> shape = shape_of(j.at("shape"));
  std::vector<uint8_t> bytes = from_hex(j.at("hex").get<std::string>());
  int64_t numel = ts::compute_numel(shape);
  size_t want = 0;
  TESSERA_CHECK(!__builtin_mul_overflow(size_t(numel), ts::itemsize(dtype), &want) && want == bytes.size(),
                "tensor payload holds ", bytes.size(), " bytes; shape and dtype ", ts::dtype_name(dtype),
                " need ", want);
  ts::Tensor t = ts::tensor_from_buffer(bytes.data(), dtype, size_t(numel), shape, ts::TensorOptions());
  // A transposed view (last two dims swapped, data laid out for the swapped shape) exercises strides.
  if (j.value("transposed", false)) {
    std::vector<int64_t> swapped = shape;
    std::swap(swapped[swapped.size() - 2], swapped.back());
    t = ts::tensor_from_buffer(bytes.data(), dtype, size_t(numel), swapped, ts::TensorOptions()).transpose(-2, -1);
  }
  if (shape.empty()) t = t.view(shape);  // tensor_from_buffer reads empty sizes as 1-D
  return t.to(device);
}

double json_double(const json& v) {
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    TESSERA_CHECK(false, "unknown number spelling '", s, "' (expected nan, inf or -inf)");
  }
  return v.get<double>();
}

ts::Scalar make_scalar(const json& j) {
  std::string kind = j.at("kind").get<std::string>();
  if (kind == "bool") return ts::Scalar(j.at("value").get<bool>());
  if (kind == "int") return ts::Scalar(j.at("value").get<int64_t>());
  TESSERA_CHECK(kind == "float", "unknown scalar kind '", kind, "' (expected int, float or bool)");
  return ts::Scalar(json_double(j.at("value")));
}

ts::Tensor binary(const std::string& op, const ts::Tensor& a, const ts::Tensor& b, const json& attrs) {
  std::optional<ts::Scalar> alpha;
  if (attrs.contains("alpha")) alpha = make_scalar(attrs["alpha"]);
  if (op == "add") return alpha ? ts::add(a, b, *alpha) : a + b;
  if (op == "sub") return alpha ? ts::sub(a, b, *alpha) : a - b;
  if (op == "mul") return a * b;
  if (op == "div") return a / b;
  if (op == "pow") return ts::pow(a, b);
  if (op == "maximum") return ts::maximum(a, b);
  if (op == "minimum") return ts::minimum(a, b);
  if (op == "eq") return ts::eq(a, b);
  if (op == "ne") return ts::ne(a, b);
  if (op == "lt") return ts::lt(a, b);
  if (op == "le") return ts::le(a, b);
  if (op == "gt") return ts::gt(a, b);
  if (op == "ge") return ts::ge(a, b);
  if (op == "logical_and") return ts::logical_and(a, b);
  if (op == "logical_or") return ts::logical_or(a, b);
  if (op == "matmul") return ts::matmul(a, b);
  if (op == "remainder") return ts::remainder(a, b);
  if (op == "fmod") return ts::fmod(a, b);
  if (op == "floor_divide") return ts::floor_divide(a, b);
  if (op == "bitwise_and") return ts::bitwise_and(a, b);
  if (op == "bitwise_or") return ts::bitwise_or(a, b);
  if (op == "bitwise_xor") return ts::bitwise_xor(a, b);
  if (op == "bitwise_left_shift") return ts::bitwise_left_shift(a, b);
  if (op == "bitwise_right_shift") return ts::bitwise_right_shift(a, b);
  if (op == "logical_xor") return ts::logical_xor(a, b);
  if (op == "atan2") return ts::atan2(a, b);
  if (op == "prelu") return ts::prelu(a, b);
  if (op == "_prelu_kernel") {  // private: no public function, a boxed call as the ONNX importer makes
    ts::Dispatcher& d = ts::Dispatcher::instance();
    return std::get<ts::Tensor>(d.call_boxed(d.op("_prelu_kernel"), ts::Stack{a, b}).at(0));
  }
  TESSERA_CHECK(false, "diff_runner: unknown binary op '", op, "'");
  return {};
}

// `x OP number` (side "right") or `number OP x` (side "left") through the C++ operators.
ts::Tensor with_scalar(const std::string& op, const ts::Tensor& x, const ts::Scalar& s, const std::string& side) {
  bool right = side == "right";
  if (op == "add") return right ? x + s : s + x;
  if (op == "sub") return right ? x - s : s - x;
  if (op == "mul") return right ? x * s : s * x;
  if (op == "div") return right ? x / s : s / x;
  if (op == "pow" && right) return ts::pow(x, s);
  TESSERA_CHECK(false, "diff_runner: no scalar form for op '", op, "' on the ", side);
  return {};
}

ts::Tensor unary(const std::string& op, const ts::Tensor& x, const json& attrs) {
  if (op == "neg") return ts::neg(x);
  if (op == "abs") return ts::abs(x);
  if (op == "exp") return ts::exp(x);
  if (op == "log") return ts::log(x);
  if (op == "sqrt") return ts::sqrt(x);
  if (op == "rsqrt") return ts::rsqrt(x);
  if (op == "sin") return ts::sin(x);
  if (op == "cos") return ts::cos(x);
  if (op == "tanh") return ts::tanh(x);
  if (op == "sigmoid") return ts::sigmoid(x);
  if (op == "relu") return ts::relu(x);
  if (op == "gelu") return ts::gelu(x, attrs.value("approximate", std::string("none")));
  if (op == "silu") return ts::silu(x);
  if (op == "erf") return ts::erf(x);
  // The pointwise ops for ONNX models; a parameter absent from attrs takes the schema's default.
  auto num = [&](const char* key, double fallback) {
    return attrs.contains(key) ? ts::Scalar(json_double(attrs[key])) : ts::Scalar(fallback);
  };
  if (op == "leaky_relu") return ts::leaky_relu(x, num("negative_slope", 0.01));
  if (op == "elu") return ts::elu(x, num("alpha", 1), num("scale", 1), num("input_scale", 1));
  if (op == "selu") return ts::selu(x);
  if (op == "celu") return ts::celu(x, num("alpha", 1));
  if (op == "hardsigmoid") return ts::hardsigmoid(x);
  if (op == "hardswish") return ts::hardswish(x);
  if (op == "hardtanh") return ts::hardtanh(x, num("min_val", -1), num("max_val", 1));
  if (op == "softplus") return ts::softplus(x, num("beta", 1), num("threshold", 20));
  if (op == "mish") return ts::mish(x);
  if (op == "softsign") return ts::softsign(x);
  if (op == "floor") return ts::floor(x);
  if (op == "ceil") return ts::ceil(x);
  if (op == "round") return ts::round(x);
  if (op == "trunc") return ts::trunc(x);
  if (op == "sign") return ts::sign(x);
  if (op == "reciprocal") return ts::reciprocal(x);
  if (op == "tan") return ts::tan(x);
  if (op == "asin") return ts::asin(x);
  if (op == "acos") return ts::acos(x);
  if (op == "atan") return ts::atan(x);
  if (op == "sinh") return ts::sinh(x);
  if (op == "cosh") return ts::cosh(x);
  if (op == "asinh") return ts::asinh(x);
  if (op == "acosh") return ts::acosh(x);
  if (op == "atanh") return ts::atanh(x);
  if (op == "log1p") return ts::log1p(x);
  if (op == "expm1") return ts::expm1(x);
  if (op == "isnan") return ts::isnan(x);
  if (op == "isinf") return ts::isinf(x);
  if (op == "logical_not") return ts::logical_not(x);
  if (op == "bitwise_not") return ts::bitwise_not(x);
  TESSERA_CHECK(false, "diff_runner: unknown unary op '", op, "'");
  return {};
}

ts::Tensor reduction(const std::string& op, const ts::Tensor& x, const json& attrs) {
  std::vector<int64_t> dims = attrs.value("dims", std::vector<int64_t>{});
  bool keepdim = attrs.value("keepdim", false);
  if (op == "sum") return ts::sum(x, dims, keepdim);
  if (op == "mean") return ts::mean(x, dims, keepdim);
  if (op == "amax") return ts::amax(x, dims, keepdim);
  if (op == "amin") return ts::amin(x, dims, keepdim);
  if (op == "prod") return ts::prod(x, dims, keepdim);
  if (op == "var") return ts::var(x, dims, attrs.value("correction", int64_t(1)), keepdim);
  if (op == "argmax") {
    std::optional<int64_t> dim;
    if (attrs.contains("dim") && !attrs["dim"].is_null()) dim = attrs["dim"].get<int64_t>();
    return ts::argmax(x, dim, keepdim);
  }
  TESSERA_CHECK(false, "diff_runner: unknown reduction '", op, "'");
  return {};
}

std::optional<ts::Tensor> optional_input(const std::vector<ts::Tensor>& in, size_t i) {
  if (i < in.size()) return in[i];
  return std::nullopt;
}

ts::Tensor run_case(const json& c, ts::Device device) {
  const std::string op = c.at("op").get<std::string>();
  const json attrs = c.value("attrs", json::object());
  std::vector<ts::Tensor> in;
  for (const json& t : c.at("inputs")) in.push_back(make_input(t, device));
  auto need = [&](size_t n) {
    TESSERA_CHECK(in.size() >= n, "diff_runner: op '", op, "' needs ", n, " inputs, got ", in.size());
  };

  if (c.contains("scalar") && op != "fill_" && op != "full") {
    need(1);
    return with_scalar(op, in[0], make_scalar(c["scalar"]), attrs.value("side", std::string("right")));
  }
  if (op == "clamp") {
    auto bound = [&](const char* key) -> std::optional<ts::Scalar> {
      if (!attrs.contains(key) || attrs[key].is_null()) return std::nullopt;
      return make_scalar(attrs[key]);
    };
    return ts::clamp(in.at(0), bound("min"), bound("max"));
  }
  if (op == "where") {
    need(3);
    return ts::where(in[0], in[1], in[2]);
  }
  if (op == "softmax") return attrs.value("method", false) ? in.at(0).softmax(attrs.at("dim").get<int64_t>())
                                                          : ts::softmax(in.at(0), attrs.at("dim").get<int64_t>());
  if (op == "log_softmax") return ts::log_softmax(in.at(0), attrs.at("dim").get<int64_t>());
  if (op == "layer_norm") {
    need(1);
    return ts::layer_norm(in[0], shape_of(attrs.at("normalized_shape")), optional_input(in, 1),
                          optional_input(in, 2), attrs.value("eps", 1e-5));
  }
  if (op == "rms_norm") {
    need(1);
    std::optional<double> eps;
    if (attrs.contains("eps")) eps = attrs["eps"].get<double>();
    return ts::rms_norm(in[0], shape_of(attrs.at("normalized_shape")), optional_input(in, 1), eps);
  }
  if (op == "linear") {
    need(2);
    return ts::linear(in[0], in[1], optional_input(in, 2));
  }
  if (op == "cat") return ts::cat(in, attrs.value("dim", int64_t(0)));
  if (op == "fill_") {
    need(1);
    ts::Tensor t = in[0];
    t.fill_(make_scalar(c.at("scalar")));
    return t;
  }
  if (op == "full") {
    ts::TensorOptions options = ts::TensorOptions(device);
    if (attrs.contains("dtype")) options = options.dtype(ts::dtype_from_name(attrs["dtype"].get<std::string>()));
    return ts::full(shape_of(attrs.at("shape")), make_scalar(c.at("scalar")), options);
  }
  if (op == "allclose") {
    need(2);
    bool close = ts::allclose(in[0], in[1], attrs.value("rtol", 1e-5), attrs.value("atol", 1e-8));
    return ts::scalar_tensor(close, ts::TensorOptions(device).dtype(ts::kBool));
  }
  if (op == "to") return in.at(0).to(ts::dtype_from_name(attrs.at("dtype").get<std::string>()));
  if (in.size() == 2) return binary(op, in[0], in[1], attrs);
  if (op == "sum" || op == "mean" || op == "amax" || op == "amin" || op == "prod" || op == "var" || op == "argmax")
    return reduction(op, in.at(0), attrs);
  need(1);
  return unary(op, in[0], attrs);
}

std::string one_line(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

json result_of(const ts::Tensor& r) {
  ts::Tensor c = r.to("cpu").contiguous();
  json out;
  out["dtype"] = std::string(ts::dtype_name(c.dtype()));
  out["shape"] = std::vector<int64_t>(c.sizes().begin(), c.sizes().end());
  out["device"] = ts::device_type_name(r.device().type());
  out["hex"] = c.numel() == 0 ? std::string() : to_hex(static_cast<const uint8_t*>(c.raw_data_ptr()), c.nbytes());
  return out;
}

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  std::ostringstream text;
  text << std::cin.rdbuf();
  json request;
  try {
    request = json::parse(text.str());
  } catch (const std::exception& e) {
    std::cerr << "diff_runner: stdin is not a JSON request: " << e.what() << "\n";
    return 2;
  }
  std::string name = request.value("device", std::string("cpu"));
  ts::Device device(ts::DeviceType::CPU);
  try {
    device = ts::Device(name);
    TESSERA_CHECK(ts::device_count(device.type()) > 0, "device '", name,
                  "' has no devices here (see `tessera devices` for why)");
  } catch (const std::exception& e) {
    std::cerr << "diff_runner: " << one_line(e.what()) << "\n";
    return 2;
  }
  json results = json::array();
  for (const json& c : request.at("cases")) {
    json r;
    try {
      r = result_of(run_case(c, device));
    } catch (const ts::Error& e) {
      r["error"] = one_line(e.what());
    } catch (const std::exception& e) {
      r["error"] = "(not a tessera::Error) " + one_line(e.what());
    }
    r["id"] = c.at("id");
    results.push_back(std::move(r));
  }
  std::cout << json{{"results", results}}.dump() << "\n";
  return 0;
}
