// The backward engine: nodes, saved tensors, gradient accumulation, backward() and grad().
#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>

#include "autograd_internal.h"
#include "tessera/log.h"

namespace tessera::autograd {

// ---- Node

Node::Node(uint32_t num_outputs, std::vector<Edge> next_edges)
    : next_edges_(std::move(next_edges)), sequence_nr_(detail::next_sequence_nr()), num_outputs_(num_outputs),
      output_hooks_(num_outputs) {}
Node::~Node() = default;

std::vector<std::pair<int64_t, TensorHook>>& Node::output_hooks(uint32_t output_nr) {
  TESSERA_INTERNAL_ASSERT(output_nr < output_hooks_.size(), name(), ": output ", output_nr, " out of range");
  return output_hooks_[output_nr];
}

BackwardStats& backward_stats() {
  thread_local BackwardStats stats;
  return stats;
}

// ---- Note [Saved tensors]
// A node keeps what its backward needs as SavedTensors: an alias of the tensor outside any graph
// (so that saving an op's own output makes no reference cycle through its grad_fn) and the storage's
// version at the time (Note [Storage version] in tensor.h). Every write the runtime sees moves that
// version (an in-place op, data_ptr()), and so does a write through any view of the same storage;
// unpack() compares and refuses with PyTorch's message. A backward without retain_graph frees them.

SavedTensor::SavedTensor(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  data_ = detach(t);
  version_ = t.storage() ? t.storage()->version() : 0;
  defined_ = true;
  // An input's edge points up the graph (no cycle); an output's node is set weakly by its recorder.
  if (!is_output && requires_grad(t)) edge_ = gradient_edge(t);
}

Tensor SavedTensor::unpack(const std::string& node) const {
  if (!defined_) return Tensor();
  TESSERA_CHECK(!released_, "Trying to backward through the graph a second time (or directly access saved tensors "
                            "after they have already been freed) in ", node,
                ". Saved intermediate values of the graph are freed when you call backward() or grad(). Specify "
                "retain_graph=true if you need to backward through the graph a second time");
  const uint64_t now = data_.storage() ? data_.storage()->version() : 0;
  if (now != version_) {
    std::ostringstream os;
    os << "one of the variables needed for gradient computation has been modified by an inplace operation: ["
       << dtype_name(data_.dtype()) << " " << data_.sizes() << "], which was saved by " << node
       << ", has been written since (storage version " << now << ", expected " << version_
       << "). Hint: find the in-place operation (or data_ptr() write) on it or on a view of it, and use its "
          "out-of-place form or clone() the tensor first";
    tessera::detail::throw_error(ErrorCode::InvalidArgument, os.str());
  }
  if (is_grad_enabled()) {  // Note [Higher-order gradients]
    std::shared_ptr<Node> fn = edge_.fn ? edge_.fn : output_fn_.lock();
    if (fn) {
      Tensor with_history = detach(data_);
      set_history(with_history, fn, edge_.input_nr);
      return with_history;
    }
  }
  return data_;
}

// ---- sum_to

Tensor sum_to(const Tensor& grad, IntArrayRef sizes) {
  if (!grad.defined() || grad.sizes() == sizes) return grad;
  const int64_t lead = grad.dim() - int64_t(sizes.size());
  TESSERA_CHECK(lead >= 0, "sum_to(): a gradient of sizes ", grad.sizes(), " cannot be summed to sizes ", sizes);
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < lead; ++i) dims.push_back(i);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t g = grad.sizes()[size_t(lead) + i];
    if (sizes[i] == 1 && g != 1) dims.push_back(lead + int64_t(i));
    else TESSERA_CHECK(sizes[i] == g, "sum_to(): a gradient of sizes ", grad.sizes(), " does not broadcast to ", sizes);
  }
  Tensor r = dims.empty() ? grad : tessera::sum(grad, dims, true);
  return r.reshape(sizes);
}

// ---- the gradient accumulator of a leaf

