// import_model: a parsed, checked ONNX model built into an ExportedProgram through capture. Note
// [ONNX import] in tessera/onnx/onnx.h.
#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <set>

#include "convert.h"
#include "tessera/compiler/passes.h"
#include "tessera/dispatch_key.h"
#include "tessera/edit_distance.h"
#include "tessera/onnx/onnx.h"
#include "tessera/text_escape.h"

namespace tessera::onnx {

using namespace detail;
using compiler::ExportedProgram;
using compiler::InputKind;

namespace {

constexpr int kMaxFunctionDepth = 16;

// The three supported op types nearest to `op` (edit distance, ties by name).
std::string nearest_ops(const std::string& op) {
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& [name, fn] : converter_table()) scored.emplace_back(edit_distance(op, name, /*ignore_case=*/true), name);
  std::sort(scored.begin(), scored.end());
  std::string out;
  for (size_t i = 0; i < scored.size() && i < 3; ++i) out += (i ? ", " : "") + scored[i].second;
  return out;
}

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

int64_t default_opset(const google::protobuf::RepeatedPtrField<::onnx::OperatorSetIdProto>& imports) {
  for (const auto& o : imports)
    if (is_default_domain(o.domain())) return o.version();
  return -1;
}

// A valid symbol name from a dim_param ("batch_size", "sequence length" -> "sequence_length").
std::string symbol_name(const std::string& s) {
  std::string out;
  for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' ? ch : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "d_" + out;
  return out;
}

// The oldest opset whose form of the op the converters read (kMinOpset for the rest): Resize-10
// takes its scales as input 1, where opset 11 has roi.
int64_t oldest_opset_read(const std::string& op) {
  static const std::map<std::string, int64_t> oldest = {
      {"Resize", 11}};
  auto it = oldest.find(op);
  return it == oldest.end() ? kMinOpset : it->second;
}

class Importer {
 public:
  Importer(const ImportOptions& o, std::string dir) : opts_(o), dir_(std::move(dir)) {}

  ExportedProgram run(const std::string& bytes) {
    TESSERA_CHECK(bytes.size() <= size_t(INT_MAX), "onnx import: the model is ", bytes.size(),
                  " bytes; protobuf models are limited to 2 GB (keep larger weights as external data)");
    TESSERA_CHECK(model_.ParseFromArray(bytes.data(), int(bytes.size())),
                  "onnx import: the data is not a valid ONNX model (protobuf parsing failed after reading ",
                  bytes.size(), " bytes: truncated or not an ONNX file)");
    TESSERA_CHECK(model_.has_graph(), "onnx import: the model has no graph");
    opset_ = default_opset(model_.opset_import());
    TESSERA_CHECK(opset_ >= 0, "onnx import: the model imports no opset of the default (ai.onnx) domain");
    TESSERA_CHECK(opset_ >= kMinOpset && opset_ <= kMaxOpset, "onnx import: the model uses opset ", opset_,
                  " of ai.onnx; this importer reads opsets ", kMinOpset, " to ", kMaxOpset,
                  " (convert it with onnx.version_converter)");
    for (const auto& f : model_.functions()) functions_[f.domain() + "::" + f.name()] = &f;
    const ::onnx::GraphProto& g = model_.graph();
    for (const auto& init : g.initializer()) {
      TESSERA_CHECK(!params_.count(init.name()), "onnx import: initializer '", init.name(), "' is defined twice");
      params_[init.name()] = tensor_from_proto(init, dir_);
    }
    TESSERA_CHECK(g.sparse_initializer_size() == 0, "onnx import: sparse initializers are not supported");

    std::vector<Tensor> examples;
    ExportOptions eo;
    for (const auto& in : g.input()) {
      if (params_.count(in.name())) continue;  // an initializer listed as an input (IR < 4): a weight
      if (auto b = opts_.constant_inputs.find(in.name()); b != opts_.constant_inputs.end()) {
        TESSERA_CHECK(b->second.defined(), "onnx import: constant input '", in.name(), "' is undefined");
        const auto& tt = in.type().tensor_type();
        std::optional<DType> dt = dtype_of_onnx(tt.elem_type());
        TESSERA_CHECK(dt == b->second.dtype() && (!tt.has_shape() || tt.shape().dim_size() == b->second.dim()),
                      "onnx import: constant input '", in.name(), "' has dtype ", compiler::dtype_short_name(b->second.dtype()),
                      " and rank ", b->second.dim(), "; the model declares ",
                      dt ? compiler::dtype_short_name(*dt) : "another type", " and rank ", tt.shape().dim_size());
        ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
        bound_[in.name()] = b->second.cpu().contiguous();
        continue;
      }
      examples.push_back(example_input(in, eo));
      eo.input_names.push_back(in.name());
    }
    if (!opts_.device.is_cpu()) {
      // Weights live where the inputs are declared, so that every op of the capture sees one device
      // (integer values the converters read at import are read back on the host: constant_val).
      ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
      for (auto& [name, t] : params_) t = t.to(opts_.device);
      for (auto& [name, t] : bound_) t = t.to(opts_.device);
    }
    for (const auto& [name, t] : params_) eo.parameters[name] = t;
    for (const auto& [name, t] : bound_) eo.parameters[name] = t;
    for (const auto& [name, b] : opts_.constant_inputs) {
      bool known = bound_.count(name) > 0;
      TESSERA_CHECK(known, "onnx import: constant_inputs names '", name, "', which is not an input of the model");
    }

    ExportedProgram ep = export_program(
        [&](const std::vector<Tensor>& xs) {
          std::map<std::string, Val> env;
          for (const auto& [name, t] : params_) env[name] = constant_val(t);
          for (const auto& [name, t] : bound_) env[name] = constant_val(t);
          for (size_t i = 0; i < xs.size(); ++i) {
            env[eo.input_names[i]] = Val{xs[i], std::nullopt, false, kInt64, false};
            const Sizes s = traced_sizes(xs[i]);
            for (size_t d = 0; d < s.size(); ++d)
              if (auto sym = s[d].plain_symbol(); sym && !witnesses_.count(*sym)) witnesses_[*sym] = {xs[i], int64_t(d)};
          }
          run_nodes(g.node(), env, opset_, 0);
          std::vector<Tensor> outs;
          for (const auto& o : g.output()) {
            auto it = env.find(o.name());
            TESSERA_CHECK(it != env.end(), "onnx import: graph output '", o.name(), "' is not produced by any node");
            ::onnx::NodeProto out_node;
            out_node.set_name("graph output");
            out_node.set_op_type("Output");
            out_node.add_input(o.name());
            NodeCtx c(out_node, opset_, env, example_);
            outs.push_back(c.in(0));
          }
          return outs;
        },
        examples, eo);
    for (size_t i = 0; i < ep.signature.outputs.size(); ++i) ep.signature.outputs[i].name = g.output(int(i)).name();
    name_constants(ep);
    if (opts_.fold_constants) {
      compiler::fold_constants(ep);
      detail::fold_affine_into_conv(ep);  // Note [Affine into conv]
      compiler::eliminate_common_subexpressions(ep);
    }
    compiler::eliminate_dead_code(ep);
    compiler::verify(ep);
    return ep;
  }

