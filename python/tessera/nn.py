"""Modules for training from Python, PyTorch's `torch.nn` in small (docs/python.md, "Training").

A `Module` holds parameters (leaf tensors that require grad) and sub-modules, found by attribute
assignment as in PyTorch; `named_parameters()`, `parameters()`, `zero_grad()`, `state_dict()` /
`load_state_dict()`, `to(device)`, `train()` / `eval()`, and `save(path)` / `load(path)` in the
safetensors format libtessera_nn's C++ modules write (the same file loads on either side).
Buffers (`register_buffer`, `named_buffers()`): state that is not trained, in the state dict and
moved by `to()`. Layers: `Linear`, `Conv2d`, `LayerNorm`, `BatchNorm2d`, `Embedding`, `ReLU`, `GELU`,
`Sequential`; PyTorch's
default initialisation (uniform in +-1/sqrt(fan_in) for Linear and Conv2d, N(0, 1) for Embedding),
drawn from the global generator (`tessera.manual_seed`). Losses and clipping: `cross_entropy`,
`mse_loss`, `clip_grad_norm_`.
"""
import math
from collections import OrderedDict

from . import _C
from . import autograd as _autograd

_impl = _C._autograd


def _tessera():
    import tessera  # the package, imported once it is whole

    return tessera


def parameter(data):
    """A leaf tensor that requires grad holding `data` (PyTorch's nn.Parameter)."""
    with _autograd.no_grad():
        t = _impl.detach(data)
    return t.requires_grad_(True)


def _uniform(shape, bound, device, dtype):
    t = _tessera()
    with _autograd.no_grad():
        x = t.rand(*shape, dtype=dtype, device=device) * (2.0 * bound) - bound
    return parameter(x)


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def register_buffer(self, name, tensor):
        """A tensor of the module's state that is not a parameter (BatchNorm2d's running statistics)."""
        self._buffers[name] = tensor
        object.__setattr__(self, name, tensor)

    def named_buffers(self, prefix=""):
        return self._walk("_buffers", prefix)

    def _walk(self, store, prefix):
        """(name, tensor) pairs of `store` (_parameters or _buffers): the module's own, then each
        sub-module's, every name kept."""
        for name, t in getattr(self, store).items():
            if t is not None:
                yield prefix + name, t
        for name, m in self._modules.items():
            yield from m._walk(store, prefix + name + ".")

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}: call Module.__init__() before assigning '{name}'")
        if name in self._buffers:
            self._buffers[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, _C.Tensor) and _impl.requires_grad(value) and _impl.is_leaf(value):
            self._parameters[name] = value
        elif value is None and name in self._parameters:
            self._parameters[name] = None
        else:
            self._parameters.pop(name, None)
            self._modules.pop(name, None)
        object.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_parameters(self, prefix=""):
        """(name, tensor) pairs: the module's own, then each sub-module's ("layers.0.weight"); a
        parameter two modules share (tied weights) once, under its first name, as PyTorch's."""
        seen = set()
        for name, p in self._all_named_parameters(prefix):
            if id(p) not in seen:
                seen.add(id(p))
                yield name, p

    def _all_named_parameters(self, prefix=""):
        return self._walk("_parameters", prefix)

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def children(self):
        return list(self._modules.values())

    def zero_grad(self):
        for p in self.parameters():
            _impl.set_grad(p, None)

    def train(self, mode=True):
        object.__setattr__(self, "training", bool(mode))
        for m in self._modules.values():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def to(self, device):
        """Moves every parameter to `device` (new leaves that require grad; gradients are dropped) and
        every buffer."""
        for m in [self] + [m for _, m in self._named_modules()]:
            for name, p in list(m._parameters.items()):
                if p is not None:
                    with _autograd.no_grad():
                        moved = _impl.detach(p).to(device)
                    setattr(m, name, moved.requires_grad_(True))
            for name, b in list(m._buffers.items()):
                if b is not None:
                    setattr(m, name, b.to(device))
        return self

    def _named_modules(self, prefix=""):
        for name, m in self._modules.items():
            yield prefix + name, m
            yield from m._named_modules(prefix + name + ".")

    def state_dict(self):
        """The parameters (detached: they share storage with the parameters) and buffers by name."""
        state = OrderedDict((n, _impl.detach(p)) for n, p in self._all_named_parameters())
        state.update(self.named_buffers())
        return state

    def load_state_dict(self, state):
        """Copies `state`'s values in: every parameter and buffer must be there with its shape, and
        nothing else."""
        own = OrderedDict(self._all_named_parameters())
        own.update(self.named_buffers())
        missing = [n for n in own if n not in state]
        unexpected = [n for n in state if n not in own]
        if missing or unexpected:
            raise KeyError(f"load_state_dict(): missing {missing}, unexpected {unexpected}")
        with _autograd.no_grad():
            for n, p in own.items():
                v = state[n]
                if tuple(v.shape) != tuple(p.shape):
                    raise ValueError(f"load_state_dict(): '{n}' has shape {tuple(v.shape)} in the state and "
                                     f"{tuple(p.shape)} in the module")
                p.copy_(v.to(p.device).to(p.dtype))

    def save(self, path):
        """The state dict as a safetensors file (what the C++ Module::save writes)."""
        save(self.state_dict(), path)

    def load(self, path):
        self.load_state_dict(load(path))

    def __repr__(self):
        inner = "".join(f"\n  ({n}): " + repr(m).replace("\n", "\n  ") for n, m in self._modules.items())
        return f"{type(self).__name__}({self.extra_repr()}{inner}{chr(10) if inner else ''})"

    def extra_repr(self):
        return ""


