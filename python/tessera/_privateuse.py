"""Devices by name: PyTorch's rename_privateuse1_backend / generate_methods_for_privateuse1_backend.

generate_methods_for_privateuse1_backend() (and generate_methods_for_device(name) for any device
name, such as one a plugin's manifest gives) adds `Tensor.<name>()`, `Tensor.is_<name>` and a
module `tessera.<name>` with device_count(), is_available(), synchronize(), memory_stats(),
mem_get_info(), empty_cache(), current_device(), set_device(), device (a context manager), Stream, Event,
current_stream() and set_current_stream()."""
import sys
import types

from . import _C


def rename_privateuse1_backend(name):
    """Names the privateuse1 slot (`tessera.device("npu:0")` then parses). Renaming to the current
    name is a no-op; to another name raises ValueError naming the current one."""
    _C.rename_privateuse1_backend(name)


def _device_module(name):
    mod = types.ModuleType("tessera." + name, "Tessera's '%s' device (generated)." % name)

    def device_count():
        """The number of '%s' devices (0 when its plugin finds none or is missing)."""
        try:
            return _C.device_count(name)
        except (RuntimeError, ValueError):
            return 0

    def is_available():
        return device_count() > 0

    def _dev(device):
        if device is None:
            return _C.device(name)
        if isinstance(device, int):
            return _C.device(name, device)
        return _C.device(device)

    def synchronize(device=None):
        _C.synchronize(_dev(device))

    def memory_stats(device=None):
        return _C.memory_stats(_dev(device))

    def mem_get_info(device=None):
        return _C.memory_info(_dev(device))

    def memory_allocated(device=None):
        return memory_stats(device).get("allocated_bytes", 0)

    def empty_cache(device=None):
        return _C.empty_cache(_dev(device))

    def current_stream(device=None):
        return _C.current_stream(_dev(device))

    def Stream(device=None):  # noqa: N802 (a factory named like the class, as torch.npu.Stream)
        return _C.Stream.create(_dev(device))

    def current_device():
        """The index of this thread's current '%s' device (where tensors named without an index go)."""
        return _C.current_device(name).index

    def set_device(device):
        """Makes a device current on this thread: an index, or a device ("npu:1")."""
        target = _dev(device)
        if target.type != name:
            raise ValueError("tessera.%s.set_device: expected a '%s' device, got '%s'" % (name, name, target))
        _C.set_device(target)

    class device:  # noqa: N801 (torch.cuda.device is a lower-case class too)
        """`with tessera.<name>.device(1):` makes device 1 current inside the block and restores the
        previous current device after it, also when the block raises."""

        def __init__(self, device):
            self.target = _dev(device)
            if self.target.type != name:
                raise ValueError("tessera.%s.device: expected a '%s' device, got '%s'" % (name, name, self.target))
            self.previous = None

        def __enter__(self):
            self.previous = _C.current_device(name)
            _C.set_device(self.target)
            return self.target

        def __exit__(self, *exc):
            _C.set_device(self.previous)
            return False

    for f in (device_count, is_available, synchronize, memory_stats, mem_get_info, memory_allocated, empty_cache,
              current_stream, Stream, current_device, set_device, device):
        setattr(mod, f.__name__, f)
    mod.Event = _C.Event
    mod.set_current_stream = _C.set_current_stream
    mod.device_name = name
    return mod


def generate_methods_for_device(name, for_tensor=True, for_module=True):
    """Adds Tensor.<name>(index=None), Tensor.is_<name> and the module tessera.<name> for the device
    type `name` (built in, renamed or claimed by a plugin's manifest)."""
    import tessera
    _C.device(name)  # raises ValueError for an unknown name, listing the known ones
    if for_tensor:
        from ._C import Tensor

        def to_device(self, device=None, non_blocking=False):
            if device is None:
                target = _C.device(name)
            elif isinstance(device, int):
                target = _C.device(name, device)
            else:
                target = _C.device(device)
                if target.type != name:
                    raise ValueError("Tensor.%s(): expected a '%s' device, got '%s'" % (name, name, target))
            return self.to(target)

        to_device.__name__ = name
        to_device.__doc__ = "A copy of the tensor on the '%s' device (itself when already there)." % name
        if not hasattr(Tensor, name) or getattr(getattr(Tensor, name), "_tessera_generated", False):
            to_device._tessera_generated = True
            setattr(Tensor, name, to_device)
        prop = property(lambda self: self._is_device(name), doc="True when the tensor is on '%s'." % name)
        setattr(Tensor, "is_" + name, prop)
    if for_module and not isinstance(getattr(tessera, name, None), types.ModuleType):
        mod = _device_module(name)
        setattr(tessera, name, mod)
        sys.modules["tessera." + name] = mod
    return getattr(tessera, name, None)


def generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=False,
                                             unsupported_dtype=None):
    """PyTorch's generate_methods_for_privateuse1_backend: methods for the name privateuse1 has now
    (after rename_privateuse1_backend, or the name a plugin's manifest claimed). Raises RuntimeError
    while the slot has no name. for_storage and unsupported_dtype are accepted for PyTorch
    compatibility: Tessera has no untyped storages, and dtypes a device lacks raise at the op."""
    _C.plugins()  # discovery first: a manifest may claim the slot
    name = _C.privateuse_backend_name(1)
    if name == "privateuse1":
        raise RuntimeError("generate_methods_for_privateuse1_backend: the privateuse1 slot has no name yet; call "
                           "tessera.rename_privateuse1_backend(\"npu\") first")
    return generate_methods_for_device(name, for_tensor=for_tensor, for_module=for_module)


def generate_methods_for_plugin_devices():
    """generate_methods_for_device for every device name that an available plugin's manifest gives and
    that has no module yet (the names of the built-in types included: tessera.cpu, tessera.cuda)."""
    done = []
    for p in _C.plugins():
        if p["device"] and p["status"] in ("available", "loaded"):
            generate_methods_for_device(p["device"])
            done.append(p["device"])
    return sorted(set(done))
