// Header-only C++ over the graph, compiler and quantizer parts of the plugin ABI (ABI 1.2), as
// sdk.hpp is over the device and kernel parts. Included by sdk.hpp.
//
// A compiler plugin in C++ is the hooks it overrides (Note [Compiler plugin ABI] in plugin_abi.h):
//
//   struct Chain { ... };
//   class MyCompiler final : public tessera::sdk::CompilerBase<Chain> {
//     bool takes(const GraphView& g, int32_t node, const char* device) override { ... }
//     std::unique_ptr<Chain> compile(const GraphView& g, const char* device) override { ... }
//     void run(Chain& exe, TensorSpan inputs, TensorSpan outputs, void* stream) override { ... }
//   } g_compiler;
//   TESSERA_SDK_COMPILER_PLUGIN(g_compiler, "my_compiler", "0.1.0")
//
// A quantizer plugin derives from QuantizerBase (TESSERA_SDK_QUANTIZER_PLUGIN). A plugin that offers
// other extensions too writes its get_proc_address with find_extension() and its header with
// plugin_header().
// Every hook may throw tessera::sdk::Error (or any std::exception); the adapters turn it into a
// status object at the boundary, so no exception crosses the C ABI.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "tessera/plugin_abi.h"
#include "tessera/sdk.hpp"

namespace tessera::sdk {

// ------------------------------------------------------------------ extensions and the plugin header

// One entry of a plugin's get_proc_address (Note [Extension lookup]).
struct Extension {
  const char* name;  // a TESSERA_EXT_* name
  tessera_proc_t fn;
};
template <typename Fn>
Extension extension(const char* name, Fn fn) {
  return {name, reinterpret_cast<tessera_proc_t>(fn)};
}
// The function of `entries` called `name`, or NULL: the body of a plugin's get_proc_address.
inline tessera_proc_t find_extension(const char* name, std::initializer_list<Extension> entries) {
  for (const Extension& e : entries)
    if (name && std::strcmp(name, e.name) == 0) return e.fn;
  return nullptr;
}

// A plugin's get_proc_address offering the extensions the functions `E` return (each a function
// without arguments returning an Extension, such as compiler_extension<g_compiler>):
//   plugin_header("my_compiler", "0.1.0", get_proc_address<compiler_extension<g_compiler>>)
template <Extension (*... E)()>
tessera_proc_t get_proc_address(void* /*self*/, const char* name) noexcept {
  return find_extension(name, {E()...});
}

// The plugin header with labels for every slot (Note [ABI versioning] in plugin_abi.h).
constexpr tessera_plugin_t plugin_header(const char* name, const char* version,
                                         tessera_proc_t (*get_proc_address)(void*, const char*) = nullptr,
                                         const tessera_device_interface_t* device = nullptr,
                                         void* self = nullptr, void (*shutdown)(void*) = nullptr,
                                         uint64_t features = 0) {
  return tessera_plugin_t{
      .struct_size = sizeof(tessera_plugin_t),
      .abi_major = TESSERA_ABI_MAJOR,
      .abi_minor = TESSERA_ABI_MINOR,
      .reserved_ = 0,
      .name = name,
      .version = version,
      .features = features,
      .self = self,
      .device = device,
      .shutdown = shutdown,
      .get_proc_address = get_proc_address,
  };
}

// Throws (failing plugin init) when the runtime has no graph ABI: compiler and quantizer plugins
// call it first in their entry point.
inline void require_graph_abi(const char* plugin) {
  const tessera_host_api_t* api = host_api();
  if (!TESSERA_ABI_HAS_FIELD(api, tessera_host_api_t, graph) || !api->graph)
    throw Error(TESSERA_STATUS_ABI_MISMATCH,
                std::string(plugin) + ": the runtime has no graph ABI (needs plugin ABI 1.2 or later)");
}

// The index N of the device string "<name>" (0) or "<name>:N", or -1 when it names another device
// (the `device` a compiler's hooks get, "my_hardware_device:0").
inline int device_index_of(const char* device, const char* name) {
  const size_t n = std::strlen(name);
  if (!device || std::strncmp(device, name, n) != 0) return -1;
  if (device[n] == '\0') return 0;
  if (device[n] != ':' || device[n + 1] < '0' || device[n + 1] > '9') return -1;
  long index = 0;
  for (const char* c = device + n + 1; *c; ++c) {
    if (*c < '0' || *c > '9' || index > 100000) return -1;
    index = index * 10 + (*c - '0');
  }
  return int(index);
}

// ------------------------------------------------------------------ graphs

// A read-only view of a graph the host handed to the plugin (Note [Graph ABI]), read through
// host->graph. Strings it returns live as long as the graph is handed to the plugin. Cheap to copy.
class GraphView {
 public:
  explicit GraphView(const tessera_graph_t* graph) : g_(graph), api_(host_api()->graph) {}
  const tessera_graph_t* raw() const { return g_; }
  const tessera_graph_api_t& api() const { return *api_; }

