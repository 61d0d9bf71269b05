// Autograd: gradients of tensor programs on any device (libtessera_autograd). docs/training.md.
// Note [Autograd model]
// PyTorch's model, in C++. A tensor that requires grad (a leaf, set with set_requires_grad) or
// that a recorded op produced carries the Autograd dispatch key; every op called on it while grad
// mode is on reaches the autograd hook (Note [Autograd dispatch]), which runs the op below the key
// and records a Node: the op's backward, its saved inputs and outputs, and one edge per tensor
// input to that input's own grad_fn (or to the leaf's gradient accumulator). backward() walks the
// graph from the outputs in reverse order of recording, runs each node's backward on the device
// its tensors live on (the generic formula of dispatcher/ops/derivatives.json, made of contract ops,
// or the device's own backward kernel) and accumulates into the leaves' grad.
// Tensors without the key pay nothing (one bit test per dispatch); NoGradGuard and InferenceMode
// exclude the key on the thread. Views made by the core (view, permute, select, slice, expand, ...)
// of a tensor that requires grad record their own backward (Note [Autograd meta outside TensorImpl]).
// Thread-safety: recording is per calling thread; the graph is shared and immutable once recorded;
// a leaf's grad is accumulated under a lock, so backward() may run on several threads at once over
// graphs that share leaves. In-place add_ / mul_ on non-leaves rebase the history (Note [In-place
// ops in the graph]). Not yet: other in-place ops and in-place ops on views of tensors in a graph,
// higher-order gradients (create_graph): docs/training.md.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/ops.h"
#include "tessera/tensor.h"

#if defined(TESSERA_BUILDING_AUTOGRAD)
#define TESSERA_AUTOGRAD_API __attribute__((visibility("default")))
#else
#define TESSERA_AUTOGRAD_API
#endif

namespace tessera::autograd {

class Node;

// ---- per-tensor state
// Makes `t` a leaf that requires grad (or not). Only floating tensors may require grad; a tensor
// with a grad_fn (a non-leaf) may not be changed. Returns `t`.
TESSERA_AUTOGRAD_API const Tensor& set_requires_grad(const Tensor& t, bool requires_grad = true);
TESSERA_AUTOGRAD_API bool requires_grad(const Tensor& t);
// True for tensors that requires_grad with no grad_fn, and for every tensor that does not require grad.
TESSERA_AUTOGRAD_API bool is_leaf(const Tensor& t);
// The accumulated gradient of a leaf (or of a non-leaf after retain_grad); undefined when none.
TESSERA_AUTOGRAD_API Tensor grad(const Tensor& t);
TESSERA_AUTOGRAD_API void set_grad(const Tensor& t, const Tensor& grad);
// The node that produced `t` ("MulBackward"), or null for leaves and tensors outside a graph.
TESSERA_AUTOGRAD_API std::shared_ptr<Node> grad_fn(const Tensor& t);
// The storage's version (Note [Storage version] in tensor.h): the counter the saved-tensor check reads.
TESSERA_AUTOGRAD_API uint64_t version(const Tensor& t);
// A tensor sharing `t`'s storage and geometry, outside any graph (requires_grad false).
TESSERA_AUTOGRAD_API Tensor detach(const Tensor& t);
// Keeps the gradient of a non-leaf in grad(t) after backward (a no-op for leaves).
TESSERA_AUTOGRAD_API void retain_grad(const Tensor& t);

// A hook on a tensor's gradient: called with the gradient before it is accumulated (leaf) or passed
// on (non-leaf); a defined return value replaces it. Hooks run in the order registered, on the
// thread that runs backward. Returns a handle for remove_hook.
using TensorHook = std::function<Tensor(const Tensor& grad)>;
TESSERA_AUTOGRAD_API int64_t register_hook(const Tensor& t, TensorHook hook);
TESSERA_AUTOGRAD_API void remove_hook(const Tensor& t, int64_t handle);

// ---- running backward
// Accumulates d(outputs)/d(leaf) into grad() of every leaf that requires grad and is reachable.
// `grad_outputs[i]` (undefined: ones, allowed only for one-element outputs) weighs outputs[i].
// Unless `retain_graph`, the saved tensors of the graph are freed, and a second backward through it
// throws. Throws when an output does not require grad, a shape does not match, a saved tensor was
// modified in place after it was saved, or an op on the path has no derivative.
// Note [Higher-order gradients]: with `create_graph` (which implies retain_graph) the backward itself
// is recorded: the formulas' contract ops run with grad mode on, a saved input comes back with its
// gradient edge (a saved output with its own node's), the backward of a view is a permute or a
// scatter instead of a write through the view, and a device's fused backward kernel gives way to
// the formula; so the gradients can be differentiated again (gradient penalties, Hessian-vector
// products). Outputs a custom function saves with save_for_backward come back without history.
// backward(create_graph) accumulates gradients that keep their graph into the leaves' grad(), and
// that graph reaches the leaves again: as in PyTorch (which warns of the same reference cycle), set
// the gradients to none (zero_grad) when done with them, or use grad(), which accumulates nothing.
TESSERA_AUTOGRAD_API void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
                                   bool retain_graph = false, bool create_graph = false);
TESSERA_AUTOGRAD_API void backward(const Tensor& output, const Tensor& grad_output = Tensor(), bool retain_graph = false,
                                   bool create_graph = false);
