// Note [Program file] in tessera/compiler/program_file.h.
#include "tessera/compiler/program_file.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/compiler/safetensors.h"
#include "tessera/compiler/zip_archive.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"
#include "tessera/sparse.h"
#include "tessera/sparse_format.h"
#include "tessera/version.h"
#include "passes/graph_edit.h"
#include "serialize/untrusted.h"

namespace tessera::compiler {

namespace {

using json = nlohmann::json;

constexpr const char* kProgramEntry = "program.json";
constexpr const char* kWeightsEntry = "weights.safetensors";

// Note [Semi-structured weights in the program file]
// A 2:4 semi-structured weight 'w' (tessera/sparse.h) is saved in its canonical form, not densified:
// program.json tags its signature input with "layout": "sparse_semi_structured(2:4)" (the graph
// value keeps the dense dtype and sizes), and weights.safetensors holds the entries 'w.values'
// (rows x 2 * ceil(cols / 4), the weight's dtype) and 'w.indices' (rows x ceil(groups / 2), U8),
// Note [2:4 canonical form]. Loading rebuilds the semi-structured tensor with
// sparse::from_semi_structured_parts, which checks every size and index bit of the file.
// docs/export.md, "Semi-structured weights".
std::string semi_structured_entry(const std::string& weight, const char* part) { return weight + "." + part; }

const char* node_kind_name(NodeKind k) {
  switch (k) {
    case NodeKind::Placeholder:
      return "placeholder";
    case NodeKind::Call:
      return "call";
    case NodeKind::Output:
      return "output";
  }
  return "?";
}

json float_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

json constant_json(const Constant& c) {
  struct V {
    json operator()(std::monostate) const { return {{"type", "none"}}; }
    json operator()(int64_t v) const { return {{"type", "int"}, {"value", v}}; }
    json operator()(double v) const { return {{"type", "float"}, {"value", float_json(v)}}; }
    json operator()(bool v) const { return {{"type", "bool"}, {"value", v}}; }
    json operator()(const std::vector<int64_t>& v) const { return {{"type", "int_list"}, {"value", v}}; }
    json operator()(const std::string& v) const { return {{"type", "string"}, {"value", v}}; }
    json operator()(DType t) const { return {{"type", "dtype"}, {"value", dtype_short_name(t)}}; }
  };
  return std::visit(V{}, c);
}

json argument_json(const Argument& a) {
  switch (a.kind) {
    case Argument::Kind::Tensor:
      return {{"kind", "tensor"}, {"value", a.values.at(0)}};
    case Argument::Kind::TensorList:
      return {{"kind", "tensor_list"}, {"values", a.values}};
    case Argument::Kind::None:
      return {{"kind", "none"}};
    case Argument::Kind::Constant: {
      json j = constant_json(a.constant);
      j["kind"] = "constant";
      return j;
    }
  }
  return {};
}

// A JSON node with the path that leads to it, for one-line messages:
// "model.tsr: program.json: nodes[3].args[1].value: expected an integer, got a string".
struct Field {
  const json& j;
  std::string path;
  const std::string& what;