  // ---- nodes (placeholders, calls and the output node, in execution order)
  int32_t node_count() const { return api_->node_count(g_); }
  int32_t node_kind(int32_t node) const { return api_->node_kind(g_, node); }  // tessera_node_kind_t
  bool is_call(int32_t node) const { return node_kind(node) == TESSERA_NODE_CALL; }
  // The op of a call node ("add.Tensor").
  const char* target(int32_t node) const { return api_->node_target(g_, node); }
  int32_t num_args(int32_t node) const { return api_->node_num_args(g_, node); }
  int32_t arg_kind(int32_t node, int32_t arg) const {
    return api_->node_arg_kind(g_, node, arg);
  }  // tessera_arg_kind_t
  int32_t arg_num_values(int32_t node, int32_t arg) const { return api_->node_arg_num_values(g_, node, arg); }
  int32_t arg_value(int32_t node, int32_t arg, int32_t index = 0) const {
    return api_->node_arg_value(g_, node, arg, index);
  }
  // The constant an argument holds; nullopt when it is not a constant.
  std::optional<tessera_value_t> arg_constant(int32_t node, int32_t arg) const {
    tessera_value_t v{};
    if (tessera_status_t s = api_->node_arg_constant(g_, node, arg, &v)) {
      host_api()->status_free(s);
      return std::nullopt;
    }
    return v;
  }
  // The number a constant argument holds (an int or a double); nullopt for anything else.
  std::optional<double> arg_number(int32_t node, int32_t arg) const {
    if (arg_kind(node, arg) != TESSERA_ARG_CONSTANT) return std::nullopt;
    const std::optional<tessera_value_t> v = arg_constant(node, arg);
    if (v && v->kind == TESSERA_VALUE_INT) return double(v->u.i);
    if (v && v->kind == TESSERA_VALUE_DOUBLE) return v->u.d;
    return std::nullopt;
  }
  int32_t num_outputs(int32_t node) const { return api_->node_num_outputs(g_, node); }
  int32_t output(int32_t node, int32_t index = 0) const { return api_->node_output(g_, node, index); }
  // The nodes that read `value` (calls and the output node), in order; a node reading it twice is
  // listed once.
  std::vector<int32_t> readers(int32_t value) const {
    std::vector<int32_t> out;
    for (int32_t n = 0, count = node_count(); n < count; ++n)
      for (int32_t a = 0, args = num_args(n); a < args; ++a)
        for (int32_t k = 0, values = arg_num_values(n, a); k < values; ++k)
          if (arg_value(n, a, k) == value && (out.empty() || out.back() != n)) out.push_back(n);
    return out;
  }

  // Dense numbers ("registers") for a straight-line program: the inputs get 0 .. input_count - 1 in
  // signature order, then each call node's outputs the next numbers in node order; -1 for the rest.
  std::vector<int32_t> value_registers() const {
    std::vector<int32_t> reg(size_t(value_count() > 0 ? value_count() : 0), -1);
    int32_t next = 0;
    for (int32_t i = 0; i < input_count(); ++i) reg.at(size_t(input(i).value)) = next++;
    for (int32_t n = 0; n < node_count(); ++n)
      for (int32_t k = 0; is_call(n) && k < num_outputs(n); ++k) reg.at(size_t(output(n, k))) = next++;
    return reg;
  }

