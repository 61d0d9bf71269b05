// Graph capture. Note [Capture] in tessera/compiler/export.h.
#include <algorithm>
#include <mutex>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "capture/capture_shapes.h"
#include "capture/view_geometry.h"
#include "passes/graph_edit.h"
#include "tessera/autograd.h"
#include "tessera/compiler/export.h"
#include "tessera/dispatcher.h"
#include "tessera/ops.h"
#include "tessera/sparse.h"
#include "tessera/version.h"

namespace tessera {

using compiler::ExportedProgram;
using compiler::Graph;
using compiler::InputKind;
using compiler::InputSpec;
using compiler::Node;
using compiler::NodeKind;
using compiler::ShapeContext;
using compiler::SymbolRange;
using compiler::SymSize;
using compiler::TensorType;
using compiler::ValueId;
using compiler::broadcast_base;
using compiler::storage_positions;
using compiler::symbolic_output_sizes;
using compiler::symbolic_view_sizes;

namespace {

constexpr DispatchKeySet kExportKey = DispatchKeySet::functionality(Functionality::Export);


struct Tracer final : ShapeContext {
  ExportedProgram ep;
  std::vector<Node> user_placeholders, weight_placeholders, calls;
  std::unordered_map<const TensorImpl*, ValueId> value_of;      // tracing tensors and lifted weights
  std::unordered_map<const StorageImpl*, const TensorImpl*> root_of;  // storage -> the tracing tensor that owns it
  std::unordered_map<const TensorImpl*, std::string> parameter_name;  // options.parameters by identity
  std::vector<Tensor> keep;  // keeps every impl used as a key alive, so no address is reused
  std::vector<std::string> producer;  // value id -> the op that produced it ("" for placeholders)
  int next_weight = 0;
  int next_constant = 0;
  // Every tensor lifted as a weight, for Note [Program state]: its placeholder, and for a leaf that
  // requires grad its .grad before the capture (restored after it).
  struct Lifted {
    std::string name;
    ValueId placeholder;
    Tensor live;
    bool leaf_requires_grad = false;
    Tensor grad_before;
  };
  std::vector<Lifted> lifted;
  // Leaves that received a traced gradient but were not lifted themselves (a BatchNorm2d weight the
  // capture saw only as its [1, C, 1, 1] reshape): autograd reports them (set_leaf_grad_observer),
  // and their .grad is state as a lifted leaf's is.
  std::vector<Lifted> other_leaves;
  std::unordered_map<const StorageImpl*, size_t> lifted_storage;  // the first entry of `lifted` on each storage

  Tracer() {
    ranges = &ep.ranges;
    guards = &ep.guards;
  }
  // A tracing tensor fn kept past the capture has no data: any later op on it throws (Note [Unusable
  // storage]) instead of reaching a kernel.
  ~Tracer() {
    for (const auto& [storage, root] : root_of) const_cast<StorageImpl*>(storage)->mark_unusable();
  }
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  ValueId add_value(TensorType type, std::string name, const std::string& op) {
    ValueId v = ep.graph.add_value(std::move(type), std::move(name));
    producer.resize(size_t(v) + 1);
    producer[size_t(v)] = op;
    return v;
  }

  // A tracing tensor: the example's geometry, the Export key, storage with a byte count and no memory.
  Tensor make_tracing(IntArrayRef sizes, DType dtype, Device device) {
    std::vector<int64_t> strides = contiguous_strides(sizes);
    int64_t numel = 1;
    for (int64_t s : sizes) TESSERA_CHECK(!__builtin_mul_overflow(numel, s, &numel), "export: sizes ", IntArrayRef(sizes), " overflow int64");
    uint64_t nbytes = 0;
    TESSERA_CHECK(!__builtin_mul_overflow(uint64_t(numel), uint64_t(itemsize(dtype)), &nbytes), "export: sizes ",
                  IntArrayRef(sizes), " overflow the byte count");
    Storage storage = make_intrusive<StorageImpl>(DataPtr(nullptr, nullptr, nullptr, device), size_t(nbytes));
    auto impl = make_intrusive<TensorImpl>(storage, dtype, device, sizes, strides, 0);
    impl->set_key_set(DispatchKeySet::dense(device.type()) | kExportKey);
    Tensor t(std::move(impl));
    root_of[t.storage().get()] = t.impl();
    keep.push_back(t);
    return t;
  }

  ValueId bind(const Tensor& t, ValueId v) {
    value_of[t.impl()] = v;
    keep.push_back(t);
    return v;
  }

  // The graph value of a tensor argument: a tracing tensor, a view of one, or a tensor fn closes over.
  ValueId value_for(const Tensor& t) {
    auto it = value_of.find(t.impl());
    if (it != value_of.end()) return it->second;
    if (t.key_set().has(Functionality::Export)) return bind(t, view_value(t));
    return bind(t, lift_weight(t));
  }