namespace {
std::atomic<LeafGradObserver> leaf_grad_observer{nullptr};

class AccumulateGrad final : public Node {
 public:
  // Holds the leaf (as PyTorch's AccumulateGrad holds its variable; the leaf's meta holds this node
  // weakly, so there is no cycle): a capture is told which leaf a traced gradient went to.
  explicit AccumulateGrad(std::shared_ptr<detail::AutogradMeta> meta, const Tensor& leaf)
      : Node(1, {}), meta_(std::move(meta)), leaf_(leaf), sizes_(leaf.sizes().begin(), leaf.sizes().end()),
        dtype_(leaf.dtype()) {}
  std::string name() const override { return "AccumulateGrad"; }
  // Leaf hooks, then the hooks registered on the node.
  Tensor run_leaf_hooks(Tensor g) {
    std::vector<std::pair<int64_t, TensorHook>> hooks;
    {
      std::lock_guard lock(meta_->mu);
      hooks = meta_->hooks;
    }
    for (auto& [h, fn] : hooks) {
      Tensor r = fn(g);
      if (r.defined()) g = r;
    }
    return g;
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor g = std::move(grads[0]);
    if (!g.defined()) return {};
    TESSERA_CHECK(g.sizes() == IntArrayRef(sizes_), "AccumulateGrad: the gradient has sizes ", g.sizes(),
                  ", the leaf ", IntArrayRef(sizes_));
    if (g.dtype() != dtype_) g = g.to(dtype_);
    if (g.key_set().has(Functionality::Export))
      if (LeafGradObserver observe = leaf_grad_observer.load(std::memory_order_acquire)) {
        Tensor before;
        {
          std::lock_guard lock(meta_->mu);
          before = meta_->grad;
        }
        observe(leaf_, before);
      }
    std::lock_guard lock(meta_->mu);
    if (!meta_->grad.defined()) meta_->grad = g.use_count() == 1 && g.is_contiguous() ? g : g.clone();
    else meta_->grad = tessera::add(meta_->grad, g);
    return {};
  }

 private:
  std::shared_ptr<detail::AutogradMeta> meta_;
  Tensor leaf_;
  std::vector<int64_t> sizes_;
  DType dtype_;
};
}  // namespace

void set_leaf_grad_observer(LeafGradObserver observer) {
  leaf_grad_observer.store(observer, std::memory_order_release);
}

std::shared_ptr<Node> detail::grad_accumulator(const Tensor& leaf, const std::shared_ptr<AutogradMeta>& meta) {
  std::lock_guard lock(meta->mu);
  if (auto acc = meta->grad_accumulator.lock()) return acc;
  auto acc = std::make_shared<AccumulateGrad>(meta, leaf);
  meta->grad_accumulator = acc;
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  auto m = t.defined() ? detail::find_meta(t.impl()) : nullptr;
  if (!m) return {};
  if (m->view_root.defined()) return detail::view_edge(t, *m);
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (m->requires_grad) return {detail::grad_accumulator(t, m), 0};
  return {};
}

void set_history(const Tensor& t, const std::shared_ptr<Node>& fn, uint32_t output_nr) {
  auto m = detail::get_or_create_meta(t);
  std::lock_guard lock(m->mu);
  m->requires_grad = false;
  m->grad_fn = fn;
  m->output_nr = output_nr;
}

// ---- running the graph

namespace {

struct ByLatest {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return tessera::add(a, b);
}

// Runs the graph from `roots` (weighted by `root_grads`). With `targets`, returns the gradient that
// reaches each target edge and accumulates into no leaf; without, accumulates into the leaves.
std::vector<Tensor> run_graph(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads, bool keep_graph,
                              const std::vector<Edge>* targets, bool create_graph) {
  // Backward records nothing, unless create_graph (Note [Higher-order gradients]).
  std::optional<NoGradGuard> no_grad;
  std::optional<EnableGradGuard> with_grad;
  if (create_graph) with_grad.emplace();
  else no_grad.emplace();
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_map<Node*, bool> seen;
  for (const Edge& e : roots)
    if (e.fn && !seen[e.fn.get()]) {
      seen[e.fn.get()] = true;
      stack.push_back(e.fn.get());
    }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      if (!seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
      }
    }
  }
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto buffer_of = [&](const std::shared_ptr<Node>& n) -> std::vector<Tensor>& {
    auto& b = buffers[n.get()];
    if (b.empty()) b.resize(n->num_outputs());
    return b;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, ByLatest> ready;
  std::unordered_map<Node*, bool> queued;
  for (size_t i = 0; i < roots.size(); ++i) {
    auto& b = buffer_of(roots[i].fn);
    b[roots[i].input_nr] = accumulate(b[roots[i].input_nr], root_grads[i]);
  }
  for (const Edge& e : roots)
    if (deps[e.fn.get()] == 0 && !queued[e.fn.get()]) {
      queued[e.fn.get()] = true;
      ready.push(e.fn);
    }
  std::vector<Tensor> captured(targets ? targets->size() : 0);
  while (!ready.empty()) {
    std::shared_ptr<Node> n = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffer_of(n));
    buffers.erase(n.get());
    auto* acc = dynamic_cast<AccumulateGrad*>(n.get());
    for (uint32_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (acc) grads[i] = acc->run_leaf_hooks(grads[i]);
      for (auto& [h, fn] : n->output_hooks(i)) {
        Tensor r = fn(grads[i]);
        if (r.defined()) grads[i] = r;
      }
    }
    if (targets)
      for (size_t t = 0; t < targets->size(); ++t)
        if ((*targets)[t].fn == n) captured[t] = accumulate(captured[t], grads[(*targets)[t].input_nr]);
    if (acc && targets) continue;  // grad() accumulates into no leaf
    const bool any = std::any_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); });
    std::vector<Tensor> outs;
    if (any) {
      ++backward_stats().nodes_run;
      outs = n->apply(std::move(grads));
    }
    if (!keep_graph) n->release_saved();
    const auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.fn) continue;
      if (i < outs.size() && outs[i].defined()) {
        auto& b = buffer_of(e.fn);
        b[e.input_nr] = accumulate(b[e.input_nr], outs[i]);
      }
      if (--deps[e.fn.get()] == 0 && !queued[e.fn.get()]) {
        queued[e.fn.get()] = true;
        ready.push(e.fn);
      }
    }
  }
  return captured;
}