 private:
  // Weights that are not initializers are constants: a Constant node's value (named by its ONNX
  // output) or a value the importer made (a materialised size list, a folded scale).
  void name_constants(ExportedProgram& ep) {
    std::map<const TensorImpl*, std::string> constant_name;
    for (const auto& [name, t] : constant_tensors_) constant_name[t.impl()] = name;
    for (size_t i = 0; i < ep.signature.inputs.size(); ++i) {
      compiler::InputSpec& s = ep.signature.inputs[i];
      if (s.kind != InputKind::Parameter || params_.count(s.name)) continue;
      s.kind = InputKind::Constant;
      auto w = ep.weights.find(s.name);
      if (w == ep.weights.end()) continue;
      auto c = constant_name.find(w->second.impl());
      if (c == constant_name.end() || ep.weights.count(c->second) || params_.count(c->second)) continue;
      Tensor t = w->second;
      ep.weights.erase(w);
      ep.weights[c->second] = t;
      s.name = c->second;
      ep.graph.nodes[i].target = c->second;
      ep.graph.values[size_t(s.value)].name = c->second;
    }
  }

  Tensor example_input(const ::onnx::ValueInfoProto& in, ExportOptions& eo) {
    TESSERA_CHECK(in.type().has_tensor_type(), "onnx import: input '", in.name(),
                  "' is not a tensor (sequences, maps and optionals are not supported)");
    const auto& tt = in.type().tensor_type();
    std::optional<DType> dt = dtype_of_onnx(tt.elem_type());
    TESSERA_CHECK(dt.has_value(), "onnx import: input '", in.name(), "' has element type ", tt.elem_type(),
                  ", which Tessera has no dtype for");
    TESSERA_CHECK(tt.has_shape(), "onnx import: input '", in.name(), "' has no shape (its rank must be known)");
    std::vector<int64_t> sizes;
    std::map<int64_t, Dim> dyn;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto& dim = tt.shape().dim(d);
      if (dim.has_dim_value()) {
        TESSERA_CHECK(dim.dim_value() >= 0, "onnx import: input '", in.name(), "' has a negative size ",
                      dim.dim_value(), " at dim ", d);
        sizes.push_back(dim.dim_value());
        continue;
      }
      const std::string sym = dim.has_dim_param() && !dim.dim_param().empty()
                                  ? symbol_name(dim.dim_param())
                                  : symbol_name(in.name()) + "_dim" + std::to_string(d);
      if (auto f = opts_.fixed_dims.find(sym); f != opts_.fixed_dims.end()) {
        TESSERA_CHECK(f->second >= 0, "onnx import: fixed_dims gives '", sym, "' the negative size ", f->second);
        sizes.push_back(f->second);
        continue;
      }
      compiler::SymbolRange r = opts_.default_range;
      if (auto it = opts_.ranges.find(sym); it != opts_.ranges.end()) r = it->second;
      TESSERA_CHECK(r.min >= 0 && r.min <= r.max, "onnx import: symbol '", sym, "' has the empty range [", r.min, ", ",
                    r.max, "]");
      if (r.min == r.max) {
        sizes.push_back(r.min);
        continue;
      }
      if (!example_.count(sym)) example_[sym] = pick_example(r);
      sizes.push_back(example_[sym]);
      dyn[d] = Dim{sym, r.min, r.max};
    }
    eo.dynamic_shapes.push_back(std::move(dyn));
    std::vector<int64_t> zero_strides(sizes.size(), 0);
    ExcludeDispatchKeyGuard plain(DispatchKeySet::functionality(Functionality::Export));
    return tessera::empty_strided(sizes, zero_strides, tessera::dtype(*dt).device(opts_.device));
  }

