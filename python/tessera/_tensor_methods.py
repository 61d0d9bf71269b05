"""Tensor methods written in Python: .to(), conversions, NumPy/DLPack, and the generated op methods."""
from . import _C
from . import _interop
from . import _numpy_api


def to(self, *args, dtype=None, device=None, copy=False, non_blocking=False):
    """to(device), to(dtype), to(device, dtype), to(other_tensor), or the keywords device=, dtype=.
    Returns the tensor itself when nothing changes (a copy when copy=True)."""
    for a in args:
        if isinstance(a, _C.Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, _C.dtype):
            dtype = a
        elif isinstance(a, (str, _C.device)):
            if isinstance(a, str):
                try:
                    a = _C.device(a)
                except ValueError:
                    dtype = a  # a dtype name ("float64")
                    continue
            device = a
        else:
            raise TypeError("to(): expected a device, a dtype or a tensor, not %s" % type(a).__name__)
    if isinstance(device, str):
        device = _C.device(device)
    return self._to(device, dtype, copy)


def tolist(self):
    return _interop.numpy(self, copy=True).tolist()


def type_(self, dtype=None):
    return self.dtype if dtype is None else self.to(dtype=dtype)


def __iter__(self):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    for i in range(self.shape[0]):
        yield self[i]


def fill_(self, value):
    _C._fill(self, value)
    return self


def copy_(self, src, non_blocking=False):
    _C._copy_into(self, src)
    return self


def install(Tensor, ops):
    """Adds the Python methods, then every generated op whose first argument is `self` as a method
    (t.exp(), t.sum(dim=1)) unless the class already has one of that name."""
    own = {"to": to, "tolist": tolist, "type": type_, "__iter__": __iter__, "fill_": fill_, "copy_": copy_,
           "numpy": _interop.numpy, "__array__": _interop.__array__,
           "__array_ufunc__": _numpy_api.array_ufunc, "__array_function__": _numpy_api.array_function,
           "__dlpack__": _interop.__dlpack__, "__dlpack_device__": _interop.__dlpack_device__}
    for name, f in own.items():
        setattr(Tensor, name, f)
    for name in ops.METHOD_NAMES:
        if not hasattr(Tensor, name):
            f = getattr(ops, name)
            # An op bound to its typed function (python/src/typed_ops.cpp) has its method form too.
            if f is getattr(_C, "_typed_" + name, None):
                f = getattr(Tensor, "_typed_" + name)
            setattr(Tensor, name, f)
