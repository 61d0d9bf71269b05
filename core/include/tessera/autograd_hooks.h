// The two places where the core tells the autograd layer (autograd/, above the dispatcher) about a
// tensor that carries the Autograd dispatch key. Note [Autograd meta outside TensorImpl]
// The core keeps no autograd state of its own: a tensor that requires grad, or that an op recorded
// in a graph produced, has the Autograd functionality in its key set, and its autograd meta
// (requires_grad, grad, grad_fn, hooks) lives in a table of libtessera_autograd keyed by the
// TensorImpl. The core calls back in exactly two cases, both only for impls with the Autograd key
// (a tensor without it pays one bit test):
//   - a metadata-only view was made of such a tensor (make_view: view, permute, select, slice,
//     expand, ...), so that autograd can record the view's backward;
//   - such an impl is destroyed, so that its entry leaves the table (impls come from a pool and
//     their addresses are reused).
// Without libtessera_autograd loaded both hooks are null and nothing happens. The hooks are set once,
// when that library loads, and read with an acquire load.
#pragma once
#include "tessera/export.h"

namespace tessera {
class Tensor;
class TensorImpl;
namespace detail {

// `view` was made from `base` (which has the Autograd key) by a core view function; `view` starts
// with base's key set. The hook may record a graph node for it, or clear the Autograd key of
// `view` (a view made while grad mode is off). May throw; the view is then not returned.
using ViewCreatedHook = void (*)(const Tensor& base, Tensor& view);
// `impl` (with the Autograd key) is being destroyed. Must not throw.
using ImplReleasedHook = void (*)(const TensorImpl* impl) noexcept;

TESSERA_API void set_autograd_core_hooks(ViewCreatedHook on_view, ImplReleasedHook on_release);

// Note [Tensor autograd methods]
// Tensor::requires_grad(), requires_grad_(), grad(), backward(), is_leaf() and detach() forward to
// libtessera_autograd through this table, which the library sets when it loads, so that the core
// keeps no autograd code. Without it a tensor is outside every graph: requires_grad() is false,
// is_leaf() true, grad() undefined, detach() a new handle on the same data, requires_grad_(false) a
// no-op; requires_grad_(true) and backward() throw, naming the library to link.
struct AutogradMethods {
  bool (*requires_grad)(const Tensor& t);
  void (*set_requires_grad)(const Tensor& t, bool requires_grad);
  Tensor (*grad)(const Tensor& t);
  void (*backward)(const Tensor& t, const Tensor& gradient, bool retain_graph, bool create_graph);
  bool (*is_leaf)(const Tensor& t);
  Tensor (*detach)(const Tensor& t);
};
// `methods` must outlive every call (a static table); nullptr removes it.
TESSERA_API void set_autograd_methods(const AutogradMethods* methods);

}  // namespace detail
}  // namespace tessera