  // Distinct, unusual sizes per symbol (Note [Symbolic shape rules]: the capture decides comparisons
  // between a symbol and a constant by the example, so an example equal to a static size would
  // specialise the dim).
  int64_t pick_example(const compiler::SymbolRange& r) {
    static const int64_t kPrimes[] = {37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101, 103, 107, 109, 113};
    for (int64_t p : kPrimes) {
      bool used = false;
      for (const auto& [s, v] : example_) used = used || v == p;
      if (!used && p >= r.min && p <= r.max) return p;
    }
    return r.max >= 2 && r.min <= 2 ? std::max<int64_t>(r.min, std::min<int64_t>(r.max, 3)) : r.min;
  }

  void run_nodes(const google::protobuf::RepeatedPtrField<::onnx::NodeProto>& nodes, std::map<std::string, Val>& env,
                 int64_t opset, int depth) {
    for (const ::onnx::NodeProto& node : nodes) {
      if (!is_default_domain(node.domain())) {
        auto f = functions_.find(node.domain() + "::" + node.op_type());
        TESSERA_CHECK(f != functions_.end(), "onnx import: node '", node.name(), "' (", node.op_type(), ") is in domain '",
                      node.domain(), "'; only ai.onnx and the model's local functions are supported");
        inline_function(node, *f->second, env, opset, depth);
        continue;
      }
      if (auto f = functions_.find("::" + node.op_type()); f != functions_.end() && !converter_table().count(node.op_type())) {
        inline_function(node, *f->second, env, opset, depth);
        continue;
      }
      if (opset < 7 || node.op_type() == "Upsample") {  // Note [Legacy opsets]
        auto sizes_of = [&](const std::string& name) {
          auto v = env.find(name);
          TESSERA_CHECK(v != env.end(), "onnx import: node '", node.name(), "': input '", name, "' is not defined");
          if (v->second.t.defined()) return std::vector<int64_t>(v->second.t.sizes().begin(), v->second.t.sizes().end());
          return v->second.scalar ? std::vector<int64_t>{} : std::vector<int64_t>{int64_t(v->second.ints->size())};
        };
        if (std::optional<std::vector<LegacyNode>> up = upgrade_legacy_node(node, opset, sizes_of)) {
          for (const LegacyNode& n : *up) {
            google::protobuf::RepeatedPtrField<::onnx::NodeProto> one;
            *one.Add() = n.node;
            run_nodes(one, env, n.opset, depth);
          }
          continue;
        }
      }
      auto it = converter_table().find(node.op_type());
      NodeCtx c(node, opset, env, example_, &witnesses_);
      if (it == converter_table().end())
        c.fail("no converter for this op type (nearest supported: " + nearest_ops(node.op_type()) + ")");
      if (int64_t oldest = oldest_opset_read(node.op_type()); opset < oldest)
        c.fail("this op's opset " + std::to_string(opset) + " form (attributes where opset " + std::to_string(oldest) +
               " takes inputs) is not read; convert the model to opset " + std::to_string(oldest) +
               " or newer with onnx.version_converter");
      try {
        it->second(c);
      } catch (const Error& e) {  // an op's own check: said with the node it came from
        const std::string m = e.what();
        if (m.rfind("onnx import:", 0) == 0) throw;
        throw Error(e.code(), "onnx import: " + c.where() + ": " + m);
      }
      if (std::string a = c.unhandled_attr(); !a.empty()) c.fail("attribute '" + a + "' is not supported");
      for (int i = 0; i < node.output_size(); ++i)
        if (!node.output(i).empty() && !env.count(node.output(i)))
          c.fail("output " + std::to_string(i) + " ('" + node.output(i) + "') is not supported by the converter");
      if (node.op_type() == "Constant" && env.count(node.output(0)) && env[node.output(0)].t.defined())
        constant_tensors_[node.output(0)] = env[node.output(0)].t;
    }
  }

