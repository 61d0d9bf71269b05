// What a converter sees: inputs, attributes, outputs of one node (convert.h), and the helpers the
// converter families share.
#include "convert.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tessera/dispatch_key.h"

namespace tessera::onnx::detail {

namespace {

const DispatchKeySet kExportKey = DispatchKeySet::functionality(Functionality::Export);

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

std::string NodeCtx::where() const {
  return "node '" + node_.name() + "' (" + node_.op_type() + ", opset " + std::to_string(opset_) + ")";
}

void NodeCtx::fail(const std::string& why) const {
  tessera::detail::throw_error(ErrorCode::InvalidArgument, "onnx import: " + where() + ": " + why);
}

bool NodeCtx::has(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }

const Val& NodeCtx::val(int i) const {
  if (!has(i)) fail("input " + std::to_string(i) + " is required");
  auto it = env_.find(node_.input(i));
  if (it == env_.end()) fail("input '" + node_.input(i) + "' is not produced by any earlier node, input or initializer");
  return it->second;
}

Tensor NodeCtx::in(int i) const {
  const Val& v = val(i);
  if (v.t.defined()) return v.t;
  std::vector<int64_t> values;
  for (const SymSize& s : *v.ints) {
    if (!s.is_constant())
      fail("input '" + node_.input(i) + "' is a size computation with the dynamic value " + s.str() +
           ", used as tensor data; only constant sizes can become tensors (fix the dim with ImportOptions::fixed_dims)");
    values.push_back(s.constant());
  }
  std::vector<int64_t> sizes;
  if (!v.scalar) sizes.push_back(int64_t(values.size()));
  Tensor t = host_tensor(values, sizes, v.int_dtype);
  const_cast<Val&>(v).t = t;  // materialised once: every use reads the same weight
  const_cast<Val&>(v).constant = true;
  return t;
}

std::optional<Tensor> NodeCtx::opt(int i) const {
  if (!has(i)) return std::nullopt;
  return in(i);
}

Sizes NodeCtx::ints(int i) const {
  const Val& v = val(i);
  if (!v.ints) fail("input " + std::to_string(i) + " ('" + node_.input(i) + "') must be known at import (a constant or a shape computation); it is computed at run time");
  return *v.ints;
}

std::vector<int64_t> NodeCtx::const_ints(int i) const {
  std::vector<int64_t> out;
  for (const SymSize& s : ints(i)) {
    if (!s.is_constant()) fail("input " + std::to_string(i) + " ('" + node_.input(i) + "') has the dynamic value " + s.str() + " where a constant is needed");
    out.push_back(s.constant());
  }
  return out;
}

std::vector<double> NodeCtx::const_doubles(int i) const {
  const Val& v = val(i);
  if (v.ints) {
    std::vector<double> out;
    for (int64_t x : const_ints(i)) out.push_back(double(x));
    return out;
  }
  if (!v.constant) fail("input " + std::to_string(i) + " ('" + node_.input(i) + "') must be a constant");
  ExcludeDispatchKeyGuard plain(kExportKey);
  Tensor d = v.t.to(kFloat64).contiguous();
  const double* p = d.const_data_ptr<double>();
  return std::vector<double>(p, p + d.numel());
}

double NodeCtx::const_scalar(int i) const {
  std::vector<double> v = const_doubles(i);
  if (v.size() != 1) fail("input " + std::to_string(i) + " ('" + node_.input(i) + "') must hold one element, it holds " + std::to_string(v.size()));
  return v[0];
}

void NodeCtx::check_elements(int64_t count, const char* what) const {
  if (count < 0 || count > kMaxImportElements)
    fail(std::string(what) + " would have " + std::to_string(count) + " elements, more than the importer's limit of " +
         std::to_string(kMaxImportElements));
}

void NodeCtx::ignore_attrs(std::initializer_list<const char*> names) const {
  for (const char* n : names) handled_.emplace_back(n);
}

std::string NodeCtx::unhandled_attr() const {
  for (const auto& a : node_.attribute())
    if (std::find(handled_.begin(), handled_.end(), a.name()) == handled_.end()) return a.name();
  return "";
}

bool NodeCtx::has_attr(const char* name) const { return find_attr(name) != nullptr; }

const ::onnx::AttributeProto* NodeCtx::find_attr(const char* name) const {
  handled_.emplace_back(name);
  for (const auto& a : node_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t NodeCtx::attr_int(const char* name, int64_t dflt) const {
  const auto* a = find_attr(name);
  if (!a) return dflt;
  if (a->type() != ::onnx::AttributeProto::INT) fail(std::string("attribute '") + name + "' must be an int");
  return a->i();
}

double NodeCtx::attr_float(const char* name, double dflt) const {
  const auto* a = find_attr(name);
  if (!a) return dflt;
  if (a->type() != ::onnx::AttributeProto::FLOAT) fail(std::string("attribute '") + name + "' must be a float");
  return a->f();
}

std::string NodeCtx::attr_string(const char* name, const std::string& dflt) const {
  const auto* a = find_attr(name);
  if (!a) return dflt;
  if (a->type() != ::onnx::AttributeProto::STRING) fail(std::string("attribute '") + name + "' must be a string");
  return a->s();
}

std::vector<int64_t> NodeCtx::attr_ints(const char* name, const std::vector<int64_t>& dflt) const {
  const auto* a = find_attr(name);
  if (!a) return dflt;
  if (a->type() != ::onnx::AttributeProto::INTS) fail(std::string("attribute '") + name + "' must be a list of ints");
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::vector<double> NodeCtx::attr_floats(const char* name) const {
  const auto* a = find_attr(name);
  if (!a) return {};
  if (a->type() != ::onnx::AttributeProto::FLOATS) fail(std::string("attribute '") + name + "' must be a list of floats");
  return std::vector<double>(a->floats().begin(), a->floats().end());
}

const ::onnx::TensorProto* NodeCtx::attr_tensor(const char* name) const {
  const auto* a = find_attr(name);
  if (!a) return nullptr;
  if (a->type() != ::onnx::AttributeProto::TENSOR) fail(std::string("attribute '") + name + "' must be a tensor");
  return &a->t();
}

std::optional<std::vector<int64_t>> NodeCtx::axes(int i, const char* name) const {
  if (has(i)) return const_ints(i);
  if (has_attr(name)) return attr_ints(name, {});
  return std::nullopt;
}

void NodeCtx::out(int i, Val v) {
  if (!output_used(i)) return;
  // A host tensor (not tracing) made from constants is a constant too: later nodes may read it.
  if (v.t.defined() && !v.constant && !v.ints && !v.t.key_set().has(Functionality::Export)) v = constant_val(v.t);
  env_[node_.output(i)] = std::move(v);
}

void NodeCtx::out_ints(int i, Sizes ints, bool scalar, DType dtype) {
  Val v;
  v.ints = std::move(ints);
  v.scalar = scalar;
  v.int_dtype = dtype;
  out(i, std::move(v));
}

std::vector<int64_t> NodeCtx::example(const Sizes& s) const {
  std::vector<int64_t> out;
  for (const SymSize& x : s) out.push_back(x.evaluate(example_));
  return out;
}

int64_t norm_axis(const NodeCtx& c, int64_t a, int64_t rank) {
  const int64_t r = a < 0 ? a + rank : a;
  if (r < 0 || r >= rank) c.fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return r;
}

SymSize product(const Sizes& s, size_t begin, size_t end) {
  SymSize p(int64_t(1));
  for (size_t i = begin; i < end && i < s.size(); ++i) p = p * s[i];
  return p;
}

Val constant_val(const Tensor& t) {
  Val v{t, std::nullopt, false, kInt64, true};
  if ((t.dtype() == kInt64 || t.dtype() == kInt32) && t.dim() <= 1 && t.numel() <= 64) {
    ExcludeDispatchKeyGuard plain(kExportKey);
    Tensor d = t.cpu().to(kInt64).contiguous();  // the values, read on the host
    const int64_t* p = d.const_data_ptr<int64_t>();
    v.ints = Sizes(p, p + d.numel());
    v.scalar = t.dim() == 0;
    v.int_dtype = t.dtype();
  }
  return v;
}

Tensor host_tensor(const std::vector<int64_t>& values, IntArrayRef sizes, DType dtype) {
  ExcludeDispatchKeyGuard plain(kExportKey);
  // (made 1-D, then given its sizes: an empty size list would read as "1-D" to tessera::tensor)
  return tessera::tensor(values, {int64_t(values.size())}, tessera::dtype(kInt64)).reshape(sizes).to(dtype);
}

Tensor host_scalar(double value, DType dtype) {
  ExcludeDispatchKeyGuard plain(kExportKey);
  return tessera::full({}, value, tessera::dtype(dtype));
}

Tensor reshape_to(const NodeCtx& c, const Tensor& x, const Sizes& sizes) {
  const Sizes have = c.sizes(x);
  bool same = have.size() == sizes.size();
  for (size_t i = 0; same && i < sizes.size(); ++i) same = have[i].same_as(sizes[i]);
  if (same) return x;
  return x.contiguous().view(c.example(sizes));
}

Tensor symbolic_ones(const NodeCtx& c, const Sizes& shape) {
  const int64_t r = int64_t(shape.size());
  std::vector<int64_t> fixed(size_t(r), 1);
  std::vector<size_t> dynamic;
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i].is_constant()) {
      if (shape[i].constant() < 0) c.fail("a negative size " + std::to_string(shape[i].constant()));
      fixed[i] = shape[i].constant();
      if (__builtin_mul_overflow(numel, fixed[i], &numel)) numel = INT64_MAX;
    } else {
      dynamic.push_back(i);
    }
  }
  c.check_elements(numel, "the constant part of a broadcast");
  Tensor out;
  {
    ExcludeDispatchKeyGuard plain(kExportKey);
    out = tessera::ones(fixed, tessera::dtype(kBool));
  }
  for (size_t i : dynamic) {
    auto name = shape[i].plain_symbol();
    const Witnesses* w = c.witnesses();
    auto it = name && w ? w->find(*name) : Witnesses::const_iterator();
    if (!name || !w || it == w->end())
      c.fail("needs a tensor of the dynamic size " + shape[i].str() + ", which is not a dim of an input");
    // The witness input summed over every other dim: [n], all true below. (A sum, not a slice at
    // index 0: slicing a dynamic dim would make the capture compare it with 1, a guard.)
    Tensor t = it->second.first;
    const int64_t d = it->second.second;
    std::vector<int64_t> others;
    for (int64_t k = 0; k < t.dim(); ++k)
      if (k != d) others.push_back(k);
    if (!others.empty()) t = tessera::sum(t, others, false);
    Tensor v = reshape_to(c, t, {shape[i]});
    Tensor all = tessera::logical_or(tessera::eq(v, v), tessera::ne(v, v));  // true even for NaN
    Sizes at(size_t(r), SymSize(int64_t(1)));
    at[i] = shape[i];
    out = tessera::logical_and(out, reshape_to(c, all, at));
  }
  return out;
}

Tensor call_op(const NodeCtx& c, const char* name, Stack args) {
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry* op = d.find_op(name);
  if (!op) c.fail(std::string("needs the op '") + name + "', which this runtime's op contract does not have");
  Stack out = d.call_boxed(*op, std::move(args));
  TESSERA_INTERNAL_ASSERT(!out.empty() && std::holds_alternative<Tensor>(out[0]));
  return std::get<Tensor>(out[0]);
}

std::vector<Tensor> call_op_outputs(const NodeCtx& c, const char* name, Stack args) {
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry* op = d.find_op(name);
  if (!op) c.fail(std::string("needs the op '") + name + "', which this runtime's op contract does not have");
  std::vector<Tensor> out;
  for (Value& v : d.call_boxed(*op, std::move(args))) {
    TESSERA_INTERNAL_ASSERT(std::holds_alternative<Tensor>(v));
    out.push_back(std::get<Tensor>(v));
  }
  return out;
}

std::optional<DType> dtype_of_onnx(int32_t e) {
  using TP = ::onnx::TensorProto;
  switch (e) {
    case TP::FLOAT: return kFloat32;
    case TP::UINT8: return kUInt8;
    case TP::INT8: return kInt8;
    case TP::INT16: return kInt16;
    case TP::INT32: return kInt32;
    case TP::INT64: return kInt64;
    case TP::BOOL: return kBool;
    case TP::FLOAT16: return kFloat16;
    case TP::DOUBLE: return kFloat64;
    case TP::BFLOAT16: return kBFloat16;
    default: return std::nullopt;
  }
}

int32_t onnx_of_dtype(DType t) {
  using TP = ::onnx::TensorProto;
  switch (t) {
    case kFloat32: return TP::FLOAT;
    case kUInt8: return TP::UINT8;
    case kInt8: return TP::INT8;
    case kInt16: return TP::INT16;
    case kInt32: return TP::INT32;
    case kInt64: return TP::INT64;
    case kBool: return TP::BOOL;
    case kFloat16: return TP::FLOAT16;
    case kFloat64: return TP::DOUBLE;
    case kBFloat16: return TP::BFLOAT16;
    default: return TP::UNDEFINED;
  }
}

namespace {

// Reads [offset, offset + length) of an external data file confined to `dir`.
std::string read_external(const ::onnx::TensorProto& p, const std::string& dir, uint64_t want) {
  std::string location;
  uint64_t offset = 0, length = UINT64_MAX;
  for (const auto& kv : p.external_data()) {
    auto number = [&](const std::string& s) {
      TESSERA_CHECK(!s.empty() && s.size() <= 19 && s.find_first_not_of("0123456789") == std::string::npos,
                    "onnx import: tensor '", p.name(), "': external data ", kv.key(), " '", s, "' is not a number");
      return uint64_t(std::stoull(s));
    };
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = number(kv.value());
    else if (kv.key() == "length") length = number(kv.value());
  }
  namespace fs = std::filesystem;
  TESSERA_CHECK(!dir.empty(), "onnx import: tensor '", p.name(), "' has external data ('", location,
                "') but the model was given as bytes; set ImportOptions::external_data_dir to the model's folder");
  TESSERA_CHECK(!location.empty(), "onnx import: tensor '", p.name(), "' has external data without a location");
  const fs::path rel(location);
  bool escapes = rel.is_absolute() || location.find('\0') != std::string::npos;
  for (const auto& part : rel) escapes = escapes || part == "..";
  const fs::path base = fs::weakly_canonical(fs::path(dir));
  const fs::path full = fs::weakly_canonical(base / rel);
  auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  escapes = escapes || b != base.end();
  TESSERA_CHECK(!escapes, "onnx import: tensor '", p.name(), "': external data location '", location,
                "' is outside the model's folder ", base.string(), "; external files must lie in that folder");
  std::error_code ec;
  const uint64_t file_size = fs::file_size(full, ec);
  TESSERA_CHECK(!ec && fs::is_regular_file(full), "onnx import: tensor '", p.name(), "': external data file ",
                full.string(), " cannot be read (", ec ? ec.message() : "not a regular file", ")");
  if (length == UINT64_MAX) length = want;
  TESSERA_CHECK(length == want, "onnx import: tensor '", p.name(), "': external data length ", length,
                " does not match its dims and type (", want, " bytes)");
  TESSERA_CHECK(offset <= file_size && length <= file_size - offset, "onnx import: tensor '", p.name(),
                "': external data [", offset, ", ", offset, " + ", length, ") is past the end of ", full.string(),
                " (", file_size, " bytes)");
  std::ifstream in(full, std::ios::binary);
  std::string out(length, '\0');
  in.seekg(std::streamoff(offset));
  in.read(out.data(), std::streamsize(length));
  TESSERA_CHECK(bool(in), "onnx import: tensor '", p.name(), "': reading external data from ", full.string(), " failed");
  return out;
}

}  // namespace

Tensor tensor_from_proto(const ::onnx::TensorProto& p, const std::string& external_dir) {
  using TP = ::onnx::TensorProto;
  std::optional<DType> dt = dtype_of_onnx(p.data_type());
  TESSERA_CHECK(dt.has_value(), "onnx import: tensor '", p.name(), "' has data type ",
                TP::DataType_IsValid(p.data_type()) ? TP::DataType_Name(TP::DataType(p.data_type())) : std::to_string(p.data_type()),
                ", which Tessera has no dtype for (it has bool, uint8, int8, int16, int32, int64, float16, bfloat16, float, double)");
  std::vector<int64_t> sizes(p.dims().begin(), p.dims().end());
  int64_t numel = 1;
  for (int64_t d : sizes) {
    TESSERA_CHECK(d >= 0, "onnx import: tensor '", p.name(), "' has a negative dim ", d);
    TESSERA_CHECK(!__builtin_mul_overflow(numel, d, &numel), "onnx import: tensor '", p.name(), "' dims [", join(sizes), "] overflow");
  }
  const uint64_t item = uint64_t(itemsize(*dt));
  uint64_t nbytes = 0;
  TESSERA_CHECK(!__builtin_mul_overflow(uint64_t(numel), item, &nbytes), "onnx import: tensor '", p.name(), "' is too large");
  // The data's size is checked against the dims before anything is allocated (hostile dims).
  auto check_count = [&](int64_t have) {
    TESSERA_CHECK(have == numel, "onnx import: tensor '", p.name(), "' has ", have, " values for dims [", join(sizes),
                  "] (", numel, " elements)");
  };
  ExcludeDispatchKeyGuard plain(kExportKey);
  if (p.data_location() == TP::EXTERNAL) {
    std::string bytes = read_external(p, external_dir, nbytes);
    Tensor t = tessera::empty(sizes, tessera::dtype(*dt));
    if (nbytes) std::memcpy(t.raw_data_ptr(), bytes.data(), nbytes);
    return t;
  }
  if (p.has_raw_data()) {
    TESSERA_CHECK(p.raw_data().size() == nbytes, "onnx import: tensor '", p.name(), "' has ", p.raw_data().size(),
                  " bytes of raw data for dims [", join(sizes), "] of ", item, "-byte elements (", nbytes, " expected)");
    Tensor t = tessera::empty(sizes, tessera::dtype(*dt));
    if (nbytes) std::memcpy(t.raw_data_ptr(), p.raw_data().data(), nbytes);
    return t;
  }
  check_count(*dt == kFloat32 ? p.float_data_size() : *dt == kFloat64 ? p.double_data_size()
              : *dt == kInt64 ? p.int64_data_size() : p.int32_data_size());
  Tensor t = tessera::empty(sizes, tessera::dtype(*dt));
  uint8_t* dst = static_cast<uint8_t*>(t.raw_data_ptr());
  switch (*dt) {
    case kFloat32:
      if (nbytes) std::memcpy(dst, p.float_data().data(), nbytes);
      break;
    case kFloat64:
      if (nbytes) std::memcpy(dst, p.double_data().data(), nbytes);
      break;
    case kInt64:
      if (nbytes) std::memcpy(dst, p.int64_data().data(), nbytes);
      break;
    default: {  // int32_data holds every narrower type (float16/bfloat16 as their bits)
      for (int64_t i = 0; i < numel; ++i) {
        const int32_t v = p.int32_data(int(i));
        std::memcpy(dst + uint64_t(i) * item, &v, item);  // little-endian: the low bytes
      }
    }
  }
  return t;
}

}  // namespace tessera::onnx::detail
