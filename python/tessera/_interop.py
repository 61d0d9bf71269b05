"""NumPy and DLPack without copies (docs/python.md, Note [Zero-copy interop] in python/src/interop.cpp)."""
from . import _C

# DLPack device types (dlpack.h's DLDeviceType).
KDL_CPU, KDL_CUDA, KDL_OPENCL, KDL_EXT_DEV = 1, 2, 4, 12


def from_numpy(array, *, copy=False):
    """A CPU tensor sharing `array`'s memory (the array stays alive while the tensor or a view of it
    does). An array whose layout a tensor cannot express (negative strides) raises ValueError
    unless copy=True, which copies it first."""
    import numpy as np
    if not isinstance(array, np.ndarray):
        raise TypeError("from_numpy: expected a numpy.ndarray, not %s" % type(array).__name__)
    if copy:
        return _C._from_array(np.ascontiguousarray(array).copy())
    return _C._from_array(array)


def from_dlpack(obj, *, device=None, copy=None):
    """A tensor sharing the memory of `obj`, any object with __dlpack__ (NumPy, PyTorch, CuPy, JAX) or
    the buffer protocol. CPU memory is taken without a copy, and so is memory on a device Tessera has
    (kDLCUDA, kDLOpenCL, kDLExtDev: adopted as that device's memory handle by the C++
    tessera::from_dlpack); memory on any other device raises BufferError unless copy=True, which
    copies it to the CPU through the producer. A tessera.Tensor is returned as it is (copy=True:
    cloned). `device`, when given, moves the result there."""
    from ._C import Tensor
    if isinstance(obj, Tensor):
        t = obj.clone() if copy else obj
    else:
        dev = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (KDL_CPU, 0)
        if dev[0] in (KDL_CUDA, KDL_OPENCL, KDL_EXT_DEV) and not copy:
            t = _from_device_capsule(obj, dev)
            return t.to(device) if device is not None else t
        if dev[0] != KDL_CPU:
            if not copy:
                raise BufferError("from_dlpack: the object lives on DLPack device %r, whose memory Tessera cannot "
                                  "take without a copy; pass copy=True to copy it to the CPU" % (tuple(dev),))
            obj = _to_cpu_copy(obj)
        try:
            t = _C._from_array(obj)
        except ValueError:
            if not copy:
                raise
            import numpy as np
            t = _C._from_array(np.ascontiguousarray(np.from_dlpack(obj)).copy())
        if copy:
            t = t.clone()
    return t.to(device) if device is not None else t


def _from_device_capsule(obj, dev):
    try:
        cap = obj.__dlpack__(max_version=(1, 0))
    except TypeError:  # a producer from before DLPack 1.0
        cap = obj.__dlpack__()
    try:
        return _C._from_dlpack_capsule(cap)
    except Exception as e:
        raise BufferError("from_dlpack: the object lives on DLPack device %r and Tessera cannot take its memory "
                          "(%s); pass copy=True to copy it to the CPU" % (tuple(dev), e)) from e


def _to_cpu_copy(obj):
    try:
        return obj.__dlpack__(dl_device=(KDL_CPU, 0), copy=True)
    except (TypeError, BufferError, NotImplementedError):
        pass
    for method in ("cpu", "get"):  # PyTorch / CuPy spellings
        if hasattr(obj, method):
            return getattr(obj, method)()
    raise BufferError("from_dlpack: the producer cannot copy its data to the CPU")


# ---- Tensor methods (installed by tessera/__init__.py)

def numpy(self, *, force=False, copy=False):
    """A NumPy array sharing the tensor's memory (CPU tensors). A tensor on another device raises
    unless copy=True (or force=True, PyTorch's spelling), which copies it to the CPU."""
    if (copy or force) and not self.is_cpu:
        return _C._to_numpy(self.cpu())
    return _C._to_numpy(self)


def __array__(self, dtype=None, copy=None):
    a = numpy(self, copy=bool(copy))
    if dtype is not None:
        a = a.astype(dtype, copy=False)
    return a.copy() if copy else a


def _array_interface(self):
    if not self.is_cpu:
        raise AttributeError("__array_interface__: the tensor is on '%s' (only CPU tensors expose it)" % self.device)
    return numpy(self).__array_interface__


def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    """DLPack export (array API standard), made by the C++ tessera::to_dlpack. The capsule shares the
    tensor's memory; a renamed or third-party device exports as kDLExtDev with device_id
    (slot - 1) * 65536 + index. dl_device asking for another device (the CPU) raises BufferError
    unless copy=True."""
    t = self
    own = tuple(_C._dlpack_device(self))
    if dl_device is not None and tuple(dl_device) != own:
        if tuple(dl_device)[0] != KDL_CPU or not copy:
            raise BufferError("__dlpack__: the tensor is on %s (DLPack device %r); exporting it to %r needs a copy: "
                              "pass copy=True" % (self.device, own, tuple(dl_device)))
        t = self.cpu()
    elif copy:
        t = self.clone()
    if stream is not None and stream != -1 and not self.is_cpu:
        _C.synchronize(self.device)  # work queued on Tessera's streams completes before the consumer reads
    # tessera::to_dlpack (C++): a versioned capsule for a consumer that asks for DLPack 1.x.
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    return _C._to_dlpack(t, versioned, False)


def __dlpack_device__(self):
    return tuple(_C._dlpack_device(self))