  [[noreturn]] void fail(const std::string& msg) const {
    detail::throw_error(ErrorCode::InvalidArgument, what + ": " + (path.empty() ? "" : path + ": ") + msg);
  }
  void expect(bool ok, const char* expected) const {
    if (ok) return;
    std::string msg = "expected ";
    msg += expected;
    msg += ", got ";
    if (j.is_null()) {
      msg += "null";
    } else {
      msg += "a JSON ";
      msg += j.type_name();
      if (j.is_primitive()) msg.append(" ").append(j.dump().substr(0, 40));
    }
    fail(msg);
  }
  Field operator[](const char* key) const {
    expect(j.is_object(), "an object");
    auto it = j.find(key);
    if (it == j.end()) fail(std::string("field '") + key + "' is missing");
    return {*it, path.empty() ? std::string(key) : path + "." + key, what};
  }
  bool has(const char* key) const { return j.is_object() && j.contains(key); }
  Field at(size_t i) const { return {j[i], path + "[" + std::to_string(i) + "]", what}; }
  size_t array_size() const {
    expect(j.is_array(), "an array");
    return j.size();
  }
  int64_t integer() const {
    expect(j.is_number_integer() && (!j.is_number_unsigned() || j.get<uint64_t>() <= uint64_t(INT64_MAX)),
           "an integer");
    return j.get<int64_t>();
  }
  std::string string() const {
    expect(j.is_string(), "a string");
    return j.get<std::string>();
  }
  bool boolean() const {
    expect(j.is_boolean(), "true or false");
    return j.get<bool>();
  }
  double number() const {
    if (j.is_string()) {
      std::string s = j.get<std::string>();
      if (s == "nan") return NAN;
      if (s == "inf") return INFINITY;
      if (s == "-inf") return -INFINITY;
    }
    expect(j.is_number(), "a number (or \"nan\", \"inf\", \"-inf\")");
    return j.get<double>();
  }
  ValueId value_id(size_t num_values) const {
    int64_t v = integer();
    if (v < 0 || uint64_t(v) >= num_values)
      fail("value id " + std::to_string(v) + " out of range (the program has " + std::to_string(num_values) +
           " values)");
    return ValueId(v);
  }
  DType dtype() const {
    std::string s = string();
    auto t = dtype_from_short_name(s);
    if (!t) fail("unknown dtype '" + s + "' (known: bool, u8, i8, i16, i32, i64, f16, bf16, f32, f64)");
    return *t;
  }
};

Constant parse_constant(const Field& a) {
  std::string type = a["type"].string();
  if (type == "none") return std::monostate{};
  Field v = a["value"];
  if (type == "int") return v.integer();
  if (type == "float") return v.number();
  if (type == "bool") return v.boolean();
  if (type == "string") return v.string();
  if (type == "dtype") return v.dtype();
  if (type == "int_list") {
    std::vector<int64_t> out;
    size_t n = v.array_size();
    for (size_t i = 0; i < n; ++i) out.push_back(v.at(i).integer());
    return out;
  }
  a["type"].fail("unknown constant type '" + type +
                 "' (known: none, int, float, bool, int_list, string, dtype)");
}

Argument parse_argument(const Field& a, size_t num_values) {
  std::string kind = a["kind"].string();
  if (kind == "tensor") return Argument::tensor(a["value"].value_id(num_values));
  if (kind == "tensor_list") {
    Field vs = a["values"];
    std::vector<ValueId> ids;
    size_t n = vs.array_size();
    for (size_t i = 0; i < n; ++i) ids.push_back(vs.at(i).value_id(num_values));
    return Argument::tensor_list(std::move(ids));
  }
  if (kind == "none") return Argument::none();
  if (kind == "constant") return Argument::constant_value(parse_constant(a));
  a["kind"].fail("unknown argument kind '" + kind + "' (known: tensor, tensor_list, none, constant)");
}

// The graph's rules (Note [Export IR]) on a program read from a file: the verifier's checks, its
// problem reported at the JSON path of the node (Note [Verifier problems] in passes/graph_edit.h).
void check_parsed_program(const ExportedProgram& ep, const json& root, const std::string& what) {
  try {
    check_program(ep, /*weights=*/false);
  } catch (const VerifyProblem& p) {
    const Field top{root, "", what};
    if (p.node < 0) top.fail(p.message);
    const Field node = top["nodes"].at(size_t(p.node));
    if (p.field.empty()) node.fail(p.message);
    node[p.field.c_str()].fail(p.message);
  }
}

}  // namespace

std::string program_json(const ExportedProgram& ep) {
  TESSERA_CHECK(ep.state.empty(), "save: the program updates ", ep.state.size(),
                " tensors it closes over (a training step: parameters, optimizer state, gradients; Note [Program "
                "state]); such a program runs in this process only. Save the model's state_dict instead, or export "
                "the forward function");
  json values = json::array();
  for (const ValueInfo& v : ep.graph.values) {
    json sizes = json::array();
    for (const SymSize& s : v.type.sizes) sizes.push_back(s.str());
    values.push_back({{"name", v.name},
                      {"dtype", dtype_short_name(v.type.dtype)},
                      {"device", v.type.device.str()},
                      {"sizes", sizes}});
  }
  json nodes = json::array();
  for (const Node& n : ep.graph.nodes) {
    json args = json::array();
    for (const Argument& a : n.args) args.push_back(argument_json(a));
    nodes.push_back(
        {{"kind", node_kind_name(n.kind)}, {"target", n.target}, {"args", args}, {"outputs", n.outputs}});
  }
  json inputs = json::array(), outputs = json::array();
  for (const InputSpec& in : ep.signature.inputs) {
    json entry = {{"kind", input_kind_name(in.kind)}, {"name", in.name}, {"value", in.value}};
    auto w = ep.weights.find(in.name);
    if (in.kind != InputKind::UserInput && w != ep.weights.end() && sparse::is_sparse(w->second))
      entry["layout"] = sparse::kSemiStructuredLayout;
    inputs.push_back(std::move(entry));
  }
  for (const OutputSpec& out : ep.signature.outputs)
    outputs.push_back({{"name", out.name}, {"value", out.value}});
  json ranges = json::object();
  for (const auto& [name, r] : ep.ranges) ranges[name] = {{"min", r.min}, {"max", r.max}};
  json root = {{"format_version", {{"major", kProgramFormatMajor}, {"minor", kProgramFormatMinor}}},
               {"producer", std::string("tessera ") + TESSERA_VERSION_STRING},
               {"op_contract_version", ep.op_contract_version},
               {"values", values},
               {"nodes", nodes},
               {"signature", {{"inputs", inputs}, {"outputs", outputs}}},
               {"ranges", ranges}};
  if (!ep.guards.empty()) {
    json guards = json::array();
    for (const Guard& g : ep.guards) guards.push_back(g.str());
    root["guards"] = guards;
  }
  if (ep.compiled)  // format 1.1 (Note [Compiled artifact compatibility] in plugin_abi.h)
    root["compiled"] = {{"backend", ep.compiled->backend},
                        {"device", ep.compiled->device},
                        {"compatibility", ep.compiled->compatibility},
                        {"group_of_node", ep.compiled->group_of_node}};
  return root.dump(1);
}

namespace {

// `layouts` (optional) receives the "layout" of each weight that has one (by weight name).
ExportedProgram parse_program_json_unescaped(std::string_view text, const std::string& what,
                                             std::map<std::string, std::string>* layouts = nullptr) {
  json root = json::parse(text.begin(), text.end(), nullptr, false);
  if (root.is_discarded())
    detail::throw_error(ErrorCode::InvalidArgument, what + ": not valid JSON (truncated or corrupt file)");
  Field top{root, "", what};
  top.expect(root.is_object(), "an object");
  Field version = top["format_version"];
  int64_t major = version["major"].integer(), minor = version["minor"].integer();
  if (major != kProgramFormatMajor)
    version.fail("format " + std::to_string(major) + "." + std::to_string(minor) +
                 " is not readable by this runtime (reads " + std::to_string(kProgramFormatMajor) +
                 ".x, up to " + std::to_string(kProgramFormatMajor) + "." +
                 std::to_string(kProgramFormatMinor) + "); export it again with this runtime");
  ExportedProgram ep;
  ep.op_contract_version = top["op_contract_version"].string();
  top["producer"].string();

  Field values = top["values"];
  size_t nv = values.array_size();
  if (nv > size_t(INT32_MAX)) values.fail("too many values");
  for (size_t i = 0; i < nv; ++i) {
    Field v = values.at(i);
    DType dtype = v["dtype"].dtype();
    Field dev = v["device"];
    std::optional<Device> device;
    try {
      device = Device(dev.string());
    } catch (const Error& e) {
      dev.fail(e.what());
    }
    TensorType t{dtype, *device, {}};
    Field sizes = v["sizes"];
    size_t rank = sizes.array_size();
    if (rank > 64) sizes.fail("rank " + std::to_string(rank) + " exceeds 64");
    for (size_t d = 0; d < rank; ++d) {
      Field s = sizes.at(d);
      try {
        t.sizes.push_back(SymSize::parse(s.string()));
      } catch (const Error& e) {
        s.fail(e.what());
      }
    }
    ep.graph.values.push_back({std::move(t), v["name"].string()});
  }

  Field ranges = top["ranges"];
  ranges.expect(root["ranges"].is_object(), "an object");
  for (const auto& [name, r] : root["ranges"].items()) {
    Field f{r, "ranges." + name, what};
    try {
      (void)SymSize::symbol(name);
    } catch (const Error& e) {
      f.fail(e.what());
    }
    SymbolRange range{f["min"].integer(), f["max"].integer()};
    if (range.min < 0 || range.min > range.max)
      f.fail("range [" + std::to_string(range.min) + ", " + std::to_string(range.max) +
             "] is empty or negative");
    ep.ranges[name] = range;
  }

  if (top.has("guards")) {
    Field guards = top["guards"];
    size_t n = guards.array_size();
    for (size_t i = 0; i < n; ++i) {
      Field f = guards.at(i);
      Guard g;
      try {
        g = Guard::parse(f.string());
      } catch (const Error& e) {
        f.fail(e.what());
      }
      for (const SymSize* side : {&g.lhs, &g.rhs})
        for (const std::string& sym : side->symbols())
          if (!ep.ranges.count(sym)) f.fail("symbol '" + sym + "' has no entry in ranges");
      ep.guards.push_back(std::move(g));
    }
  }

  Field sig = top["signature"];
  Field inputs = sig["inputs"];
  size_t ni = inputs.array_size();
  std::set<std::string> input_names;
  for (size_t i = 0; i < ni; ++i) {
    Field in = inputs.at(i);
    InputSpec spec;
    std::string kind = in["kind"].string();
    if (kind == "user_input")
      spec.kind = InputKind::UserInput;
    else if (kind == "parameter")
      spec.kind = InputKind::Parameter;
    else if (kind == "constant")
      spec.kind = InputKind::Constant;
    else
      in["kind"].fail("unknown input kind '" + kind + "' (known: user_input, parameter, constant)");
    spec.name = in["name"].string();
    if (!input_names.insert(spec.name).second) in["name"].fail("input '" + spec.name + "' appears twice");
    if (in.has("layout")) {
      std::string layout = in["layout"].string();
      if (layout != sparse::kSemiStructuredLayout)
        in["layout"].fail("unknown layout '" + layout + "' (known: " + sparse::kSemiStructuredLayout + ")");
      if (spec.kind == InputKind::UserInput) in["layout"].fail("a user input has no layout; only weights do");
      if (layouts) (*layouts)[spec.name] = layout;
    }
    spec.value = in["value"].value_id(nv);
    ep.signature.inputs.push_back(std::move(spec));
  }
  Field outputs = sig["outputs"];
  size_t no = outputs.array_size();
  for (size_t i = 0; i < no; ++i) {
    Field out = outputs.at(i);
    ep.signature.outputs.push_back({out["name"].string(), out["value"].value_id(nv)});
  }

  Field nodes = top["nodes"];
  size_t nn = nodes.array_size();
  for (size_t i = 0; i < nn; ++i) {
    Field n = nodes.at(i);
    Node node;
    std::string kind = n["kind"].string();
    if (kind == "placeholder")
      node.kind = NodeKind::Placeholder;
    else if (kind == "call")
      node.kind = NodeKind::Call;
    else if (kind == "output")
      node.kind = NodeKind::Output;
    else
      n["kind"].fail("unknown node kind '" + kind + "' (known: placeholder, call, output)");
    node.target = n["target"].string();
    Field args = n["args"];
    size_t na = args.array_size();
    for (size_t a = 0; a < na; ++a) node.args.push_back(parse_argument(args.at(a), nv));
    Field outs = n["outputs"];
    size_t nout = outs.array_size();
    for (size_t o = 0; o < nout; ++o) node.outputs.push_back(outs.at(o).value_id(nv));
    ep.graph.nodes.push_back(std::move(node));
  }
  if (top.has("compiled")) {
    Field c = top["compiled"];
    CompiledArtifact artifact{c["backend"].string(), c["device"].string(), c["compatibility"].string(), {}};
    Field groups = c["group_of_node"];
    if (groups.array_size() != nn)
      groups.fail("has " + std::to_string(groups.array_size()) + " entries for " + std::to_string(nn) + " nodes");
    for (size_t i = 0; i < nn; ++i) {
      const int64_t g = groups.at(i).integer();
      if (g < -1 || g > INT32_MAX) groups.at(i).fail("group " + std::to_string(g) + " is not -1 or a group id");
      artifact.group_of_node.push_back(int32_t(g));
    }
    ep.compiled = std::move(artifact);
  }
  check_parsed_program(ep, root, what);
  return ep;
}

}  // namespace

ExportedProgram parse_program_json(std::string_view text, const std::string& what) {
  return with_printable_errors([&] { return parse_program_json_unescaped(text, what); });
}

void save(const ExportedProgram& ep, const std::string& path) {
  std::map<std::string, Tensor> weights;
  for (const InputSpec& in : ep.signature.inputs) {
    if (in.kind == InputKind::UserInput) continue;
    auto it = ep.weights.find(in.name);
    TESSERA_CHECK(it != ep.weights.end() && it->second.defined(), "save: the signature names ",
                  input_kind_name(in.kind), " '", in.name, "' but the program has no such weight");
    if (sparse::is_sparse(it->second)) {  // Note [Semi-structured weights in the program file]
      sparse::SemiStructuredParts parts = sparse::semi_structured_parts(it->second);
      weights[semi_structured_entry(in.name, "values")] = std::move(parts.values);
      weights[semi_structured_entry(in.name, "indices")] = std::move(parts.indices);
      continue;
    }
    weights[in.name] = it->second.is_cpu() ? it->second : it->second.cpu();
  }
  size_t entries = 0;
  for (const InputSpec& in : ep.signature.inputs)
    if (in.kind != InputKind::UserInput) entries += sparse::is_sparse(ep.weights.at(in.name)) ? 2 : 1;
  TESSERA_CHECK(entries == weights.size(), "save: a weight's name is also the name of the '.values' or '.indices' ",
                "entry of a semi-structured weight (docs/export.md); rename one of them");
  std::vector<uint8_t> st =
      safetensors_serialize(weights, {{"producer", std::string("tessera ") + TESSERA_VERSION_STRING}});
  std::string pj = program_json(ep);
  ZipWriter zip(path);
  zip.add(kWeightsEntry, st);
  zip.add(kProgramEntry, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(pj.data()), pj.size()), 1);
  zip.finish();
}

