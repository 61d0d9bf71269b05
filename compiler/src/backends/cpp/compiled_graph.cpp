// CompiledGraph: loading a generated library and running it with the host's callbacks
// (Note [Generated code ABI]).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "backends/cpp/generated_abi.h"
#include "runtime/bind.h"
#include "runtime/interpret.h"
#include "tessera/checked_math.h"
#include "tessera/compiler/codegen.h"
#include "tessera/compiler/passes.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "backends/cpp/toolchain.h"

namespace tessera::compiler::codegen {

struct CompiledGraph::Impl {
  ExportedProgram program;
  GeneratedSource generated;
  CompileInfo info;
  void* library = nullptr;
  int (*entry)(const tessera_generated_call_t*) = nullptr;
  ~Impl() {
    if (library) dlclose(library);
  }
};

namespace {

// Per call: the tensors behind every pointer the generated code may pass back to call_node.
struct CallContext {
  const ExportedProgram* program = nullptr;
  Bindings bindings;
  std::map<const void*, Tensor> owners;  // data pointer -> a tensor whose storage holds it
  std::vector<Tensor> slots;
  std::vector<int64_t> slot_bytes;  // what each slot must be, evaluated with overflow checks
  std::map<ValueId, Tensor> extern_results;
  const std::vector<ValueId>* strided_values = nullptr;  // GeneratedSource::strided_values
  std::string error;
};

std::vector<int64_t> concrete_sizes(const TensorType& t, const std::map<std::string, int64_t>& b) {
  std::vector<int64_t> sizes;
  int64_t numel = 1;
  for (const SymSize& s : t.sizes) {
    const int64_t v = s.evaluate(b);
    TESSERA_CHECK(v >= 0, "size ", s.str(), " of a ", t.str(), " value evaluates to ", v, " for these inputs");
    TESSERA_CHECK(!__builtin_mul_overflow(numel, v, &numel), "the sizes of a ", t.str(),
                  " value overflow 64 bits for these inputs");
    sizes.push_back(v);
  }
  int64_t bytes;
  TESSERA_CHECK(!__builtin_mul_overflow(numel, int64_t(itemsize(t.dtype)), &bytes), "a ", t.str(),
                " value needs more than 2^63 bytes for these inputs");
  return sizes;
}

// A contiguous tensor of `t`'s type over the memory at `data` (which one of ctx's tensors owns).
Tensor view_of(CallContext& ctx, const TensorType& t, void* data) {
  if (!data) return make_tensor(concrete_sizes(t, ctx.bindings), t.dtype, Device(DeviceType::CPU));  // no elements
  auto it = ctx.owners.find(data);
  TESSERA_INTERNAL_ASSERT(it != ctx.owners.end(), "generated code passed an unknown buffer");
  const Tensor& owner = it->second;
  const std::vector<int64_t> sizes = concrete_sizes(t, ctx.bindings);
  std::vector<int64_t> strides(sizes.size());
  int64_t st = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = st;
    st *= std::max<int64_t>(sizes[i], 1);
  }
  const auto offset = (static_cast<char*>(data) - static_cast<char*>(owner.storage()->data())) /
                      int64_t(itemsize(t.dtype));
  return Tensor(make_intrusive<TensorImpl>(owner.storage(), t.dtype, t.device, sizes, strides, offset));
}

void* host_alloc(void* vctx, int32_t slot, int64_t bytes) {
  auto& ctx = *static_cast<CallContext*>(vctx);
  try {
    TESSERA_INTERNAL_ASSERT(slot >= 0 && size_t(slot) < ctx.slot_bytes.size() && ctx.slot_bytes[size_t(slot)] == bytes,
                            "generated code asked for ", bytes, " bytes in slot ", slot);
    Tensor t = make_tensor({std::max<int64_t>(bytes, 1)}, DType::UInt8, Device(DeviceType::CPU));
    if (size_t(slot) >= ctx.slots.size()) ctx.slots.resize(size_t(slot) + 1);
    ctx.slots[size_t(slot)] = t;
    void* p = t.raw_data_ptr();
    ctx.owners[p] = t;
    return p;
  } catch (const std::exception& e) {
    ctx.error = e.what();
    return nullptr;
  }
}

int host_call_node(void* vctx, int32_t node_index, void* const* inputs, void** outputs) {
  auto& ctx = *static_cast<CallContext*>(vctx);
  try {
    const Graph& g = ctx.program->graph;
    const Node& node = g.nodes.at(size_t(node_index));
    // The interpreter's step (views, wrapped numbers in Tensor positions) on the generated buffers.
    std::vector<Tensor> env(g.values.size());
    size_t k = 0;
    auto strided = [&](ValueId v) {
      return std::find(ctx.strided_values->begin(), ctx.strided_values->end(), v) != ctx.strided_values->end();
    };
    for (const Argument& a : node.args)
      for (ValueId v : a.values) {
        auto it = ctx.extern_results.find(v);
        env[size_t(v)] = it != ctx.extern_results.end() && strided(v) ? it->second : view_of(ctx, g.type(v), inputs[k]);
        ++k;
      }
    std::vector<Tensor> results = execute_node(g, node, env, ctx.bindings);
    TESSERA_INTERNAL_ASSERT(results.size() >= node.outputs.size(), node.target, " returned ", results.size(),
                            " values; the graph expects ", node.outputs.size());
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const TensorType& type = g.type(node.outputs[i]);
      Tensor r = results[i];
      const std::vector<int64_t> want = concrete_sizes(type, ctx.bindings);
      TESSERA_CHECK(r.dtype() == type.dtype && r.sizes().vec() == want, node.target, " returned ",
                    dtype_name(r.dtype()), " of ", r.dim(), " dims where the graph says ", type.str(),
                    "; the graph's types do not match the op (export it again)");
      if (!r.is_contiguous() && !strided(node.outputs[i])) r = r.contiguous();
      outputs[i] = r.numel() ? r.raw_data_ptr() : nullptr;
      if (outputs[i]) ctx.owners[outputs[i]] = r;
      ctx.extern_results[node.outputs[i]] = r;
    }
    return 0;
  } catch (const std::exception& e) {
    ctx.error = e.what();
    return 1;
  }
}

}  // namespace