  void note_leaf_grad(const Tensor& leaf, const Tensor& grad_before) {
    for (const std::vector<Lifted>* all : {&lifted, &other_leaves})
      for (const Lifted& l : *all)
        if (l.live.impl() == leaf.impl() && l.leaf_requires_grad) return;
    std::string name;
    auto p = parameter_name.find(leaf.impl());
    if (p != parameter_name.end()) name = p->second;
    else name = "leaf_" + std::to_string(other_leaves.size());
    const bool traced = grad_before.defined() && grad_before.key_set().has(Functionality::Export);
    other_leaves.push_back({name, ValueId(0), leaf, true, traced ? Tensor() : grad_before});
    keep.push_back(leaf);
  }

  ValueId lift_weight(const Tensor& t) {
    // Another handle on a tensor lifted before (a saved tensor autograd unpacked for a backward
    // formula shares the parameter's storage and geometry) is that tensor's current value: its copy
    // would be a second weight that a program with state (Note [Program state]) leaves stale.
    if (t.storage()) {
      auto same = lifted_storage.find(t.storage().get());
      if (same != lifted_storage.end() && lifted[same->second].live.dtype() == t.dtype()) {
        const Tensor& first = lifted[same->second].live;
        const ValueId now = value_of.at(first.impl());
        if (first.sizes() == t.sizes() && first.strides() == t.strides() && first.storage_offset() == t.storage_offset())
          return now;
        // A view of a tensor fn wrote (the expand of a gradient fn filled: its memory holds no value
        // yet), or a permutation of one (the transpose of a weight in matmul's backward): a view of its
        // current value. Slices of a weight fn does not write stay copies (as views they would become
        // an index_select over a constant index).
        const bool written = now != lifted[same->second].placeholder;
        if (written && first.numel() == 1 && t.numel() > 1)
          return expanded(t, first.impl(), now, std::vector<int64_t>(size_t(t.dim()), 1));
        const bool permutation = t.storage_offset() == 0 && t.numel() == first.numel() &&
                                 is_non_overlapping_and_dense(*t.impl());
        if (first.is_contiguous() && first.storage_offset() == 0 && (written || permutation))
          return view_of(t, first.impl(), now);
        TESSERA_CHECK(!written, "export: a view of sizes ", IntArrayRef(t.sizes()), " of a tensor fn wrote in place (",
                      ep.graph.value_name(now), ") cannot be captured; clone() the tensor before taking the view");
      }
    }
    std::string name;
    auto p = parameter_name.find(t.impl());
    InputKind kind = InputKind::Parameter;
    if (p != parameter_name.end()) {
      name = p->second;
    } else {
      do name = "weight_" + std::to_string(next_weight++); while (ep.weights.count(name));
    }
    std::vector<SymSize> sizes(t.sizes().begin(), t.sizes().end());
    ValueId v = add_value({t.dtype(), t.device(), std::move(sizes)}, name, "");
    {
      ExcludeDispatchKeyGuard plain(kExportKey);
      // A semi-structured weight stays one (it lives on the CPU and has no strided view): its value
      // has the dense dtype and sizes, and the program's linear runs the sparse kernel on it
      // (docs/export.md, "Semi-structured weights").
      ep.weights[name] = sparse::is_sparse(t) ? t : t.to(Device(DeviceType::CPU)).contiguous();
    }
    weight_placeholders.push_back({NodeKind::Placeholder, name, {}, {v}});
    ep.signature.inputs.push_back({kind, name, v});
    const bool leaf = autograd::requires_grad(t) && autograd::is_leaf(t);
    lifted.push_back({name, v, t, leaf, leaf ? autograd::grad(t) : Tensor()});
    if (t.storage()) lifted_storage.emplace(t.storage().get(), lifted.size() - 1);
    return v;
  }

  // Note [Captured views]
  // Views are metadata-only (core) and reach no hook, so a tracing tensor the tracer has not seen is
  // a view of the tracing tensor that owns its storage (an op output or an input, contiguous). Its
  // geometry is recovered as view(root, sizes) when it is contiguous, else as view(root, sizes in
  // stride order) then permute(dims). The symbolic sizes of a view come from matching groups of dims
  // whose example sizes have equal products (symbolic_view_sizes). Other geometries (slice, narrow,
  // select, expand, diagonal) of a static root become index_select over the flattened root with a
  // constant index of the elements' storage positions, then view to the view's sizes: the same
  // values, as a copy (gathered_view). Of a root with a dynamic size, an expand keeps the symbolic
  // sizes of the dims it does not broadcast (expanded), a view that nests in the root is slices of a
  // reshape (sliced_view, Note [Views as slices of a reshape] in tensor.h), and others are refused,
  // naming their geometry.
  ValueId view_value(const Tensor& t) {
    auto r = root_of.find(t.storage().get());
    TESSERA_CHECK(r != root_of.end(), "export: a tracing tensor of sizes ", IntArrayRef(t.sizes()),
                  " does not belong to this capture; tracing tensors cannot cross export_program calls");
    return view_of(t, r->second, value_of.at(r->second));
  }