void check_root(const Tensor& out, size_t i, const Tensor& g, Tensor& root_grad) {
  TESSERA_CHECK(out.defined(), "backward(): output ", i, " is undefined");
  if (g.defined()) {
    TESSERA_CHECK(g.sizes() == out.sizes(), "backward(): grad_outputs[", i, "] has sizes ", g.sizes(),
                  ", output ", i, " has sizes ", out.sizes(), "; they must match");
    root_grad = g.dtype() == out.dtype() ? g : g.to(out.dtype());
  } else {
    TESSERA_CHECK(out.numel() == 1, "grad can be implicitly created only for scalar outputs: output ", i,
                  " has sizes ", out.sizes(), "; pass grad_outputs");
    NoGradGuard no_grad;
    root_grad = ones_like(out);
  }
}

std::vector<Edge> root_edges(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                             std::vector<Tensor>& root_grads) {
  TESSERA_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "backward(): got ",
                grad_outputs.size(), " grad_outputs for ", outputs.size(), " outputs");
  std::vector<Edge> roots;
  root_grads.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_root(outputs[i], i, grad_outputs.empty() ? Tensor() : grad_outputs[i], root_grads[i]);
    Edge e = gradient_edge(outputs[i]);
    TESSERA_CHECK(e.valid(), "element ", i, " of tensors does not require grad and does not have a grad_fn");
    roots.push_back(std::move(e));
  }
  return roots;
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) {
  std::vector<Tensor> root_grads;
  std::vector<Edge> roots = root_edges(outputs, grad_outputs, root_grads);
  run_graph(roots, root_grads, retain_graph || create_graph, nullptr, create_graph);
}

void backward(const Tensor& output, const Tensor& grad_output, bool retain_graph, bool create_graph) {
  backward(std::vector<Tensor>{output},
           grad_output.defined() ? std::vector<Tensor>{grad_output} : std::vector<Tensor>{}, retain_graph,
           create_graph);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool allow_unused,
                         bool create_graph) {
  std::vector<Tensor> root_grads;
  std::vector<Edge> roots = root_edges(outputs, grad_outputs, root_grads);
  std::vector<Edge> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Edge e = gradient_edge(inputs[i]);
    TESSERA_CHECK(e.valid(), "grad(): input ", i, " does not require grad; call set_requires_grad on it first");
    targets.push_back(std::move(e));
  }
  std::vector<Tensor> result = run_graph(roots, root_grads, retain_graph || create_graph, &targets, create_graph);
  for (size_t i = 0; i < result.size(); ++i) {
    TESSERA_CHECK(allow_unused || result[i].defined(), "grad(): one of the differentiated tensors (input ", i,
                  ") appears to not have been used in the graph. Set allow_unused=true if this is the desired behavior");
    if (result[i].defined() && result[i].dtype() != inputs[i].dtype()) result[i] = result[i].to(inputs[i].dtype());
  }
  return result;
}

}  // namespace tessera::autograd
