// Private to libtessera_autograd: per-tensor autograd meta and the gradient accumulator.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "tessera/autograd.h"
#include "tessera/dispatch_key.h"

namespace tessera::autograd::detail {

constexpr DispatchKeySet kAutogradKey = DispatchKeySet::functionality(Functionality::Autograd);

// The autograd state of one TensorImpl (Note [Autograd meta outside TensorImpl] in autograd_hooks.h).
struct AutogradMeta {
  std::mutex mu;
  bool requires_grad = false;  // a leaf that requires grad
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;  // set for non-leaves
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;
  std::vector<std::pair<int64_t, TensorHook>> hooks;  // leaf hooks
  // A recorded view (Note [In-place ops on views] in record.cpp): the tensor that owns the memory
  // it views (the root of a chain of views; set once, when the view is made), and the storage
  // version when its grad_fn was last set from the root's history (under mu).
  Tensor view_root;
  uint64_t view_version = 0;
};

// The meta of `impl`, or null.
std::shared_ptr<AutogradMeta> find_meta(const TensorImpl* impl);
// The meta of `t`, created (with the Autograd key added to t's key set) when absent.
std::shared_ptr<AutogradMeta> get_or_create_meta(const Tensor& t);
void erase_meta(const TensorImpl* impl);

// True when `t` takes part in a graph: a leaf that requires grad or a tensor with a grad_fn.
bool tracked(const AutogradMeta* m);

// The node that accumulates into the leaf's grad.
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf, const std::shared_ptr<AutogradMeta>& meta);

int64_t next_hook_handle();
uint64_t next_sequence_nr();

// The dispatch hook and the view hook (record.cpp); installed when the library loads.
void install_hooks();
void on_impl_released(const TensorImpl* impl) noexcept;
// Whether `t` is a recorded view of a tensor in a graph (its grad_fn is a view's backward).
bool is_recorded_view(const Tensor& t);
// The gradient edge of the recorded view `view` (meta `m`, whose view_root is set): its grad_fn,
// rebuilt from its root's current history first when the storage was written since it was set
// (Note [In-place ops on views] in record.cpp).
Edge view_edge(const Tensor& view, AutogradMeta& m);

// Under a capture with dynamic shapes, which dims of the tracing tensor `t` are symbolic (empty
// otherwise: eager, or no capture query set). Note [Dynamic sizes in backward formulas].
std::vector<bool> dynamic_dims(const Tensor& t);

}  // namespace tessera::autograd::detail