  // `t`, a broadcast of the value `root` (the tracing tensor `root_impl`, contiguous) whose sizes as t
  // sees them are `base` (the expanded root gradient of a mean, a bias gradient's expand, a sum's
  // gradient over the dims it reduced): view(root, base) then expand_copy to t's sizes, instead of an
  // index_select of a constant index as large as t. The dims t does not broadcast keep the root's
  // symbolic sizes (expand_copy's -1), so a gradient of a dynamic batch stays dynamic.
  ValueId expanded(const Tensor& t, const TensorImpl* root_impl, ValueId root, const std::vector<int64_t>& base) {
    std::vector<SymSize> sym_base = symbolic_view_sizes(ep.graph.type(root).sizes, root_impl->sizes(), base, *this);
    ValueId v1 = root;
    if (!(IntArrayRef(base) == root_impl->sizes())) {
      v1 = add_value({t.dtype(), t.device(), sym_base}, "", compiler::kViewTarget);
      std::vector<int64_t> list(base);
      for (size_t i = 0; i < list.size(); ++i)
        if (!sym_base[i].is_constant()) list[i] = -1;
      calls.push_back({NodeKind::Call, compiler::kViewTarget,
                       {compiler::Argument::tensor(root), compiler::Argument::constant_value(list)}, {v1}});
    }
    std::vector<int64_t> size = t.sizes().vec();
    std::vector<SymSize> sym(size.begin(), size.end());
    for (size_t i = 0; i < size.size(); ++i)
      if (base[i] == size[i]) {
        sym[i] = sym_base[i];
        size[i] = -1;
      }
    ValueId v = add_value({t.dtype(), t.device(), std::move(sym)}, "", "expand_copy");
    calls.push_back({NodeKind::Call, "expand_copy",
                     {compiler::Argument::tensor(v1), compiler::Argument::constant_value(size)}, {v}});
    return v;
  }

  // `t` as a view of `root` (contiguous, offset 0, on t's storage), whose graph value is root_value.
  ValueId view_of(const Tensor& t, const TensorImpl* root, ValueId root_value) {
    const size_t n = size_t(t.dim());
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return t.strides()[a] > t.strides()[b]; });
    std::vector<int64_t> sorted_sizes(n);
    for (size_t i = 0; i < n; ++i) sorted_sizes[i] = t.sizes()[order[i]];
    const std::vector<int64_t> expect = contiguous_strides(sorted_sizes);
    bool dense = t.storage_offset() == 0 && t.numel() == root->numel();
    for (size_t i = 0; i < n && dense; ++i)
      if (sorted_sizes[i] != 1 && t.strides()[order[i]] != expect[i]) dense = false;
    if (!dense) {
      bool static_root = true;
      for (const SymSize& s : ep.graph.type(root_value).sizes) static_root = static_root && s.is_constant();
      if (root->is_contiguous())
        if (std::vector<int64_t> base = broadcast_base(t, root->numel()); !base.empty())
          return expanded(t, root, root_value, base);
      if (!static_root && root->is_contiguous())
        if (std::optional<ValueId> sorted = sliced_view(t, root, root_value, order))
          return permuted(t, order, *sorted);
      TESSERA_CHECK(static_root, "export: a view of sizes ", IntArrayRef(t.sizes()), ", strides ",
                    IntArrayRef(t.strides()), " and offset ", t.storage_offset(), " of ", ep.graph.value_name(root_value),
                    " cannot be captured (of a tensor with dynamic sizes only reshapes and permutations of the whole "
                    "tensor are); compute it with ops instead (e.g. index_select for a slice)");
      return gathered_view(t, root, root_value);
    }
    ValueId base = root_value;
    if (!(IntArrayRef(sorted_sizes) == root->sizes())) {
      std::vector<SymSize> sym = symbolic_view_sizes(ep.graph.type(root_value).sizes, root->sizes(), sorted_sizes, *this);
      std::vector<int64_t> list(sorted_sizes);
      for (size_t i = 0; i < n; ++i)
        if (!sym[i].is_constant()) list[i] = -1;
      base = add_value({t.dtype(), t.device(), sym}, "", compiler::kViewTarget);
      calls.push_back({NodeKind::Call, compiler::kViewTarget, {compiler::Argument::tensor(root_value), compiler::Argument::constant_value(list)}, {base}});
    }
    return permuted(t, order, base);
  }