  // ---- values
  int32_t value_count() const { return api_->value_count(g_); }
  const char* value_name(int32_t value) const { return api_->value_name(g_, value); }
  int32_t dtype(int32_t value) const { return api_->value_dtype(g_, value); }  // tessera_dtype_t
  const char* device(int32_t value) const { return api_->value_device(g_, value); }
  int32_t rank(int32_t value) const { return api_->value_rank(g_, value); }
  // Size `dim` of `value`: a constant or a symbolic expression. Throws sdk::Error when out of range.
  tessera_graph_size_t size(int32_t value, int32_t dim) const {
    tessera_graph_size_t s{};
    s.struct_size = sizeof(tessera_graph_size_t);
    throw_if_error(api_->value_size(g_, value, dim, &s));
    return s;
  }
  // A call node with one output whose first `operands` arguments are tensors of the output's type
  // (or constant numbers) and whose other arguments are constant numbers: the shape of an
  // elementwise op a fusing compiler takes ("add.Tensor(a, b, alpha)", "relu(a)").
  bool is_elementwise(int32_t node, int32_t operands) const {
    if (!is_call(node) || num_outputs(node) != 1 || num_args(node) < operands) return false;
    for (int32_t a = 0; a < num_args(node); ++a) {
      const bool tensor = a < operands && arg_kind(node, a) == TESSERA_ARG_TENSOR;
      if (tensor ? !same_type(arg_value(node, a), output(node)) : !arg_number(node, a)) return false;
    }
    return true;
  }
  // Same dtype, rank and size expressions (so symbolic sizes compare too).
  bool same_type(int32_t a, int32_t b) const {
    if (dtype(a) != dtype(b) || rank(a) != rank(b)) return false;
    for (int32_t d = 0; d < rank(a); ++d)
      if (std::strcmp(size(a, d).expr, size(b, d).expr) != 0) return false;
    return true;
  }

  // ---- the signature
  struct Input {
    int32_t kind;  // user input, parameter, buffer, constant (Note [Graph ABI])
    const char* name;
    int32_t value;
  };
  int32_t input_count() const { return api_->input_count(g_); }
  Input input(int32_t index) const {
    Input in{};
    throw_if_error(api_->input(g_, index, &in.kind, &in.name, &in.value));
    return in;
  }
  int32_t output_count() const { return api_->output_count(g_); }
  // The value the program returns at `index`.
  int32_t output_value(int32_t index) const {
    const char* name = nullptr;
    int32_t value = -1;
    throw_if_error(api_->output(g_, index, &name, &value));
    return value;
  }
  // Every value the program returns, in order.
  std::vector<int32_t> output_values() const {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < output_count(); ++i) out.push_back(output_value(i));
    return out;
  }

 private:
  const tessera_graph_t* g_;
  const tessera_graph_api_t* api_;
};

// ------------------------------------------------------------------ compilers

// The tensors of one run: a view over the host's array.
class TensorSpan {
 public:
  TensorSpan(const tessera_tensor_t* const* tensors, int32_t count) : t_(tensors), n_(count) {}
  int32_t size() const { return n_; }
  const tessera_tensor_t* const* data() const { return t_; }
  TensorView operator[](int32_t i) const { return TensorView(t_[i]); }
  // Throws sdk::Error (INVALID_ARGUMENT) naming the first tensor that is not a contiguous tensor of
  // `dtype` with `numel` elements on device index `device_index` (-1: any), as "<what> <i>".
  void require_dense(const char* what, int32_t dtype, int64_t numel, int32_t device_index = -1) const {
    for (int32_t i = 0; i < n_; ++i) {
      const TensorView t = (*this)[i];
      if (t.dtype() != dtype || t.numel() != numel || !t.is_contiguous() ||
          (device_index >= 0 && t.device_index() != device_index))
        throw Error(TESSERA_STATUS_INVALID_ARGUMENT,
                    std::string(what) + " " + std::to_string(i) + " is not a contiguous tensor of dtype " +
                        std::to_string(dtype) + " with " + std::to_string(numel) +
                        " elements on device index " + std::to_string(device_index));
    }
  }

 private:
  const tessera_tensor_t* const* t_;
  int32_t n_;
};