CompiledGraph::CompiledGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGraph::CompiledGraph(CompiledGraph&&) noexcept = default;
CompiledGraph& CompiledGraph::operator=(CompiledGraph&&) noexcept = default;
CompiledGraph::~CompiledGraph() = default;
const CompileInfo& CompiledGraph::info() const { return impl_->info; }
const GeneratedSource& CompiledGraph::generated() const { return impl_->generated; }

CompiledGraph CompiledGraph::compile(const ExportedProgram& program, const CodegenOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto impl = std::make_unique<Impl>();
  // Codegen's rewrites run through the pass manager, so the verifier checks what each emits against
  // the op contract (Note [Passes]); a broken rewrite fails here, naming itself.
  impl->program = program;
  PassManager()
      .add("decompose_for_codegen", decompose_for_codegen)
      .add("fuse_linear_epilogues", fuse_linear_epilogues)
      .run(impl->program);
  impl->generated = generate_cpp(impl->program, options.isa ? *options.isa : select_cpu_isa());
  const std::string graph_text = impl->program.graph_string();
  CacheResult r = compile_cached(impl->generated.source, impl->generated.isa, options, graph_text);
  impl->library = dlopen(r.library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  TESSERA_CHECK_CODE(impl->library, ErrorCode::Internal, "cannot load the compiled graph '", r.library_path,
                     "': ", dlerror());
  // Note [Pinned OpenMP runtime]: generated code runs on libgomp, whose parked worker threads must
  // outlive the library that first loaded it.
  dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  impl->entry = reinterpret_cast<int (*)(const tessera_generated_call_t*)>(
      dlsym(impl->library, "tessera_generated_main"));
  TESSERA_CHECK_CODE(impl->entry, ErrorCode::Internal, "the compiled graph '", r.library_path,
                     "' has no tessera_generated_main; delete it from the cache");
  impl->info.cache_hit = r.cache_hit;
  impl->info.key = r.key;
  impl->info.library_path = r.library_path;
  impl->info.command = r.command;
  impl->info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (log_enabled("compile"))
    log_message(LogLevel::Info, "compile",
                std::string(r.cache_hit ? "cache hit " : "compiled ") + r.key + " (" +
                    std::to_string(impl->generated.fused_groups) + " fused groups, " +
                    std::to_string(impl->generated.extern_nodes) + " extern nodes, " +
                    std::to_string(impl->info.seconds * 1e3) + " ms)");
  return CompiledGraph(std::move(impl));
}

std::vector<Tensor> CompiledGraph::run(const std::vector<Tensor>& inputs) const {
  const ExportedProgram& p = impl_->program;
  const Graph& g = p.graph;
  CallContext ctx;
  ctx.program = &p;
  ctx.strided_values = &impl_->generated.strided_values;
  size_t users = 0;
  for (const InputSpec& in : p.signature.inputs) users += in.kind == InputKind::UserInput;
  TESSERA_CHECK(inputs.size() == users, "the compiled graph takes ", users, " inputs; got ", inputs.size());
  std::vector<Tensor> placeholders;
  size_t next_user = 0;
  for (const InputSpec& in : p.signature.inputs) {
    Tensor t;
    if (in.kind == InputKind::UserInput) {
      t = inputs[next_user++];
    } else {
      auto it = p.weights.find(in.name);
      TESSERA_CHECK(it != p.weights.end(), "the program has no weight '", in.name, "'");
      t = it->second;
    }
    const TensorType& type = g.type(in.value);
    TESSERA_CHECK(t.defined(), "input '", in.name, "' is an undefined tensor");
    TESSERA_CHECK(t.dtype() == type.dtype && t.device().is_cpu() && t.dim() == int64_t(type.sizes.size()),
                  "input '", in.name, "' must be ", type.str(), "; got ", dtype_name(t.dtype()), " with ", t.dim(),
                  " dims on ", t.device().str());
    bind_symbols(type, t.sizes(), "input '" + in.name + "'", ctx.bindings);
    placeholders.push_back(t.is_contiguous() ? t : t.contiguous());
  }
  for (size_t k = 0; k < placeholders.size(); ++k) {
    const InputSpec& in = p.signature.inputs[k];
    const std::vector<int64_t> want = concrete_sizes(g.type(in.value), ctx.bindings);
    const IntArrayRef got = placeholders[k].sizes();
    for (size_t i = 0; i < want.size(); ++i)
      TESSERA_CHECK(got[i] == want[i], "dim ", i, " of input '", in.name, "' is ", got[i], "; the graph needs ",
                    g.type(in.value).sizes[i].str(), " = ", want[i]);
  }
  std::vector<int64_t> symbols;
  for (const std::string& s : impl_->generated.symbols) symbols.push_back(ctx.bindings.at(s));
  // Sizes computed inside the generated code must not wrap: evaluate the slots' sizes here first.
  for (const SymSize& b : impl_->generated.slot_bytes) {
    const int64_t bytes = b.evaluate(ctx.bindings);
    TESSERA_CHECK(bytes >= 0, "a scratch buffer of ", b.str(), " bytes is negative for these inputs");
    ctx.slot_bytes.push_back(bytes);
  }
  std::vector<void*> in_ptrs, out_ptrs;
  for (const Tensor& t : placeholders) {
    void* ptr = t.numel() ? t.raw_data_ptr() : nullptr;
    in_ptrs.push_back(ptr);
    if (ptr) ctx.owners[ptr] = t;
  }
  std::map<ValueId, Tensor> produced;
  for (ValueId v : impl_->generated.outputs) {
    Tensor t = make_tensor(concrete_sizes(g.type(v), ctx.bindings), g.type(v).dtype, Device(DeviceType::CPU));
    void* ptr = t.numel() ? t.raw_data_ptr() : nullptr;
    out_ptrs.push_back(ptr);
    if (ptr) ctx.owners[ptr] = t;
    produced[v] = t;
  }
  tessera_generated_host_t host{};
  host.struct_size = sizeof host;
  host.ctx = &ctx;
  host.alloc = host_alloc;
  host.call_node = host_call_node;
  tessera_generated_call_t call{};
  call.struct_size = sizeof call;
  call.host = &host;
  call.inputs = in_ptrs.data();
  call.outputs = out_ptrs.data();
  call.symbols = symbols.data();
  const int rc = impl_->entry(&call);
  TESSERA_CHECK_CODE(rc == 0, ErrorCode::Internal, "compiled graph ", impl_->info.key, " failed: ",
                     ctx.error.empty() ? std::string("its structs are newer than this runtime") : ctx.error);
  std::vector<Tensor> results;
  for (const OutputSpec& o : p.signature.outputs) {
    auto it = produced.find(o.value);
    if (it != produced.end()) {
      results.push_back(it->second);
      continue;
    }
    if (auto e = ctx.extern_results.find(o.value); e != ctx.extern_results.end()) {
      results.push_back(e->second);
      continue;
    }
    for (size_t k = 0; k < p.signature.inputs.size(); ++k)
      if (p.signature.inputs[k].value == o.value) results.push_back(placeholders[k]);
  }
  return results;
}

}  // namespace tessera::compiler::codegen