  // `base` (t's elements, contiguous in the order of t's dims sorted by decreasing stride) permuted
  // back to t's dim order.
  ValueId permuted(const Tensor& t, const std::vector<size_t>& order, ValueId base) {
    const size_t n = order.size();
    bool identity = true;
    for (size_t i = 0; i < n; ++i) identity = identity && order[i] == i;
    if (identity) return base;
    std::vector<int64_t> perm(n);
    std::vector<SymSize> sym(n);
    const std::vector<SymSize>& base_sizes = ep.graph.type(base).sizes;
    for (size_t i = 0; i < n; ++i) {
      size_t pos = size_t(std::find(order.begin(), order.end(), i) - order.begin());
      perm[i] = int64_t(pos);
      sym[i] = base_sizes[pos];
    }
    ValueId v = add_value({t.dtype(), t.device(), sym}, "", compiler::kPermuteTarget);
    calls.push_back({NodeKind::Call, compiler::kPermuteTarget, {compiler::Argument::tensor(base), compiler::Argument::constant_value(perm)}, {v}});
    return v;
  }

  // A view `t` that selects or narrows dims of the contiguous tracing tensor `root` whose sizes are
  // symbolic (all.select(0, 0) of a reshaped, permuted qkv projection), as view(root, S), a
  // slice_copy per sliced or extra dim of S, and a view to t's sizes in stride order (the caller
  // permutes), where S is core's nest_view (Note [Views as slices of a reshape]): each of t's dims
  // whole (its symbolic size is S's) or a static slice. Nothing when t does not nest in root, and the
  // caller refuses the view. A dim whose example size equals its whole extent is taken as whole:
  // narrow(d, 0, n) of a dynamic dim of example size n reads as the whole dim.
  std::optional<ValueId> sliced_view(const Tensor& t, const TensorImpl* root, ValueId root_value,
                                     const std::vector<size_t>& order) {
    const std::vector<NestedDim> s = nest_view(t.sizes(), t.strides(), t.storage_offset(), root->numel());
    if (s.empty()) return std::nullopt;
    std::vector<int64_t> shape;
    for (const NestedDim& d : s) shape.push_back(d.extent);
    std::vector<SymSize> sym = symbolic_view_sizes(ep.graph.type(root_value).sizes, root->sizes(), shape, *this);
    ValueId v = root_value;
    if (!(IntArrayRef(shape) == root->sizes())) {
      std::vector<int64_t> list(shape);
      for (size_t i = 0; i < list.size(); ++i)
        if (!sym[i].is_constant()) list[i] = -1;
      v = add_value({t.dtype(), t.device(), sym}, "", compiler::kViewTarget);
      calls.push_back({NodeKind::Call, compiler::kViewTarget,
                       {compiler::Argument::tensor(root_value), compiler::Argument::constant_value(list)}, {v}});
    }
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i].size == s[i].extent) continue;
      sym[i] = SymSize(s[i].size);
      ValueId out = add_value({t.dtype(), t.device(), sym}, "", "slice_copy.Tensor");
      calls.push_back({NodeKind::Call, "slice_copy.Tensor",
                       {compiler::Argument::tensor(v), compiler::Argument::constant_value(int64_t(i)),
                        compiler::Argument::constant_value(s[i].start),
                        compiler::Argument::constant_value(s[i].start + s[i].size),
                        compiler::Argument::constant_value(int64_t(1))},
                       {out}});
      v = out;
    }
    // To t's sizes in stride order: size-1 dims are constants, the others S's dim of that t dim.
    std::vector<SymSize> want;
    std::vector<int64_t> list;
    for (size_t k : order) {
      SymSize size(t.sizes()[k]);
      if (t.sizes()[k] != 1)
        for (size_t i = 0; i < s.size(); ++i)
          if (s[i].view_dim == int64_t(k)) size = sym[i];
      list.push_back(size.is_constant() ? size.constant() : -1);
      want.push_back(std::move(size));
    }
    ValueId out = add_value({t.dtype(), t.device(), want}, "", compiler::kViewTarget);
    calls.push_back({NodeKind::Call, compiler::kViewTarget,
                     {compiler::Argument::tensor(v), compiler::Argument::constant_value(list)}, {out}});
    return out;
  }

  // A strided view `t` of the static, contiguous `root`: view(root, [numel]), index_select with the
  // storage positions of t's elements (a constant input), view to t's sizes.
  ValueId gathered_view(const Tensor& t, const TensorImpl* root, ValueId root_value) {
    const int64_t n = t.numel();
    const size_t rank = size_t(t.dim());
    Tensor index = storage_positions(t);
    std::string name;
    do name = "constant_" + std::to_string(next_constant++); while (ep.weights.count(name));
    ValueId index_value = add_value({DType::Int64, t.device(), {SymSize(n)}}, name, "");
    ep.weights[name] = index;
    weight_placeholders.push_back({NodeKind::Placeholder, name, {}, {index_value}});
    ep.signature.inputs.push_back({InputKind::Constant, name, index_value});

    ValueId flat = root_value;
    if (root->dim() != 1) {
      flat = add_value({t.dtype(), t.device(), {SymSize(root->numel())}}, "", compiler::kViewTarget);
      calls.push_back({NodeKind::Call, compiler::kViewTarget, {compiler::Argument::tensor(root_value),
                                                compiler::Argument::constant_value(std::vector<int64_t>{root->numel()})},
                       {flat}});
    }
    ValueId gathered = add_value({t.dtype(), t.device(), {SymSize(n)}}, "", "index_select");
    calls.push_back({NodeKind::Call, "index_select",
                     {compiler::Argument::tensor(flat), compiler::Argument::constant_value(int64_t(0)),
                      compiler::Argument::tensor(index_value)},
                     {gathered}});
    if (rank == 1) return gathered;
    ValueId v = add_value({t.dtype(), t.device(), std::vector<SymSize>(t.sizes().begin(), t.sizes().end())}, "", compiler::kViewTarget);
    calls.push_back({NodeKind::Call, compiler::kViewTarget, {compiler::Argument::tensor(gathered),
                                              compiler::Argument::constant_value(t.sizes().vec())},
                     {v}});
    return v;
  }

  compiler::Argument argument_for(const Value& a) {
    struct V {
      Tracer& tr;
      compiler::Argument operator()(std::monostate) const { return compiler::Argument::none(); }
      compiler::Argument operator()(const Tensor& t) const {
        if (!t.defined()) return compiler::Argument::none();
        if (t.impl()->is_wrapped_number() && !t.key_set().has(Functionality::Export)) {
          ExcludeDispatchKeyGuard plain(kExportKey);
          Scalar s = t.item();
          if (s.is_bool()) return compiler::Argument::constant_value(s.to_bool());
          if (s.is_integral()) return compiler::Argument::constant_value(s.to_int());
          return compiler::Argument::constant_value(s.to_double());
        }
        return compiler::Argument::tensor(tr.value_for(t));
      }
      compiler::Argument operator()(const std::optional<Tensor>& t) const { return t ? (*this)(*t) : compiler::Argument::none(); }
      compiler::Argument operator()(const std::vector<Tensor>& ts) const {
        std::vector<ValueId> vs;
        for (const Tensor& t : ts) vs.push_back(tr.value_for(t));
        return compiler::Argument::tensor_list(std::move(vs));
      }
      compiler::Argument operator()(int64_t v) const { return compiler::Argument::constant_value(v); }
      compiler::Argument operator()(double v) const { return compiler::Argument::constant_value(v); }
      compiler::Argument operator()(bool v) const { return compiler::Argument::constant_value(v); }
      compiler::Argument operator()(const std::vector<int64_t>& v) const { return compiler::Argument::constant_value(v); }
      compiler::Argument operator()(const std::string& v) const { return compiler::Argument::constant_value(v); }
      compiler::Argument operator()(DType v) const { return compiler::Argument::constant_value(v); }
    };
    return std::visit(V{*this}, a);
  }

  // The .grad a backward inside fn gave lifted leaf `l` (a tracing tensor), or undefined.
  static Tensor traced_grad(const Lifted& l) {
    if (!l.leaf_requires_grad) return Tensor();
    Tensor g = autograd::grad(l.live);
    return g.defined() && g.key_set().has(Functionality::Export) ? g : Tensor();
  }

  // Note [Program state] (ir.h): appends to `outputs` the new value of each lifted tensor that fn
  // wrote and that outlives the capture, then the gradient each lifted leaf received.
  std::vector<std::string> state_names;
  void collect_state(std::vector<ValueId>& outputs) {
    ExcludeDispatchKeyGuard plain(kExportKey);
    // The references this tracer holds on each lifted tensor; one more is held outside.
    std::unordered_map<const TensorImpl*, int64_t> held;
    for (const Tensor& t : keep) ++held[t.impl()];
    for (const auto& [name, w] : ep.weights) ++held[w.impl()];
    for (const Lifted& l : lifted) ++held[l.live.impl()];
    std::vector<const Lifted*> live;
    for (const Lifted& l : lifted)
      if (l.live.impl()->use_count() > held[l.live.impl()]) live.push_back(&l);  // else a temporary of fn
    for (const Lifted* l : live) {
      const ValueId now = value_of.at(l->live.impl());
      if (now == l->placeholder) continue;
      outputs.push_back(now);
      ep.state.push_back({compiler::StateUpdate::Kind::Write, l->live});
      state_names.push_back("updated_" + l->name);
    }
    // In a program with state, a tensor that outlives fn is read where it lives, not as the copy
    // lifting made of it for another device: a parameter the program writes, an lr tensor a schedule
    // writes between calls.
    if (!ep.state.empty())
      for (const Lifted* l : live) {
        if (l->live.is_contiguous()) ep.weights[l->name] = l->live;
        ep.live_weights.insert(l->name);
      }
    std::vector<const Lifted*> leaves;
    for (const Lifted& l : lifted) leaves.push_back(&l);
    for (const Lifted& l : other_leaves) leaves.push_back(&l);
    for (const Lifted* lp : leaves) {
      const Lifted& l = *lp;
      const Tensor g = traced_grad(l);
      if (!g.defined()) continue;
      // A gradient accumulated into the .grad the leaf had before the step would read that tensor
      // as a constant of the program: every call would add to the first one.
      if (l.grad_before.defined())
        TESSERA_CHECK(!value_of.count(l.grad_before.impl()), "compile: the step accumulates the gradient of '",
                      l.name, "' into the .grad it had before the step; call the optimizer's zero_grad() at the "
                      "start of the compiled function (it sets the gradients to none, as PyTorch's set_to_none)");
      outputs.push_back(value_for(g));
      ep.state.push_back({compiler::StateUpdate::Kind::Grad, l.live});
      state_names.push_back("grad_" + l.name);
    }
  }

  std::vector<Tensor> on_call(const ExportCall& call) {
    ExcludeDispatchKeyGuard plain(kExportKey);
    current_op = *call.name;
    Node node;
    node.kind = NodeKind::Call;
    node.target = *call.name;
    for (const Value& a : call.args) node.args.push_back(argument_for(a));
    std::vector<std::vector<SymSize>> in_sizes;  // per tensor argument, flattened as the schema lists them
    std::vector<std::vector<SymSize>> sym = symbolic_output_sizes(call, node, ep.graph, *this);
    std::vector<Tensor> results;
    std::vector<const TensorImpl*> flat_inputs;
    for (const Value& a : call.args) {
      if (auto* t = std::get_if<Tensor>(&a)) flat_inputs.push_back(t->impl());
      else if (auto* ot = std::get_if<std::optional<Tensor>>(&a)) flat_inputs.push_back(*ot ? ot->value().impl() : nullptr);
      else if (auto* l = std::get_if<std::vector<Tensor>>(&a))
        for (const Tensor& t : *l) flat_inputs.push_back(t.impl());
    }
    for (size_t o = 0; o < call.outputs.size(); ++o) {
      const ExportCall::Output& out = call.outputs[o];
      for (size_t d = 0; d < out.sizes.size(); ++d) {
        int64_t got = sym[o][d].evaluate(example);
        TESSERA_INTERNAL_ASSERT(got == out.sizes[d], "export: the symbolic shape rule of '", *call.name, "' gives ",
                                sym[o][d].str(), " = ", got, " at dimension ", d, " of output ", o,
                                ", the op's shape rule ", out.sizes[d]);
      }
      // An in-place op's output is the tensor it wrote, of that tensor's dtype.
      const TensorImpl* target = out.alias_input >= 0 ? flat_inputs.at(size_t(out.alias_input)) : nullptr;
      ValueId v = add_value({target ? target->dtype() : out.dtype, call.device, sym[o]}, "", *call.name);
      node.outputs.push_back(v);
      if (target) {
        // An in-place op: the tensor it wrote now stands for the new value (the graph is functional).
        Tensor t(IntrusivePtr<TensorImpl>(const_cast<TensorImpl*>(target)));
        bind(t, v);
        results.push_back(t);
      } else {
        Tensor t = make_tracing(out.sizes, out.dtype, call.device);
        bind(t, v);
        results.push_back(t);
      }
    }
    calls.push_back(std::move(node));
    current_op.clear();
    return results;
  }
};