// Note [Versioned compatibility strings]
// A common scheme for compatibility_info (Note [Compiled artifact compatibility]):
// "<name> <major>.<minor> <isa>", e.g. "mhd-compiler 1.4 mhd-isa1". judge(stored) gives the verdict
// on an artifact whose string is `stored`, for a compiler that is *this: another name, ISA or major,
// a newer minor, or a string not of this form -> UNSUPPORTED; an older minor of the same major ->
// PREFER_RECOMPILE (it still runs; the newer compiler does better); equal -> OPTIMAL.
struct VersionedCompatibility {
  std::string name;
  int major = 0, minor = 0;
  std::string isa;

  std::string str() const { return name + " " + std::to_string(major) + "." + std::to_string(minor) + " " + isa; }
  static std::optional<VersionedCompatibility> parse(const std::string& text) {
    char name[64] = "", isa[64] = "", end = 0;
    VersionedCompatibility v;
    if (std::sscanf(text.c_str(), "%63s %d.%d %63s %c", name, &v.major, &v.minor, isa, &end) != 4) return std::nullopt;
    v.name = name;
    v.isa = isa;
    return v;
  }
  tessera_compatibility_t judge(const std::string& stored) const {
    const std::optional<VersionedCompatibility> then = parse(stored);
    if (!then || then->name != name || then->isa != isa || then->major != major || then->minor > minor)
      return TESSERA_COMPATIBILITY_UNSUPPORTED;
    return then->minor < minor ? TESSERA_COMPATIBILITY_PREFER_RECOMPILE : TESSERA_COMPATIBILITY_OPTIMAL;
  }
};

// A compiler plugin's table (Note [Compiler plugin ABI]) over the hooks a C++ compiler overrides.
// `Executable` is what compile makes; the host holds it until release (which deletes it unless
// overridden). Runs may overlap on several threads: run must not change shared state unguarded.
template <typename Executable>
class CompilerBase {
 public:
  virtual ~CompilerBase() = default;
  CompilerBase(const CompilerBase&) = delete;
  CompilerBase& operator=(const CompilerBase&) = delete;

  // The table TESSERA_EXT_COMPILER returns (compiler_extension below).
  const tessera_compiler_interface_t* interface() const { return &table_; }

  // Writes one group id per node: >= 0 for a call node this compiler takes, -1 otherwise. Default:
  // consecutive call nodes that takes() accepts form one group; any other call node ends it (none
  // on a device other than the compiler's device type, when it has one).
  virtual void get_capability(const GraphView& graph, const char* device, int32_t* out_group_of_node) {
    int32_t group = 0;
    bool in_group = false;
    const bool mine = !device_type_ || device_index_of(device, device_type_) >= 0;
    for (int32_t i = 0, n = graph.node_count(); i < n; ++i) {
      out_group_of_node[i] = -1;
      if (!graph.is_call(i)) continue;
      if (mine && takes(graph, i, device)) {
        out_group_of_node[i] = group;
        in_group = true;
      } else if (in_group) {
        ++group;
        in_group = false;
      }
    }
  }
  // (optional, used by the default get_capability) whether the call `node` can run on `device`.
  virtual bool takes(const GraphView& /*graph*/, int32_t /*node*/, const char* /*device*/) { return false; }
  // Compiles one partition (a program of its own). Throw sdk::Error to refuse it.
  virtual std::unique_ptr<Executable> compile(const GraphView& subgraph, const char* device) = 0;
  // Runs it: inputs in the subgraph's user-input order, outputs allocated by the host.
  virtual void run(Executable& executable, TensorSpan inputs, TensorSpan outputs, void* stream) = 0;
  // (optional) host default: deletes the executable.
  virtual void release(std::unique_ptr<Executable> executable) noexcept { executable.reset(); }
  // (optional, ABI 1.3; Note [Compiled artifact compatibility]) The compatibility string that
  // artifacts compiled for `device` carry ("my_hw-compiler 1.4 sm90"). Default: the version given
  // to the constructor (on the compiler's device type), or, when the environment variable named
  // there is set, its value (a test hook: artifacts "from another version"); without a version none
  // (empty), and artifacts are never checked.
  virtual std::string compatibility_info(const char* device) {
    if (!version_ || (device_type_ && device_index_of(device, device_type_) < 0)) return {};
    const tessera_host_api_t* host = host_api();
    const char* hook = host && version_env_ ? host->getenv(version_env_) : nullptr;
    return hook && *hook ? hook : version_->str();
  }
  // (optional, ABI 1.3) The verdict on an artifact made with `info` for `device`. Default: with a
  // version, VersionedCompatibility::judge against compatibility_info(device); else OPTIMAL when
  // `info` equals compatibility_info(device), else UNSUPPORTED.
  virtual tessera_compatibility_t validate_compatibility(const char* device, const char* info) {
    const std::string now = compatibility_info(device);
    if (version_) {
      const std::optional<VersionedCompatibility> v = VersionedCompatibility::parse(now);
      return v ? v->judge(info) : TESSERA_COMPATIBILITY_UNSUPPORTED;
    }
    return now == info ? TESSERA_COMPATIBILITY_OPTIMAL : TESSERA_COMPATIBILITY_UNSUPPORTED;
  }