namespace {

// Note [Semi-structured weights in the program file]
Tensor load_semi_structured(const SafetensorsFile& st, const InputSpec& in, const TensorType& t,
                            const std::string& what) {
  const std::string where = what + ": " + kWeightsEntry + ": " + input_kind_name(in.kind) + " '" + in.name + "' (" +
                            sparse::kSemiStructuredLayout + ")";
  const std::optional<int64_t> rows = t.sizes.size() == 2 ? t.sizes[0].maybe_constant() : std::nullopt;
  const std::optional<int64_t> cols = t.sizes.size() == 2 ? t.sizes[1].maybe_constant() : std::nullopt;
  TESSERA_CHECK(rows && cols, where, ": program.json declares it ", t.str(),
                "; a semi-structured weight has two constant sizes");
  std::string names[2] = {semi_structured_entry(in.name, "values"), semi_structured_entry(in.name, "indices")};
  const Tensor* parts[2] = {};
  for (int i = 0; i < 2; ++i) {
    auto it = st.tensors.find(names[i]);
    TESSERA_CHECK(it != st.tensors.end(), where, ": the entry '", names[i], "' is missing");
    parts[i] = &it->second;
  }
  TESSERA_CHECK(parts[0]->dtype() == t.dtype, where, ": '", names[0], "' has dtype ", dtype_short_name(parts[0]->dtype()),
                " but program.json declares ", dtype_short_name(t.dtype));
  TESSERA_CHECK(parts[0]->dim() == 2 && parts[0]->size(0) == *rows, where, ": '", names[0], "' has shape ",
                parts[0]->sizes(), " but the weight has ", *rows, " rows");
  try {
    return sparse::from_semi_structured_parts(*parts[0], *parts[1], *cols);
  } catch (const Error& e) {
    detail::throw_error(ErrorCode::InvalidArgument, where + ": " + e.what());
  }
}

ExportedProgram load_from(std::shared_ptr<const Bytes> bytes, const std::string& what) {
  ZipReader zip(std::move(bytes), what);
  const ZipEntry* pj = zip.find(kProgramEntry);
  TESSERA_CHECK(pj, what, ": the archive has no entry '", kProgramEntry,
                "' (not a program file, or truncated)");
  std::vector<uint8_t> text = zip.read(*pj);
  std::map<std::string, std::string> layouts;
  ExportedProgram ep = parse_program_json_unescaped(
      std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), what + ": " + kProgramEntry, &layouts);
  const ZipEntry* we = zip.find(kWeightsEntry);
  TESSERA_CHECK(we, what, ": the archive has no entry '", kWeightsEntry, "' (truncated file?)");
  SafetensorsFile st = safetensors_parse(zip.stored_data(*we), zip.bytes(), what + ": " + kWeightsEntry);
  for (const InputSpec& in : ep.signature.inputs) {
    if (in.kind == InputKind::UserInput) continue;
    if (layouts.count(in.name)) {
      ep.weights[in.name] = load_semi_structured(st, in, ep.graph.type(in.value), what);
      continue;
    }
    auto it = st.tensors.find(in.name);
    TESSERA_CHECK(it != st.tensors.end(), what, ": ", kWeightsEntry, ": ", input_kind_name(in.kind), " '",
                  in.name, "' named by signature.inputs is missing");
    const TensorType& t = ep.graph.type(in.value);
    const Tensor& w = it->second;
    bool same = w.dtype() == t.dtype && w.dim() == int64_t(t.sizes.size());
    for (size_t d = 0; same && d < t.sizes.size(); ++d) same = t.sizes[d].maybe_constant() == w.sizes()[d];
    TESSERA_CHECK(same, what, ": ", kWeightsEntry, ": tensor '", in.name, "' is ",
                  dtype_short_name(w.dtype()), w.sizes(), " but program.json declares it ", t.str());
    ep.weights[in.name] = w;
  }
  return ep;
}

}  // namespace

ExportedProgram load_program(const std::string& path) {
  return with_printable_errors([&] { return load_from(Bytes::map_file(path), path); });
}

ExportedProgram load_program_from_memory(std::span<const uint8_t> data, const std::string& what) {
  return with_printable_errors([&] { return load_from(Bytes::copy_of(data), what); });
}

}  // namespace tessera::compiler