thread_local Tracer* t_tracer = nullptr;

// A backward inside fn set the .grad of leaves to tracing tensors: each gets its .grad from before
// the capture back, also when fn threw (the compiled program sets the new one when it runs).
class GradRestore {
 public:
  explicit GradRestore(Tracer& tr) : tr_(tr) {}
  ~GradRestore() {
    for (const std::vector<Tracer::Lifted>* all : {&tr_.lifted, &tr_.other_leaves})
      for (const Tracer::Lifted& l : *all)
        if (Tracer::traced_grad(l).defined()) autograd::set_grad(l.live, l.grad_before);
  }
  GradRestore(const GradRestore&) = delete;
  GradRestore& operator=(const GradRestore&) = delete;

 private:
  Tracer& tr_;
};

std::vector<Tensor> export_hook(const ExportCall& call) {
  TESSERA_CHECK(t_tracer != nullptr, *call.name,
                ": a tracing tensor reached the dispatcher on a thread that is not capturing; run fn's ops on the "
                "thread that called export_program");
  return t_tracer->on_call(call);
}

void traced_read(const TensorImpl& t, const char* call) {
  std::string origin;
  if (Tracer* tr = t_tracer) {
    auto it = tr->value_of.find(&t);
    if (it != tr->value_of.end()) {
      const std::string& op = tr->producer.at(size_t(it->second));
      origin = op.empty() ? " (program input " + tr->ep.graph.value_name(it->second) + ")"
                          : " (the output of '" + op + "', " + tr->ep.graph.value_name(it->second) + ")";
    } else if (auto r = tr->root_of.find(t.storage().get()); r != tr->root_of.end()) {
      ValueId v = tr->value_of.at(r->second);
      const std::string& op = tr->producer.at(size_t(v));
      origin = op.empty() ? " (a view of program input " + tr->ep.graph.value_name(v) + ")"
                          : " (a view of the output of '" + op + "', " + tr->ep.graph.value_name(v) + ")";
    }
  }
  detail::throw_error(ErrorCode::InvalidArgument,
                      std::string("export: ") + call + " reads the value of a traced tensor" + origin +
                          "; data-dependent control flow cannot be captured: compute the value outside fn and "
                          "pass it in, or express the computation with tensor ops");
}