 protected:
  // A compiler for one device type ("my_hardware_device"): other devices get no partitions and
  // compile refuses them; with `version`, artifacts carry and are judged by it (Note [Versioned
  // compatibility strings]); `version_env` names the test hook above.
  explicit CompilerBase(const char* device_type, std::optional<VersionedCompatibility> version = std::nullopt,
                        const char* version_env = nullptr)
      : CompilerBase() {
    device_type_ = device_type;
    version_ = std::move(version);
    version_env_ = version_env;
  }
  CompilerBase() {
    table_.struct_size = sizeof(tessera_compiler_interface_t);
    table_.self = this;
    table_.get_capability = [](void* s, const tessera_graph_t* g, const char* device, int32_t* out) noexcept {
      return status_of([&] { me(s)->get_capability(GraphView(g), device, out); });
    };
    table_.compile = [](void* s, const tessera_graph_t* g, const char* device, void** out) noexcept {
      return status_of([&] {
        const char* type = me(s)->device_type_;
        if (type && device_index_of(device, type) < 0)
          throw Error(TESSERA_STATUS_INVALID_ARGUMENT, std::string("this compiler compiles for ") + type + " only, not " +
                                                           (device ? device : "(no device)"));
        *out = me(s)->compile(GraphView(g), device).release();
      });
    };
    table_.run = [](void* s, void* exe, const tessera_tensor_t* const* in, int32_t num_in,
                    const tessera_tensor_t* const* out, int32_t num_out, void* stream) noexcept {
      return status_of([&] {
        me(s)->run(*static_cast<Executable*>(exe), TensorSpan(in, num_in), TensorSpan(out, num_out), stream);
      });
    };
    table_.release = [](void* s, void* exe) noexcept {
      me(s)->release(std::unique_ptr<Executable>(static_cast<Executable*>(exe)));
    };
    table_.compatibility_info = [](void* s, const char* device, char* buffer, size_t capacity) noexcept -> size_t {
      std::string info;
      try {
        info = me(s)->compatibility_info(device);
      } catch (const std::exception&) {
        info.clear();  // no string: the artifact is not checked
      }
      if (buffer && capacity > 0) {
        const size_t len = info.size() < capacity - 1 ? info.size() : capacity - 1;
        std::memcpy(buffer, info.data(), len);
        buffer[len] = '\0';
      }
      return info.size();
    };
    table_.validate_compatibility = [](void* s, const char* device, const char* info, int32_t* out) noexcept {
      return status_of([&] { *out = me(s)->validate_compatibility(device, info ? info : ""); });
    };
  }

 private:
  static CompilerBase* me(void* self) { return static_cast<CompilerBase*>(self); }
  tessera_compiler_interface_t table_{};
  const char* device_type_ = nullptr;
  std::optional<VersionedCompatibility> version_;
  const char* version_env_ = nullptr;
};

// The TESSERA_EXT_COMPILER entry of the compiler object `C` (static storage) for find_extension.
template <auto& C>
Extension compiler_extension() {
  constexpr tessera_ext_compiler_fn_t fn = []() noexcept { return C.interface(); };
  return extension(TESSERA_EXT_COMPILER, fn);
}