  void inline_function(const ::onnx::NodeProto& call, const ::onnx::FunctionProto& f, std::map<std::string, Val>& env,
                       int64_t opset, int depth) {
    TESSERA_CHECK(depth < kMaxFunctionDepth, "onnx import: node '", call.name(), "' (", call.op_type(),
                  "): functions nest deeper than ", kMaxFunctionDepth, " levels (recursive?)");
    std::map<std::string, Val> inner;
    for (int i = 0; i < f.input_size() && i < call.input_size(); ++i)
      if (!call.input(i).empty()) {
        auto it = env.find(call.input(i));
        TESSERA_CHECK(it != env.end(), "onnx import: node '", call.name(), "': input '", call.input(i), "' is not defined");
        inner[f.input(i)] = it->second;
      }
    // Attribute references (ref_attr_name) take the caller's attribute, else the function's default.
    google::protobuf::RepeatedPtrField<::onnx::NodeProto> body = f.node();
    for (::onnx::NodeProto& n : body) {
      google::protobuf::RepeatedPtrField<::onnx::AttributeProto> attrs;
      for (const ::onnx::AttributeProto& a : n.attribute()) {
        if (a.ref_attr_name().empty()) {
          *attrs.Add() = a;
          continue;
        }
        const ::onnx::AttributeProto* src = nullptr;
        for (const auto& ca : call.attribute()) if (ca.name() == a.ref_attr_name()) src = &ca;
        for (const auto& fa : f.attribute_proto()) if (!src && fa.name() == a.ref_attr_name()) src = &fa;
        if (!src) continue;
        ::onnx::AttributeProto copy = *src;
        copy.set_name(a.name());
        *attrs.Add() = copy;
      }
      n.mutable_attribute()->Swap(&attrs);
    }
    const int64_t fopset = default_opset(f.opset_import());
    run_nodes(body, inner, fopset >= 0 ? fopset : opset, depth + 1);
    for (int i = 0; i < f.output_size() && i < call.output_size(); ++i) {
      if (call.output(i).empty()) continue;
      auto it = inner.find(f.output(i));
      TESSERA_CHECK(it != inner.end(), "onnx import: function '", f.name(), "' does not produce its output '", f.output(i), "'");
      env[call.output(i)] = it->second;
    }
  }

  ImportOptions opts_;
  std::string dir_;
  ::onnx::ModelProto model_;
  int64_t opset_ = -1;
  std::map<std::string, const ::onnx::FunctionProto*> functions_;
  std::map<std::string, int64_t> example_;
  std::map<std::string, Tensor> params_;
  std::map<std::string, Tensor> constant_tensors_;
  Witnesses witnesses_;
  std::map<std::string, Tensor> bound_;  // constant_inputs, on the CPU
};

}  // namespace

// Messages quote names from the file (Note [Untrusted text] in tessera/text_escape.h): every error
// is rethrown printable, so that it stays one line. A file system error on an external data path
// and an allocation failure are errors of the model, not crashes.
template <typename F>
ExportedProgram with_import_errors(F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(e.code(), printable_text(e.what()));
  } catch (const std::filesystem::filesystem_error& e) {
    throw Error(ErrorCode::InvalidArgument, printable_text(std::string("onnx import: ") + e.what()));
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::OutOfMemory, "onnx import: out of memory while reading the model");
  }
}

ExportedProgram import_model_bytes(const std::string& bytes, const ImportOptions& options) {
  return with_import_errors([&] { return Importer(options, options.external_data_dir).run(bytes); });
}

ExportedProgram import_model(const std::string& path, const ImportOptions& options) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), "onnx import: cannot open '", printable_text(path), "'");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return with_import_errors([&] {
    std::string dir = std::filesystem::absolute(std::filesystem::path(path)).parent_path().string();
    return Importer(options, dir).run(bytes);
  });
}

std::vector<std::string> supported_op_types() {
  std::vector<std::string> out;
  for (const auto& [name, fn] : converter_table()) out.push_back(name);
  return out;
}

}  // namespace tessera::onnx