// Note [Program state]: autograd reports each leaf a traced gradient goes to.
void leaf_grad(const Tensor& leaf, const Tensor& grad_before) {
  if (Tracer* tr = t_tracer) tr->note_leaf_grad(leaf, grad_before);
}

// Note [Dynamic sizes in backward formulas] (autograd): which dims of a tracing tensor are symbolic.
std::vector<bool> dynamic_dims(const Tensor& t) {
  Tracer* tr = t_tracer;
  if (!tr || !t.key_set().has(Functionality::Export) || tr->ep.ranges.empty()) return {};
  ExcludeDispatchKeyGuard plain(kExportKey);
  std::vector<bool> out;
  for (const SymSize& s : tr->ep.graph.type(tr->value_for(t)).sizes) out.push_back(!s.is_constant());
  return out;
}

std::mutex g_hooks_mutex;
int g_active_captures = 0;

// Installs the hooks while at least one capture runs in the process, so that outside captures the
// Export key falls through as any functionality without a kernel does.
class CaptureScope {
 public:
  explicit CaptureScope(Tracer& tr) : include_(kExportKey) {
    TESSERA_CHECK(t_tracer == nullptr, "export_program: a capture is already running on this thread; "
                                       "fn must not call export_program");
    std::lock_guard lock(g_hooks_mutex);
    if (g_active_captures++ == 0) {
      set_export_hook(export_hook);
      set_traced_read_handler(traced_read);
      autograd::set_dynamic_dims_query(dynamic_dims);
      autograd::set_leaf_grad_observer(leaf_grad);
    }
    t_tracer = &tr;
  }
  ~CaptureScope() {
    t_tracer = nullptr;
    std::lock_guard lock(g_hooks_mutex);
    if (--g_active_captures == 0) {
      set_export_hook(nullptr);
      set_traced_read_handler(nullptr);
      autograd::set_dynamic_dims_query(nullptr);
      autograd::set_leaf_grad_observer(nullptr);
    }
  }
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  IncludeDispatchKeyGuard include_;
};

}  // namespace