class Linear(Module):
    """y = x W^T + b, W of shape [out_features, in_features]."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        if in_features <= 0 or out_features <= 0:
            raise ValueError(f"Linear({in_features}, {out_features}): the feature counts must be positive")
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight = _uniform([out_features, in_features], bound, device, dtype)
        self.bias = _uniform([out_features], bound, device, dtype) if bias else None

    def forward(self, x):
        return _tessera().linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _pair(v):
    return [v, v] if isinstance(v, int) else list(v)


class Conv2d(Module):
    """2-D convolution over NCHW input; weight [out_channels, in_channels / groups, kH, kW]."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, device=None, dtype=None):
        super().__init__()
        if in_channels <= 0 or out_channels <= 0 or groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d({in_channels}, {out_channels}, groups={groups}): channel counts must be "
                             "positive multiples of groups")
        k = _pair(kernel_size)
        self.stride, self.padding, self.dilation, self.groups = _pair(stride), _pair(padding), _pair(dilation), groups
        bound = 1.0 / math.sqrt(in_channels // groups * k[0] * k[1])
        self.weight = _uniform([out_channels, in_channels // groups] + k, bound, device, dtype)
        self.bias = _uniform([out_channels], bound, device, dtype) if bias else None

    def forward(self, x):
        return _tessera().conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        t = _tessera()
        self.normalized_shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
        self.eps = eps
        if elementwise_affine:
            self.weight = parameter(t.ones(*self.normalized_shape, dtype=dtype, device=device))
            self.bias = parameter(t.zeros(*self.normalized_shape, dtype=dtype, device=device))
        else:
            self.weight = self.bias = None

    def forward(self, x):
        return _tessera().layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class BatchNorm2d(Module):
    """torch.nn.BatchNorm2d over NCHW input, as libtessera_nn's: in training mode the batch's statistics
    over N, H and W (contract ops, so autograd and tessera.compile need nothing of their own) and an
    in-place update of the running statistics (the unbiased variance, `momentum`) and of
    num_batches_tracked; in eval mode the batch_norm op with the running statistics."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, device=None, dtype=None):
        super().__init__()
        if num_features <= 0:
            raise ValueError(f"BatchNorm2d: num_features must be positive, got {num_features}")
        t = _tessera()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        if affine:
            self.weight = parameter(t.ones(num_features, dtype=dtype, device=device))
            self.bias = parameter(t.zeros(num_features, dtype=dtype, device=device))
        else:
            self.weight = self.bias = None
        self.register_buffer("running_mean", t.zeros(num_features, dtype=dtype, device=device))
        self.register_buffer("running_var", t.ones(num_features, dtype=dtype, device=device))
        self.register_buffer("num_batches_tracked", t.zeros((), dtype=t.int64, device=device))

    def forward(self, x):
        t = _tessera()
        if x.dim() != 4 or x.shape[1] != self.num_features:
            raise ValueError(f"BatchNorm2d({self.num_features}): expected input [N, {self.num_features}, H, W], "
                             f"got {list(x.shape)}")
        if not self.training:
            return t.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var, False,
                                self.momentum, self.eps, False)
        if x.numel() // self.num_features <= 1:
            raise ValueError(f"BatchNorm2d: expected more than 1 value per channel when training, got input "
                             f"{list(x.shape)}")
        mu = t.mean(x, [0, 2, 3], True)
        centred = x - mu
        y = centred * t.rsqrt(t.mean(centred * centred, [0, 2, 3], True) + self.eps)
        if self.weight is not None:
            shape = [1, self.num_features, 1, 1]
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        with _autograd.no_grad():
            self.running_mean.mul_(1 - self.momentum)
            self.running_mean.add_(mu.reshape([self.num_features]).to(self.running_mean.dtype), alpha=self.momentum)
            self.running_var.mul_(1 - self.momentum)
            self.running_var.add_(t.var(x, [0, 2, 3], 1, False).to(self.running_var.dtype), alpha=self.momentum)
            self.num_batches_tracked.add_(1)
        return y

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.weight is not None}"


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
        super().__init__()
        with _autograd.no_grad():
            w = _tessera().randn(num_embeddings, embedding_dim, dtype=dtype, device=device)
        self.weight = parameter(w)

    def forward(self, indices):
        return _tessera().embedding(self.weight, indices)


class ReLU(Module):
    def forward(self, x):
        return _tessera().relu(x)


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return _tessera().gelu(x, approximate=self.approximate)


class Sequential(Module):
    """Runs its modules in order; they are named "0", "1", ... as in PyTorch."""

    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential: argument {i} is a {type(m).__name__}, not a Module")
            setattr(self, str(i), m)

    def __len__(self):
        return len(self._modules)

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


def cross_entropy(logits, targets):
    """The mean of -log softmax(logits)[target] over rows; targets are int64 class indices."""
    return _impl.cross_entropy(logits, targets)


def mse_loss(input, target):
    return _impl.mse_loss(input, target)


def clip_grad_norm_(parameters, max_norm):
    """Scales the gradients so that their joint 2-norm is at most max_norm; returns the norm before."""
    return _impl.clip_grad_norm_(list(parameters), float(max_norm))


def save(state, path):
    """A state dict (name -> tensor) as a safetensors file; a Module saves its state dict."""
    if isinstance(state, Module):
        state = state.state_dict()
    _impl.save_safetensors(dict(state), str(path))


def load(path):
    """A safetensors file's tensors by name (CPU tensors)."""
    return OrderedDict(sorted(_impl.load_safetensors(str(path)).items()))
