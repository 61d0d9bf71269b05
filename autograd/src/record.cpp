// Recording: the Autograd key's dispatch hook (Note [Autograd dispatch]) and the core's view hook
// make graph nodes; their backward runs the generated formula or the device's backward kernel.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <numeric>
#include <sstream>

#include "autograd_internal.h"
#include "formula_context.h"
#include "tessera/autograd_dispatch.h"
#include "tessera/autograd_hooks.h"
#include "tessera/log.h"
#include "tessera/stream.h"

namespace tessera::autograd::detail {
namespace {

std::atomic<DynamicDimsQuery> dynamic_dims_query{nullptr};

// "add.Tensor" -> "AddBackward" (PyTorch's node names, without the overload).
std::string node_name_of(const std::string& op) {
  std::string base = op.substr(0, op.find('.'));
  std::string out;
  bool up = true;
  for (char c : base) {
    if (c == '_') {
      up = true;
      continue;
    }
    out += up ? char(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out + "Backward";
}

struct InputMeta {
  std::vector<int64_t> sizes;
  DType dtype = kFloat32;
  Device device{DeviceType::CPU};
  bool defined = false;
};

// The backward of one dispatched op.
class OpNode final : public Node {
 public:
  OpNode(std::vector<Edge> edges, uint32_t num_outputs, OperatorEntry* op, const DerivativeInfo* info)
      : Node(num_outputs, std::move(edges)), op_(op), info_(info), name_(node_name_of(info ? info->op : "op")) {}
  std::string name() const override { return name_; }
  void release_saved() override {
    for (auto& s : saved_) s.reset();
    for (auto& s : results_) s.reset();
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    // Note [Backward streams]: the backward of an op runs on the stream its forward ran on (the
    // thread's current stream of the device at recording). The engine's own work (the gradients
    // this node reads) is on the thread's current stream, so that stream is waited for first, and
    // the node's stream after it: a gradient is never read on one stream before another wrote it.
    std::optional<StreamGuard> on_stream;
    if (stream_) {
      current_stream(device_).synchronize();
      on_stream.emplace(*stream_);
    }
    std::vector<Tensor> out = compute(std::move(grads));
    if (stream_) stream_->synchronize();
    return out;
  }

  std::vector<Tensor> compute(std::vector<Tensor>&& grads) {
    std::vector<bool> needs(next_edges_.size());
    for (size_t i = 0; i < next_edges_.size(); ++i) needs[i] = next_edges_[i].valid();
    std::vector<Tensor> out;
    // Under a capture (a compiled training step) the gradients are tracing tensors without memory: the
    // generic formula runs, its contract ops become the program's nodes (the device's own backward
    // kernel is not an op a graph can name).
    // Under create_graph (grad mode on in backward) the formula runs, so that it is recorded.
    if (device_kernel_ && grads.size() == 1 && grads[0].defined() && !is_grad_enabled() &&
        !grads[0].key_set().has(Functionality::Export) && run_device(grads[0], out)) {
      ++backward_stats().device_kernels_run;
    } else {
      if (!grads[0].defined()) {
        // Multi-output ops are not recorded yet, so output 0 carries the only gradient.
        return std::vector<Tensor>(next_edges_.size());
      }
      FormulaContext c;
      c.node_name = &name_;
      c.args = &args_;
      c.saved = &saved_;
      c.input_sizes = &input_sizes_;
      c.input_dynamic = &input_dynamic_;
      c.flat_begin = &flat_begin_;
      c.flat_count = &flat_count_;
      c.results = &results_;
      c.needs_grad = &needs;
      c.grads_in = std::move(grads);
      c.grads_out.resize(next_edges_.size());
      info_->fn(c);
      ++backward_stats().generic_formulas_run;
      out = std::move(c.grads_out);
    }
    for (size_t i = 0; i < out.size() && i < inputs_.size(); ++i) {
      if (!needs[i] || !out[i].defined()) {
        out[i] = Tensor();
        continue;
      }
      const InputMeta& m = inputs_[i];
      if (out[i].sizes() != IntArrayRef(m.sizes)) out[i] = sum_to(out[i], m.sizes);
      if (out[i].dtype() != m.dtype) out[i] = out[i].to(m.dtype);
      if (out[i].device() != m.device) out[i] = out[i].to(m.device);
    }
    return out;
  }

  // Under a capture: keeps input i (a tracing tensor) when the capture says a dim of it is dynamic.
  void note_dynamic_dims(size_t i, const Tensor& input) {
    std::vector<bool> dynamic = dynamic_dims(input);
    if (std::find(dynamic.begin(), dynamic.end(), true) == dynamic.end()) return;
    input_dynamic_.resize(input_sizes_.size());
    input_dynamic_[i] = {input, std::move(dynamic)};
  }

  bool run_device(const Tensor& grad, std::vector<Tensor>& out) {
    Stack fwd = args_;
    for (size_t a = 0; a < fwd.size(); ++a) {
      const int b = flat_begin_[a];
      if (b < 0) continue;
      const SavedTensor& s = saved_[size_t(b)];
      if (!s.defined()) fwd[a] = std::optional<Tensor>();
      else fwd[a] = s.unpack(name_);
    }
    Tensor g = grad.is_contiguous() ? grad : grad.contiguous();
    return run_device_backward(*device_kernel_, *op_, g, fwd, device_, out);
  }

  OperatorEntry* op_;
  const DerivativeInfo* info_;
  std::string name_;
  Stack args_;  // attributes; tensors replaced by monostate
  std::vector<SavedTensor> saved_;
  std::vector<SavedTensor> results_;
  std::vector<InputMeta> inputs_;
  std::vector<std::vector<int64_t>> input_sizes_;
  std::vector<std::pair<Tensor, std::vector<bool>>> input_dynamic_;  // Note [Dynamic sizes in backward formulas]
  std::vector<int> flat_begin_, flat_count_;
  const KernelEntry* device_kernel_ = nullptr;
  Device device_{DeviceType::CPU};
  std::optional<Stream> stream_;  // set when the forward ran on a stream other than the default
};

// An op whose derivative does not exist yet: recording is fine, backward through it is an error.
class NotImplementedNode final : public Node {
 public:
  NotImplementedNode(std::vector<Edge> edges, uint32_t n, std::string op, std::string why)
      : Node(n, std::move(edges)), op_(std::move(op)), why_(std::move(why)) {}
  std::string name() const override { return "NotImplemented(" + op_ + ")"; }
  std::vector<Tensor> apply(std::vector<Tensor>&&) override {
    tessera::detail::throw_error(ErrorCode::Unimplemented,
                        "the derivative for '" + op_ + "' is not implemented: " + why_ +
                            " (dispatcher/ops/derivatives.json; TODO(#31)). Compute it under NoGradGuard, or write "
                            "a custom autograd::Function for it");
  }

 private:
  std::string op_, why_;
};

// Where a view's elements lie in its base (the base's own geometry, the view's, and the view's
// offset relative to the base's): what the backward of a view and of a write through it need.
struct ViewGeometry {
  ViewGeometry(const Tensor& base, const Tensor& view)
      : base_sizes_(base.sizes().begin(), base.sizes().end()), base_strides_(base.strides().begin(), base.strides().end()),
        view_sizes_(view.sizes().begin(), view.sizes().end()), view_strides_(view.strides().begin(), view.strides().end()),
        rel_offset_(view.storage_offset() - base.storage_offset()), dtype_(base.dtype()), device_(base.device()) {}
  std::vector<int64_t> base_sizes_, base_strides_, view_sizes_, view_strides_;
  int64_t rel_offset_;
  DType dtype_;
  Device device_;
};

// The backward of a core view (Note [View backward]).
class ViewNode final : public Node, private ViewGeometry {
 public:
  ViewNode(Edge base_edge, const Tensor& base, const Tensor& view)
      : Node(1, {std::move(base_edge)}), ViewGeometry(base, view) {}
  std::string name() const override { return "ViewBackward"; }

  // Note [View backward]
  // Any view the core makes addresses a subset of its base's elements through the same storage.
  // The base's gradient is a fresh buffer with the base's own strides, zero except where the view's
  // elements lie: there, seen through the view's strides and offset (relative to the base's), it
  // holds the view's gradient. Dims the view broadcast (stride 0, expand) are summed first, so the
  // write never meets itself. One rule covers view, reshape, permute, transpose, select, slice,
  // narrow, expand, squeeze, unsqueeze, flatten and as_strided inside the base.
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor g = grads[0];
    std::vector<int64_t> dims, sizes = view_sizes_;
    for (size_t d = 0; d < view_sizes_.size(); ++d)
      if (view_strides_[d] == 0 && view_sizes_[d] > 1) {
        dims.push_back(int64_t(d));
        sizes[d] = 1;
      }
    if (!dims.empty()) g = tessera::sum(g, dims, true);
    // Under a capture, and under create_graph (a write through a view is not recorded), as ops.
    if (g.key_set().has(Functionality::Export) || is_grad_enabled()) return {captured(g, sizes)};
    Tensor buf = make_tensor_strided(base_sizes_, base_strides_, dtype_, device_);
    buf.fill_(0);
    if (g.dtype() != dtype_) g = g.to(dtype_);
    buf.as_strided(sizes, view_strides_, rel_offset_).copy_(g);
    return {buf};
  }

 private:
  // Under a capture (a compiled training step) a write through a view of a buffer is not a graph
  // value: the same gradient as a scatter of g into zeros of the base's size (contiguous), at the
  // base's element of each view element (a constant index; no element repeats once broadcast dims
  // are summed). A view element's storage position (relative to the base's offset) gives the base
  // index dim by dim, largest stride first, which holds for any base whose elements do not overlap.
  Tensor captured(Tensor g, const std::vector<int64_t>& sizes) const {
    if (g.dtype() != dtype_) g = g.to(dtype_);
    if (!dynamic_dims(g).empty())
      if (Tensor padded = padded_into_base(g, sizes); padded.defined()) return padded;
    // A view that holds every element of a contiguous base once (reshape, permute, transpose): g with
    // its dims in storage order (largest stride first) is the base's elements in order.
    const int64_t n = compute_numel(sizes), base_numel = compute_numel(base_sizes_);
    if (rel_offset_ == 0 && n == base_numel && base_strides_ == contiguous_strides(base_sizes_)) {
      std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, dim) of the dims larger than 1
      for (size_t d = 0; d < sizes.size(); ++d)
        if (sizes[d] != 1) dims.push_back({view_strides_[d], int64_t(d)});
      std::stable_sort(dims.begin(), dims.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      int64_t expect = 1;
      bool dense = true;
      for (size_t i = dims.size(); i-- > 0;) {
        dense = dense && dims[i].first == expect;
        expect *= sizes[size_t(dims[i].second)];
      }
      if (dense) {
        std::vector<int64_t> order;
        for (const auto& [stride, d] : dims) order.push_back(d);
        for (size_t d = 0; d < sizes.size(); ++d)
          if (sizes[d] == 1) order.push_back(int64_t(d));
        return g.permute(order).reshape(base_sizes_);
      }
    }
    const size_t rank = base_sizes_.size();
    std::vector<size_t> by_stride(rank);
    for (size_t d = 0; d < rank; ++d) by_stride[d] = d;
    std::stable_sort(by_stride.begin(), by_stride.end(),
                     [&](size_t a, size_t b) { return base_strides_[a] > base_strides_[b]; });
    const std::vector<int64_t> flat_strides = contiguous_strides(base_sizes_);
    auto base_element = [&](int64_t p) {
      int64_t flat = 0;
      for (size_t d : by_stride) {
        const int64_t i = base_sizes_[d] == 1 || base_strides_[d] == 0 ? 0 : p / base_strides_[d];
        TESSERA_CHECK(i >= 0 && i < base_sizes_[d], "the backward of a view of a tensor with sizes ",
                      IntArrayRef(base_sizes_), " and strides ", IntArrayRef(base_strides_),
                      " cannot be captured (TODO(#31)); call contiguous() on it before the view");
        p -= i * base_strides_[d];
        flat += i * flat_strides[d];
      }
      TESSERA_CHECK(p == 0, "the backward of a view of a tensor with strides ", IntArrayRef(base_strides_),
                    " cannot be captured (TODO(#31)); call contiguous() on it before the view");
      return flat;
    };
    Tensor index;
    {
      ExcludeDispatchKeyGuard eager(DispatchKeySet::functionality(Functionality::Export));
      index = empty({n}, TensorOptions().dtype(kInt64));
      int64_t* pos = index.data_ptr<int64_t>();
      std::vector<int64_t> at(sizes.size(), 0);
      for (int64_t i = 0; i < n; ++i) {
        int64_t p = rel_offset_;
        for (size_t d = 0; d < sizes.size(); ++d) p += at[d] * view_strides_[d];
        pos[i] = base_element(p);
        for (size_t d = sizes.size(); d-- > 0;) {
          if (++at[d] < sizes[d]) break;
          at[d] = 0;
        }
      }
      if (!device_.is_cpu()) index = index.to(device_);
    }
    const Tensor flat = tessera::scatter(zeros({base_numel}, TensorOptions().dtype(dtype_).device(device_)), 0, index,
                                         g.reshape({n}));
    return flat.view(base_sizes_);
  }

  // Under a capture with dynamic sizes, where the constant index above would fix them: a view that
  // nests in its contiguous base (Note [Views as slices of a reshape] in tensor.h: select, narrow,
  // chunk, with reshapes and permutes) gets g laid out in the base's reshape with zeros around it,
  // as ops whose sizes stay symbolic: permute g to stride order, reshape to the nested dims (1 for
  // the dims the view does not have), pad each dim to its extent, reshape to the base's sizes.
  // Undefined when the view does not nest.
  Tensor padded_into_base(const Tensor& g, const std::vector<int64_t>& sizes) const {
    // The base may be a permutation of a contiguous tensor (a permuted view): the nesting is in its
    // storage order, and the result is permuted back to the base's dims.
    std::vector<int64_t> base_order(base_sizes_.size());
    std::iota(base_order.begin(), base_order.end(), int64_t(0));
    std::stable_sort(base_order.begin(), base_order.end(),
                     [&](int64_t a, int64_t b) { return base_strides_[size_t(a)] > base_strides_[size_t(b)]; });
    std::vector<int64_t> stored_sizes;
    for (int64_t d : base_order) stored_sizes.push_back(base_sizes_[size_t(d)]);
    const std::vector<int64_t> dense = contiguous_strides(stored_sizes);
    for (size_t i = 0; i < base_order.size(); ++i)
      if (stored_sizes[i] != 1 && base_strides_[size_t(base_order[i])] != dense[i]) return Tensor();
    const std::vector<NestedDim> nest = nest_view(sizes, view_strides_, rel_offset_, compute_numel(base_sizes_));
    if (nest.empty()) return Tensor();
    std::vector<int64_t> order, shape, pad;
    for (const NestedDim& d : nest) {
      if (d.view_dim >= 0) order.push_back(d.view_dim);
      shape.push_back(d.view_dim >= 0 ? d.size : 1);
    }
    for (size_t d = 0; d < sizes.size(); ++d)
      if (sizes[d] == 1) order.push_back(int64_t(d));
    for (size_t i = nest.size(); i-- > 0;) {
      pad.push_back(nest[i].start);
      pad.push_back(nest[i].extent - nest[i].start - (nest[i].view_dim >= 0 ? nest[i].size : 1));
    }
    Tensor laid = g.permute(order).reshape(shape);
    if (std::any_of(pad.begin(), pad.end(), [](int64_t p) { return p != 0; })) laid = tessera::pad(laid, pad);
    std::vector<int64_t> back(base_order.size());
    for (size_t i = 0; i < base_order.size(); ++i) back[size_t(base_order[i])] = int64_t(i);
    return laid.reshape(stored_sizes).permute(back);
  }

};
// Note [In-place ops on views]
// An in-place op on a recorded view v (y.narrow(0, 0, 2).mul_(3), y.select(0, 1).copy_(z)) writes
// memory its root r owns (the tensor at the bottom of v's chain of views), so r's value, and its
// history, change too (PyTorch's CopySlices). The op is recorded on v as on any tensor (its self
// edge goes through v's view backward to r's history before the write); then r's history becomes a
// CopySlicesNode, whose backward sends the elements of r's gradient that v covers to the op's node
// and the others to r's history before the write; and v becomes a view of r's new history. Every
// other view of r made before the write is stale: its gradient edge (view_edge) is rebuilt from
// r's current history whenever the storage was written since it was set, as PyTorch regenerates a
// view's grad_fn on a version change. A leaf that requires grad, and a root that is itself in a
// capture or a double backward, are refused.
class CopySlicesNode final : public Node, private ViewGeometry {
 public:
  CopySlicesNode(Edge root_edge, Edge op_edge, const Tensor& root, const Tensor& view)
      : Node(1, {std::move(root_edge), std::move(op_edge)}), ViewGeometry(root, view) {}
  std::string name() const override { return "CopySlices"; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor g = grads[0];
    if (!g.defined()) return {Tensor(), Tensor()};
    TESSERA_CHECK(!is_grad_enabled() && !g.key_set().has(Functionality::Export),
                  "the backward of an in-place op on a view (CopySlices) cannot be recorded yet, for a double "
                  "backward (create_graph) or in a compiled function (TODO(#31)); clone() the view's root first");
    if (g.dtype() != dtype_) g = g.to(dtype_);
    Tensor rest = make_tensor_strided(base_sizes_, base_strides_, dtype_, device_);
    rest.copy_(g);
    Tensor covered = rest.as_strided(view_sizes_, view_strides_, rel_offset_);
    Tensor to_op = covered.clone();
    covered.fill_(0);
    return {rest, to_op};
  }
};

uint64_t storage_version(const Tensor& t) { return t.storage() ? t.storage()->version() : 0; }

// Makes the backward of the recorded view `view` (meta `m`) a view of `base`, whose history is
// `base_edge`, as of the storage's current version (Note [In-place ops on views]).
Edge set_view_backward(AutogradMeta& m, Edge base_edge, const Tensor& base, const Tensor& view) {
  auto node = std::make_shared<ViewNode>(std::move(base_edge), base, view);
  std::lock_guard lock(m.mu);
  m.requires_grad = false;
  m.grad_fn = std::move(node);
  m.output_nr = 0;
  m.view_version = storage_version(view);
  return {m.grad_fn, 0};
}

// `view` was written in place by the op recorded as `op_node` (Note [In-place ops on views]).
void copy_slices(const Tensor& root, const Tensor& view, const std::shared_ptr<Node>& op_node) {
  auto copies = std::make_shared<CopySlicesNode>(gradient_edge(root), Edge{op_node, 0}, root, view);
  set_history(root, copies, 0);
  set_view_backward(*get_or_create_meta(view), Edge{copies, 0}, root, view);
}

// An op that writes one of its arguments (Tensor(a!)).
// The backward of a cross-device to(): the gradient moves back.
class ToDeviceNode final : public Node {
 public:
  ToDeviceNode(Edge edge, Device from) : Node(1, {std::move(edge)}), from_(from) {}
  std::string name() const override { return "ToCopyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {grads[0].to(from_)}; }

 private:
  Device from_;
};

Tensor on_to_device(const Tensor& self, Device device) {
  Tensor moved = detach(self).to(device);
  auto m = find_meta(self.impl());
  if (is_grad_enabled() && tracked(m.get()))
    set_history(moved, std::make_shared<ToDeviceNode>(gradient_edge(self), self.device()), 0);
  return moved;
}

bool writes_an_argument(const FunctionSchema& schema) {
  for (const Argument& a : schema.arguments)
    if (a.is_write) return true;
  return false;
}

std::vector<Tensor> on_autograd_call(AutogradCall& call) {
  OperatorEntry& op = *call.op;
  const std::string& name = *call.name;
  const FunctionSchema& schema = Dispatcher::instance().schema(op);
  // Flatten the tensor inputs.
  std::vector<Tensor> flat;
  std::vector<int> flat_begin(call.args.size(), -1), flat_count(call.args.size(), 0);
  for (size_t a = 0; a < call.args.size(); ++a) {
    const Value& v = call.args[a];
    if (auto* t = std::get_if<Tensor>(&v)) {
      flat_begin[a] = int(flat.size());
      flat_count[a] = 1;
      flat.push_back(*t);
    } else if (auto* ot = std::get_if<std::optional<Tensor>>(&v)) {
      flat_begin[a] = int(flat.size());
      flat_count[a] = 1;
      flat.push_back(*ot ? **ot : Tensor());
    } else if (auto* l = std::get_if<std::vector<Tensor>>(&v)) {
      flat_begin[a] = int(flat.size());
      flat_count[a] = int(l->size());
      for (const Tensor& t : *l) flat.push_back(t);
    } else if (a < schema.arguments.size() && std::holds_alternative<std::monostate>(v) &&
               schema.arguments[a].type == ArgType::OptionalTensor) {
      flat_begin[a] = int(flat.size());  // an absent Tensor?
      flat_count[a] = 1;
      flat.emplace_back();
    }
  }
  std::vector<Edge> edges(flat.size());
  bool any = false;
  for (size_t i = 0; i < flat.size(); ++i) {
    edges[i] = gradient_edge(flat[i]);
    any = any || edges[i].valid();
  }
  const DerivativeInfo* info = any ? find_derivative(name) : nullptr;
  // Note [In-place ops in the graph]: an in-place op that writes its first argument (add_, mul_)
  // runs the formulas of its out-of-place form (derivatives.json "inplace"), or its own (copy_,
  // fill_, uniform_, normal_: zeros for the old value, copy_'s source the gradient); the written tensor's
  // value before the op is saved as a copy where a formula reads it, and the tensor's history is
  // rebased onto the new node (PyTorch's rebase_history for tensors that are not views). Leaves
  // that require grad, and views of tensors in a graph, are refused.
  Tensor written_before;
  Tensor view_root;  // of a recorded view written in place (Note [In-place ops on views])
  if (any && writes_an_argument(schema)) {
    auto m = flat[0].defined() ? find_meta(flat[0].impl()) : nullptr;
    TESSERA_CHECK(!(m && m->requires_grad && !m->grad_fn),
                  "a leaf Variable that requires grad is being used in an in-place operation ('", name,
                  "'); do it under NoGradGuard (an optimizer step) or use the out-of-place op");
    if (!info || info->kind != DerivativeKind::Formula || !schema.arguments[0].is_write)
      tessera::detail::throw_error(ErrorCode::Unimplemented,
                                   "'" + name + "': this in-place op is not supported by autograd yet on tensors that "
                                   "require grad (TODO(#31)); use the out-of-place op, or run it under NoGradGuard");
    if (m && m->view_root.defined()) {  // Note [In-place ops on views]
      auto root_meta = find_meta(m->view_root.impl());
      TESSERA_CHECK(!(root_meta && root_meta->requires_grad && !root_meta->grad_fn),
                    "a view of a leaf Variable that requires grad is being used in an in-place operation ('", name,
                    "'); do it under NoGradGuard, or write the out-of-place result");
      TESSERA_CHECK(!flat[0].key_set().has(Functionality::Export), "'", name,
                    "': an in-place op on a view of a tensor in the graph cannot be captured yet (TODO(#31)); write "
                    "the out-of-place result instead, or clone() the view first");
      view_root = m->view_root;
    }
    // A tensor outside the graph that another tensor shares memory with (a view of it, or its base):
    // the write would start this tensor's history but not the other's, whose later uses would then
    // miss the gradient (PyTorch rebases the base, CopySlices). The tensors in `flat` and the call's
    // arguments hold TensorImpls, not the storage, so a count above 1 is another tensor.
    TESSERA_CHECK(tracked(m.get()) || !flat[0].defined() || !flat[0].storage() || flat[0].storage().use_count() <= 1,
                  "'", name,
                  "': writing a tensor that requires grad into one that shares memory with another tensor (a view "
                  "or its base) is not recorded by autograd yet (TODO(#31)); write into a tensor of its own (clone() "
                  "it first), or use the out-of-place op");
    bool reads_written = false;
    for (size_t a = 0; a < flat_begin.size() && a < 64; ++a)
      if ((info->saved_args >> a & 1) && flat_begin[a] >= 0)
        for (int j = 0; j < flat_count[a]; ++j) {
          const Tensor& t = flat[size_t(flat_begin[a] + j)];
          reads_written = reads_written || (t.defined() && t.storage().get() == flat[0].storage().get());
        }
    ExcludeDispatchKeyGuard below(kAutogradKey);
    if (reads_written) written_before = flat[0].clone();
  }
  std::vector<Tensor> outs;
  {
    ExcludeDispatchKeyGuard below(kAutogradKey);
    Stack r = Dispatcher::instance().call_boxed(op, call.args);
    for (Value& v : r) outs.push_back(std::get<Tensor>(std::move(v)));
  }
  if (!any) return outs;
  if (info && info->kind == DerivativeKind::NonDifferentiable) return outs;
  // Inputs marked non-differentiable (indices) get no edge.
  if (info)
    for (size_t a = 0; a < call.args.size() && a < 64; ++a)
      if ((info->nondiff_args >> a & 1) && flat_begin[a] >= 0)
        for (int j = 0; j < flat_count[a]; ++j) edges[size_t(flat_begin[a] + j)] = Edge();
  std::vector<uint32_t> diff_outs;
  for (size_t o = 0; o < outs.size(); ++o)
    if (outs[o].defined() && is_floating(outs[o].dtype())) diff_outs.push_back(uint32_t(o));
  if (diff_outs.empty()) return outs;
  std::shared_ptr<Node> node;
  // An op with several outputs is recorded when only output 0 is differentiable (topk: values and
  // integer indices); its formula reads the others as result1, result2, ...
  const bool one_differentiable = outs.size() == 1 || (diff_outs.size() == 1 && diff_outs[0] == 0);
  if (!info || info->kind == DerivativeKind::NotImplemented || !one_differentiable) {
    std::string why = !info ? "it has no entry in derivatives.json (an op defined by a plugin)"
                            : (!one_differentiable ? "ops with several differentiable outputs are not recorded yet"
                                                   : info->note);
    node = std::make_shared<NotImplementedNode>(std::move(edges), uint32_t(outs.size()), name, why);
  } else {
    auto n = std::make_shared<OpNode>(std::move(edges), uint32_t(outs.size()), &op, info);
    n->device_ = call.device;
    n->device_kernel_ = device_backward_kernel(op, call.device.type());
    if (!call.device.is_cpu())
      if (Stream s = current_stream(call.device); !s.is_default()) n->stream_ = s;
    n->flat_begin_ = flat_begin;
    n->flat_count_ = flat_count;
    n->saved_.resize(flat.size());
    n->inputs_.resize(flat.size());
    n->input_sizes_.resize(flat.size());
    for (size_t a = 0; a < call.args.size(); ++a) {
      const bool save = n->device_kernel_ || (a < 64 && (info->saved_args >> a & 1));
      if (flat_begin[a] < 0) {
        n->args_.push_back(call.args[a]);
        continue;
      }
      n->args_.emplace_back(std::monostate{});
      for (int j = 0; j < flat_count[a]; ++j) {
        const size_t i = size_t(flat_begin[a] + j);
        if (!flat[i].defined()) continue;
        n->inputs_[i] = {std::vector<int64_t>(flat[i].sizes().begin(), flat[i].sizes().end()), flat[i].dtype(),
                         flat[i].device(), true};
        n->input_sizes_[i] = n->inputs_[i].sizes;
        if (flat[i].key_set().has(Functionality::Export)) n->note_dynamic_dims(i, flat[i]);
        if (!save) continue;
        // The written tensor, and any input on its storage, as it was before an in-place op.
        const bool overwritten = written_before.defined() && flat[i].storage().get() == flat[0].storage().get();
        n->saved_[i] = SavedTensor(overwritten ? written_before : flat[i], false);
      }
    }
    if (info->saves_result)
      for (const Tensor& o : outs) n->results_.emplace_back(o, true);
    for (uint32_t o = 0; o < n->results_.size(); ++o) n->results_[o].set_output_of(n, o);
    node = std::move(n);
  }
  for (uint32_t o : diff_outs) set_history(outs[o], node, o);
  if (view_root.defined()) copy_slices(view_root, outs[0], node);
  return outs;
}

void on_view_created(const Tensor& base, Tensor& view) {
  auto m = find_meta(base.impl());
  if (!is_grad_enabled() || !tracked(m.get())) {
    view.impl()->set_key_set(view.key_set() - kAutogradKey);
    return;
  }
  TESSERA_CHECK(has_internal_overlap(*base.impl()) != MemOverlap::Yes,
                "a view of a tensor whose elements share memory (an expanded tensor, sizes ", base.sizes(),
                ", strides ", base.strides(), ") cannot be recorded for backward yet (TODO(#31)); call contiguous() "
                "on it first");
  // Note [In-place ops on views]: the root of the chain (set before any other thread sees the view).
  auto vm = get_or_create_meta(view);
  vm->view_root = m->view_root.defined() ? m->view_root : base;
  set_view_backward(*vm, gradient_edge(base), base, view);
}

}  // namespace

void on_impl_released(const TensorImpl* impl) noexcept { erase_meta(impl); }

Edge view_edge(const Tensor& view, AutogradMeta& m) {
  {
    std::lock_guard lock(m.mu);
    if (storage_version(view) == m.view_version) return {m.grad_fn, m.output_nr};
  }
  // The memory was written since: a view of the root's current history (Note [In-place ops on views]).
  return set_view_backward(m, gradient_edge(m.view_root), m.view_root, view);
}

bool is_recorded_view(const Tensor& t) {
  auto m = t.defined() ? find_meta(t.impl()) : nullptr;
  return m && m->view_root.defined();  // set for every view recorded, and only for those
}

// Note [Tensor autograd methods] (core/include/tessera/autograd_hooks.h).
const tessera::detail::AutogradMethods kTensorMethods = {
    .requires_grad = [](const Tensor& t) { return autograd::requires_grad(t); },
    .set_requires_grad = [](const Tensor& t, bool r) { autograd::set_requires_grad(t, r); },
    .grad = [](const Tensor& t) { return autograd::grad(t); },
    .backward = [](const Tensor& t, const Tensor& g, bool retain, bool create) { autograd::backward(t, g, retain, create); },
    .is_leaf = [](const Tensor& t) { return autograd::is_leaf(t); },
    .detach = [](const Tensor& t) { return autograd::detach(t); },
};

void install_hooks() {
  tessera::detail::set_autograd_core_hooks(&on_view_created, &on_impl_released);
  tessera::detail::set_autograd_methods(&kTensorMethods);
  set_autograd_hook(&on_autograd_call);
  set_autograd_to_device_hook(&on_to_device);
}

std::vector<bool> dynamic_dims(const Tensor& t) {
  if (!t.defined() || !t.key_set().has(Functionality::Export)) return {};
  DynamicDimsQuery query = dynamic_dims_query.load(std::memory_order_acquire);
  return query ? query(t) : std::vector<bool>{};
}

}  // namespace tessera::autograd::detail

namespace tessera::autograd {
void set_dynamic_dims_query(DynamicDimsQuery query) { detail::dynamic_dims_query.store(query, std::memory_order_release); }
}  // namespace tessera::autograd