// The gradients of `outputs` with respect to `inputs` (which must require grad), returned instead of
// accumulated. With `allow_unused`, an input the outputs do not depend on gets an undefined tensor;
// otherwise that is an error. `create_graph` as for backward.
TESSERA_AUTOGRAD_API std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                                              const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                                              bool allow_unused = false, bool create_graph = false);

// ---- grad mode
TESSERA_AUTOGRAD_API bool is_grad_enabled();
// Ops inside the guard's lifetime record nothing (their outputs do not require grad). Per thread;
// nests; restores the previous mode.
class TESSERA_AUTOGRAD_API NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool was_excluded_;
};
// Re-enables grad mode inside a NoGradGuard.
class TESSERA_AUTOGRAD_API EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool was_excluded_;
};
// Inference mode: grad mode off, and is_inference_mode_enabled() true for code that wants to skip
// bookkeeping. Unlike PyTorch's, tensors made inside are ordinary tensors (no "inference tensor"
// flag yet), so using them later in a recorded graph is allowed.
class TESSERA_AUTOGRAD_API InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

 private:
  bool was_excluded_;
  bool was_inference_;
};
TESSERA_AUTOGRAD_API bool is_inference_mode_enabled();

// ---- the graph
struct Edge {
  std::shared_ptr<Node> fn;  // null: the input needs no gradient
  uint32_t input_nr = 0;
  bool valid() const { return bool(fn); }
};

// A recorded backward. apply() takes the gradients of the node's outputs (undefined where an output
// got none) and returns one gradient per next edge.
class TESSERA_AUTOGRAD_API Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node();
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees what the node saved for backward (after a backward without retain_graph).
  virtual void release_saved() {}
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  uint32_t num_outputs() const { return num_outputs_; }

  // Hooks on the gradient of output `output_nr` (register_hook on a non-leaf).
  std::vector<std::pair<int64_t, TensorHook>>& output_hooks(uint32_t output_nr);

 protected:
  Node(uint32_t num_outputs, std::vector<Edge> next_edges);
  std::vector<Edge> next_edges_;
  uint64_t sequence_nr_;
  uint32_t num_outputs_;
  std::vector<std::vector<std::pair<int64_t, TensorHook>>> output_hooks_;
  friend struct Recorder;
};

// Counters for tests and TESSERA_LOG=autograd: how backward ran on this thread.
struct BackwardStats {
  uint64_t nodes_run = 0;
  uint64_t device_kernels_run = 0;  // backward kernels of plugins (Note [Autograd dispatch])
  uint64_t generic_formulas_run = 0;
};
TESSERA_AUTOGRAD_API BackwardStats& backward_stats();

// The gradient edge of `t`: its grad_fn and output number, or its accumulator when it is a leaf
// that requires grad; invalid otherwise. For custom functions (function.h).
TESSERA_AUTOGRAD_API Edge gradient_edge(const Tensor& t);
// Makes `t` output `output_nr` of `fn` (it then requires grad and has the Autograd key).
TESSERA_AUTOGRAD_API void set_history(const Tensor& t, const std::shared_ptr<Node>& fn, uint32_t output_nr);
// Sums `grad` over the dims that broadcasting added or expanded so that it has `sizes`.
TESSERA_AUTOGRAD_API Tensor sum_to(const Tensor& grad, IntArrayRef sizes);

// Note [Dynamic sizes in backward formulas] (formula_helpers.cpp): under a capture with dynamic
// shapes, which dims of a tracing tensor are symbolic. libtessera_compiler sets the query; autograd
// asks it when it records an op on a tracing tensor, so that a formula that broadcasts a gradient
// back over a dynamic dim (sum's, mean's) takes that size from the input instead of its example.
using DynamicDimsQuery = std::vector<bool> (*)(const Tensor& tracing);
TESSERA_AUTOGRAD_API void set_dynamic_dims_query(DynamicDimsQuery query);
// Under a capture, called when a leaf is about to receive a traced gradient, with its .grad before
// (Note [Program state] in tessera/compiler/ir.h: the leaf's .grad is an output of the program,
// also for a leaf the capture saw only through a view). Set by libtessera_compiler.
using LeafGradObserver = void (*)(const Tensor& leaf, const Tensor& grad_before);
TESSERA_AUTOGRAD_API void set_leaf_grad_observer(LeafGradObserver observer);

// A saved tensor with the version check of Note [Saved tensors] (engine.cpp).
class TESSERA_AUTOGRAD_API SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output);
  // The tensor, or an error naming `node` when its storage was written after it was saved or the
  // graph's saved tensors were freed by an earlier backward.
  // Under grad mode (a backward with create_graph) the tensor comes back with its history: a saved
  // input's gradient edge, a saved output's node (Note [Higher-order gradients]).
  Tensor unpack(const std::string& node) const;
  bool defined() const { return defined_; }
  // For a saved output: the node that produced it, held weakly (the node owns this SavedTensor).
  void set_output_of(const std::shared_ptr<Node>& fn, uint32_t output_nr) {
    output_fn_ = fn;
    edge_.input_nr = output_nr;
  }
  void reset() {
    data_ = Tensor();
    edge_ = Edge();
    output_fn_.reset();
    released_ = defined_;
  }

 private:
  Tensor data_;
  Edge edge_;                         // a saved input's gradient edge at the time it was saved
  std::weak_ptr<Node> output_fn_;     // a saved output's node
  uint64_t version_ = 0;
  bool defined_ = false;
  bool released_ = false;
};

}  // namespace tessera::autograd
