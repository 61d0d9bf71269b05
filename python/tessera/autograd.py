"""Gradients from Python (libtessera_autograd; docs/training.md, docs/python.md "Training").

PyTorch's surface: `t.requires_grad_()` / `t.requires_grad`, `t.grad`, `t.backward()`,
`t.detach()`, `t.is_leaf`, `t.grad_fn` (the node's name), `t.retain_grad()`, and here
`tessera.autograd.grad(...)`, `backward(...)`, `no_grad()`, `enable_grad()`, `inference_mode()`.
Every device trains the same way: the backward formulas are contract ops (derivatives.json)."""
from . import _C

_impl = _C._autograd
if not _impl.available:
    raise ImportError("tessera.autograd: this build has no libtessera_autograd/libtessera_nn")


def _list(x):
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False):
    """Accumulates the gradients of `tensors` (weighed by `grad_tensors`; None: ones, for one-element
    tensors) into .grad of every leaf that requires grad. create_graph records the backward, so the
    gradients can be differentiated again (retain_graph defaults to create_graph, as in PyTorch)."""
    outs = _list(tensors)
    grads = _list(grad_tensors) or [None] * len(outs)
    if len(grads) != len(outs):
        raise ValueError("tessera.autograd.backward: %d tensors but %d grad_tensors" % (len(outs), len(grads)))
    keep = create_graph if retain_graph is None else retain_graph
    _impl.backward(outs, grads, bool(keep), bool(create_graph))


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """The gradients of `outputs` with respect to `inputs`, returned (a tuple) instead of accumulated;
    None for an unused input when allow_unused. create_graph as for backward."""
    outs, ins = _list(outputs), _list(inputs)
    grads = _list(grad_outputs) or [None] * len(outs)
    keep = create_graph if retain_graph is None else retain_graph
    return tuple(_impl.grad_of(outs, ins, grads, bool(keep), bool(allow_unused), bool(create_graph)))


def is_grad_enabled():
    return _impl.is_grad_enabled()


def no_grad():
    """`with tessera.no_grad():` records nothing inside (per thread)."""
    return _impl.GradMode(0)


def enable_grad():
    return _impl.GradMode(1)


def inference_mode():
    return _impl.GradMode(2)


class Function:
    """A custom differentiable function (PyTorch's torch.autograd.Function): subclass it with
    static `forward(ctx, *args)` (runs with grad mode off; returns a tensor or a tuple of tensors)
    and `backward(ctx, *grads)` (one gradient per output in; one tensor or None per forward
    argument out), then call `apply(*args)`. `ctx.save_for_backward(*tensors)` /
    `ctx.saved_tensors` (checked for in-place changes), `ctx.mark_non_differentiable(*outputs)`,
    `ctx.mark_dirty(*inputs)` (inputs forward wrote in place; return them), `ctx.needs_input_grad`,
    and any attribute (`ctx.scale = 2.0`). Under tessera.compile the forward and backward are
    traced into the program."""

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("a Function subclass defines forward(ctx, *args)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a Function subclass defines backward(ctx, *grads)")

    @classmethod
    def apply(cls, *args):
        return _impl.function_apply(cls, *args)


def _install_tensor_methods():
    T = _C.Tensor

    def requires_grad_(self, requires_grad=True):
        return _impl.set_requires_grad(self, bool(requires_grad))

    def _set_requires_grad(self, value):
        _impl.set_requires_grad(self, bool(value))

    def _backward(self, gradient=None, retain_graph=None, create_graph=False):
        backward([self], [gradient], retain_graph, create_graph)

    T.requires_grad_ = requires_grad_
    T.requires_grad = property(lambda self: _impl.requires_grad(self), _set_requires_grad,
                               doc="True for a tensor whose gradient is tracked.")
    T.grad = property(lambda self: _impl.grad(self), lambda self, g: _impl.set_grad(self, g),
                      doc="The accumulated gradient (None before backward).")
    T.backward = _backward
    T.detach = lambda self: _impl.detach(self)
    T.is_leaf = property(lambda self: _impl.is_leaf(self))
    T.grad_fn = property(lambda self: _impl.grad_fn_name(self), doc="The name of the node that made the tensor, or None.")
    T.retain_grad = lambda self: _impl.retain_grad(self)


_install_tensor_methods()