std::vector<compiler::SymSize> traced_sizes(const Tensor& t) {
  TESSERA_CHECK(t.defined(), "traced_sizes: the tensor is undefined");
  if (!t.key_set().has(Functionality::Export)) return std::vector<SymSize>(t.sizes().begin(), t.sizes().end());
  TESSERA_CHECK(t_tracer != nullptr, "traced_sizes: a tracing tensor outside a capture on this thread");
  ExcludeDispatchKeyGuard plain(kExportKey);
  return t_tracer->ep.graph.type(t_tracer->value_for(t)).sizes;
}

ExportedProgram export_program(const ExportFn& fn, const std::vector<Tensor>& example_inputs,
                               const ExportOptions& options) {
  TESSERA_CHECK(bool(fn), "export_program: fn is empty");
  TESSERA_CHECK(options.dynamic_shapes.size() <= example_inputs.size(), "export_program: dynamic_shapes has ",
                options.dynamic_shapes.size(), " entries for ", example_inputs.size(),
                " inputs; give at most one map (dim -> Dim) per input");
  TESSERA_CHECK(options.input_names.empty() || options.input_names.size() == example_inputs.size(),
                "export_program: input_names has ", options.input_names.size(), " names for ", example_inputs.size(),
                " inputs; give one per input or none");
  Tracer tr;
  tr.ep.op_contract_version = TESSERA_VERSION_STRING;
  for (const auto& [name, t] : options.parameters) {
    TESSERA_CHECK(t.defined(), "export_program: parameter '", name, "' is an undefined tensor");
    tr.parameter_name.emplace(t.impl(), name);
  }
  std::vector<Tensor> tracing;
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    const Tensor& x = example_inputs[i];
    const std::string name = options.input_names.empty() ? "x" + std::to_string(i) : options.input_names[i];
    TESSERA_CHECK(x.defined(), "export_program: example input ", i, " ('", name, "') is undefined");
    std::vector<SymSize> sizes(x.sizes().begin(), x.sizes().end());
    if (i < options.dynamic_shapes.size()) {
      for (const auto& [dim, d] : options.dynamic_shapes[i]) {
        TESSERA_CHECK(dim >= 0 && dim < x.dim(), "export_program: dynamic_shapes of input ", i, " ('", name,
                      "') names dimension ", dim, " but the example has ", x.dim(), " dimensions");
        TESSERA_CHECK(d.min <= d.max, "export_program: Dim '", d.name, "' has min ", d.min, " > max ", d.max);
        TESSERA_CHECK(d.min >= 0, "export_program: Dim '", d.name, "' has a negative min ", d.min);
        const int64_t size = x.sizes()[size_t(dim)];
        TESSERA_CHECK(size >= d.min && size <= d.max, "export_program: input ", i, " ('", name, "') has size ", size,
                      " at dimension ", dim, ", outside the range [", d.min, ", ", d.max, "] of Dim '", d.name,
                      "'; use an example inside the range or widen the Dim");
        auto [it, fresh] = tr.ep.ranges.emplace(d.name, SymbolRange{d.min, d.max});
        TESSERA_CHECK(fresh || (it->second.min == d.min && it->second.max == d.max), "export_program: Dim '",
                      d.name, "' is declared with ranges [", it->second.min, ", ", it->second.max, "] and [", d.min,
                      ", ", d.max, "]; declare one Dim and use it for both dimensions");
        auto [ex, new_example] = tr.example.emplace(d.name, size);
        TESSERA_CHECK(new_example || ex->second == size, "export_program: Dim '", d.name,
                      "' is used for dimensions of example sizes ", ex->second, " and ", size,
                      "; dims that share a Dim must be equal in the examples");
        sizes[size_t(dim)] = SymSize::symbol(d.name);
      }
    }
    ValueId v = tr.add_value({x.dtype(), x.device(), std::move(sizes)}, name, "");
    tr.user_placeholders.push_back({NodeKind::Placeholder, name, {}, {v}});
    tr.ep.signature.inputs.push_back({InputKind::UserInput, name, v});
    Tensor t = tr.make_tracing(x.sizes(), x.dtype(), x.device());
    tr.bind(t, v);
    tracing.push_back(t);
  }
  std::vector<ValueId> outputs;
  {
    GradRestore restore(tr);
    {
      CaptureScope scope(tr);
      std::vector<Tensor> results = fn(tracing);
      ExcludeDispatchKeyGuard plain(kExportKey);
      for (size_t i = 0; i < results.size(); ++i) {
        TESSERA_CHECK(results[i].defined(), "export_program: fn returned an undefined tensor at position ", i);
        outputs.push_back(tr.value_for(results[i]));
      }
    }
    tr.collect_state(outputs);
  }
  Graph& g = tr.ep.graph;
  g.nodes = std::move(tr.user_placeholders);
  for (Node& n : tr.weight_placeholders) g.nodes.push_back(std::move(n));
  for (Node& n : tr.calls) g.nodes.push_back(std::move(n));
  Node out;
  out.kind = NodeKind::Output;
  const size_t user_outputs = outputs.size() - tr.ep.state.size();
  for (size_t i = 0; i < outputs.size(); ++i) {
    out.args.push_back(compiler::Argument::tensor(outputs[i]));
    tr.ep.signature.outputs.push_back({i < user_outputs ? "output_" + std::to_string(i) : tr.state_names[i - user_outputs],
                                       outputs[i]});
  }
  g.nodes.push_back(std::move(out));
  // User inputs first, then weights in the order of first use (Signature's contract).
  std::stable_partition(tr.ep.signature.inputs.begin(), tr.ep.signature.inputs.end(),
                        [](const InputSpec& s) { return s.kind == InputKind::UserInput; });
  compiler::copy_written_constants(tr.ep);  // Note [Constants written in place]
  return std::move(tr.ep);
}

}  // namespace tessera