// ------------------------------------------------------------------ quantizers

// A quantization spec with its size filled in.
constexpr tessera_quant_spec_t quant_spec(int32_t dtype, int32_t qscheme, int32_t observer,
                                          int64_t ch_axis = 0) {
  return tessera_quant_spec_t{
      .struct_size = sizeof(tessera_quant_spec_t),
      .dtype = dtype,
      .qscheme = qscheme,
      .observer = observer,
      .ch_axis = ch_axis,
  };
}

// The annotation table a quantizer records its decisions through; every call throws sdk::Error
// with the host's message when the host refuses it.
class Annotations {
 public:
  Annotations(const tessera_annotation_api_t* api, tessera_annotations_t* table) : api_(api), t_(table) {}
  bool is_annotated(int32_t node) const { return api_->is_annotated(t_, node) != 0; }
  void keep_float(int32_t node) { throw_if_error(api_->keep_float(t_, node)); }
  void input_spec(int32_t node, int32_t value, const tessera_quant_spec_t& spec) {
    throw_if_error(api_->input_spec(t_, node, value, &spec));
  }
  void input_shared(int32_t node, int32_t value, int32_t with_value, int32_t with_consumer) {
    throw_if_error(api_->input_shared(t_, node, value, with_value, with_consumer));
  }
  void output_spec(int32_t node, const tessera_quant_spec_t& spec) {
    throw_if_error(api_->output_spec(t_, node, &spec));
  }
  void output_shared(int32_t node, int32_t with_value, int32_t with_consumer) {
    throw_if_error(api_->output_shared(t_, node, with_value, with_consumer));
  }

 private:
  const tessera_annotation_api_t* api_;
  tessera_annotations_t* t_;
};

// A quantizer plugin: the one hook it overrides (docs/quantization.md, "Writing a quantizer").
class QuantizerBase {
 public:
  virtual ~QuantizerBase() = default;
  // Records, for the call nodes it takes, specs through `annotations`; never edits the graph.
  virtual void annotate(const GraphView& graph, Annotations& annotations) = 0;
};

// The TESSERA_EXT_QUANTIZER_ANNOTATE entry of the quantizer object `Q` for find_extension.
template <auto& Q>
Extension quantizer_extension() {
  constexpr tessera_ext_quantizer_annotate_fn_t fn = [](void*, const tessera_graph_t* g,
                                                        const tessera_annotation_api_t* api,
                                                        tessera_annotations_t* table) noexcept {
    return status_of([&] {
      Annotations annotations(api, table);
      Q.annotate(GraphView(g), annotations);
    });
  };
  return extension(TESSERA_EXT_QUANTIZER_ANNOTATE, fn);
}

}  // namespace tessera::sdk

// A whole compiler (quantizer) plugin around one object of static storage: its header, whose
// get_proc_address offers TESSERA_EXT_COMPILER (TESSERA_EXT_QUANTIZER_ANNOTATE), and its entry
// point, which fails init on a runtime without the graph ABI. Use at file scope, once per plugin.
#define TESSERA_SDK_COMPILER_PLUGIN(COMPILER, NAME, VERSION)                                          \
  static const tessera_plugin_t tessera_sdk_plugin_header_ = ::tessera::sdk::plugin_header(           \
      NAME, VERSION, ::tessera::sdk::get_proc_address<::tessera::sdk::compiler_extension<COMPILER>>); \
  TESSERA_PLUGIN_ENTRY(&tessera_sdk_plugin_header_) {                                                 \
    (void)host;                                                                                       \
    ::tessera::sdk::require_graph_abi(NAME);                                                          \
  }
#define TESSERA_SDK_QUANTIZER_PLUGIN(QUANTIZER, NAME, VERSION)                                          \
  static const tessera_plugin_t tessera_sdk_plugin_header_ = ::tessera::sdk::plugin_header(             \
      NAME, VERSION, ::tessera::sdk::get_proc_address<::tessera::sdk::quantizer_extension<QUANTIZER>>); \
  TESSERA_PLUGIN_ENTRY(&tessera_sdk_plugin_header_) {                                                   \
    (void)host;                                                                                         \
    ::tessera::sdk::require_graph_abi(NAME);                                                            \
  }
