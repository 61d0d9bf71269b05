"""NumPy and DLPack without copies, proved by address; copies only when asked for."""
import gc

import numpy as np
import pytest

import tessera

DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]


def addr(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dt", DTYPES)
def test_from_numpy_and_numpy_share_memory(rng, dt):
    a = (rng.standard_normal((3, 4)) * 10).astype(dt)
    t = tessera.from_numpy(a)
    assert str(t.dtype) == np.dtype(dt).name
    assert t.data_ptr() == addr(a)
    back = t.numpy()
    assert back.dtype == a.dtype and np.shares_memory(back, a) and addr(back) == addr(a)
    np.testing.assert_array_equal(back, a)


def test_writes_are_seen_both_ways(rng):
    a = rng.standard_normal(6).astype(np.float32)
    t = tessera.from_numpy(a)
    a[2] = 42.0
    assert t[2].item() == 42.0
    t[3] = -1.0
    assert a[3] == -1.0
    t.numpy()[4] = 9.0
    assert a[4] == 9.0


def test_lifetimes(rng):
    a = rng.standard_normal(1000).astype(np.float32)
    expected = a.copy()
    t = tessera.from_numpy(a)
    del a
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), expected)  # the tensor keeps the array alive
    b = (t * 1).numpy()
    gc.collect()
    np.testing.assert_array_equal(b, expected)  # the array keeps the tensor's storage alive


def test_strided_arrays_and_views(rng):
    a = rng.standard_normal((6, 8)).astype(np.float32)
    v = a[1::2, ::3]
    t = tessera.from_numpy(v)
    assert t.shape == v.shape and t.stride() == tuple(s // 4 for s in v.strides)
    assert np.shares_memory(t.numpy(), a)
    np.testing.assert_array_equal(t.numpy(), v)
    tt = tessera.from_numpy(a).T[2:5]  # a transposed, sliced view exports with its strides
    assert np.shares_memory(tt.numpy(), a)
    np.testing.assert_array_equal(tt.numpy(), a.T[2:5])


def test_negative_strides_need_copy_true(rng):
    a = rng.standard_normal(5).astype(np.float32)
    with pytest.raises(ValueError, match="copy=True"):
        tessera.from_numpy(a[::-1])
    t = tessera.from_numpy(a[::-1], copy=True)
    np.testing.assert_array_equal(t.numpy(), a[::-1])
    assert not np.shares_memory(t.numpy(), a)


def test_array_protocols(rng):
    t = tessera.from_numpy(rng.standard_normal((2, 3)).astype(np.float32))
    a = np.asarray(t)
    assert addr(a) == t.data_ptr()
    assert t.__array_interface__["data"][0] == t.data_ptr()
    assert np.array(t, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(np.add(t, 1), t.numpy() + 1)  # ufuncs read through __array__


def test_dlpack_both_ways(rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    t = tessera.from_dlpack(a)
    assert t.data_ptr() == addr(a)
    assert t.__dlpack_device__() == (1, 0)
    b = np.from_dlpack(t)
    assert addr(b) == t.data_ptr() and np.shares_memory(a, b)
    view = tessera.from_numpy(a)[1:, 2:]
    c = np.from_dlpack(view)  # a view with an offset: the pointer is the first element's
    assert addr(c) == view.data_ptr() == addr(a[1:, 2:])
    np.testing.assert_array_equal(c, a[1:, 2:])
    assert tessera.from_dlpack(t) is t
    assert tessera.from_dlpack(t, copy=True).data_ptr() != t.data_ptr()


def test_dlpack_capsule_versions(rng):
    t = tessera.from_numpy(rng.standard_normal(4).astype(np.float32))
    cap = t.__dlpack__()
    assert type(cap).__name__ == "PyCapsule"
    cap1 = t.__dlpack__(max_version=(1, 0))
    assert type(cap1).__name__ == "PyCapsule"


class _CxxCapsule:
    """A producer whose capsule comes from the C++ tessera::to_dlpack, for NumPy to read."""

    def __init__(self, t, versioned=True, read_only=False):
        self.t, self.versioned, self.read_only = t, versioned, read_only

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return tessera._C._to_dlpack(self.t, self.versioned and max_version is not None, self.read_only)

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16,
                                   np.float32, np.float64])
def test_cxx_dlpack_against_numpy(rng, dtype):
    # NumPy reads what the C++ to_dlpack writes (a strided view with an offset) ...
    a = (rng.standard_normal((4, 6)) * 10).astype(dtype)
    view = tessera.from_numpy(a)[1:, ::2]
    b = np.from_dlpack(_CxxCapsule(view))
    assert addr(b) == addr(a[1:, ::2]) and b.strides == a[1:, ::2].strides
    np.testing.assert_array_equal(b, a[1:, ::2])
    # ... and the C++ from_dlpack reads what NumPy writes, versioned and legacy, without a copy.
    for cap in (a[1:, ::2].__dlpack__(max_version=(1, 0)), a[1:, ::2].__dlpack__()):
        t = tessera._C._from_dlpack_capsule(cap)
        assert t.data_ptr() == addr(a[1:, ::2])
        np.testing.assert_array_equal(t.numpy(), a[1:, ::2])
    c = tessera._C._from_dlpack_capsule(np.array(3.5, np.float32).__dlpack__(max_version=(1, 0)))  # 0-d
    assert c.shape == () and c.item() == 3.5
    e = np.from_dlpack(_CxxCapsule(tessera.from_numpy(np.zeros((2, 0), dtype))))  # empty
    assert e.shape == (2, 0) and e.dtype == dtype


def test_cxx_dlpack_read_only():
    # NumPy marks the array it makes from a read-only capsule read-only ...
    a = np.arange(4, dtype=np.float32)
    b = np.from_dlpack(_CxxCapsule(tessera.from_numpy(a), read_only=True))
    assert not b.flags.writeable and addr(b) == addr(a)
    # ... and a read-only NumPy array's capsule is copied by from_dlpack (Note [DLPack read-only]).
    a.flags.writeable = False
    t = tessera._C._from_dlpack_capsule(a.__dlpack__(max_version=(1, 0)))
    assert t.data_ptr() != addr(a)
    np.testing.assert_array_equal(t.numpy(), a)


def test_quantized_and_bfloat16_say_why(rng):
    t = tessera.from_numpy(rng.standard_normal(4).astype(np.float32))
    with pytest.raises(TypeError, match="quantized"):
        tessera.quantize_per_tensor(t, 0.1, 0, tessera.qint8).numpy()


def test_device_tensors_export_as_ext_dev(rng, mhd):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    t = tessera.from_numpy(a).my_hardware_device()
    assert t.__dlpack_device__() == (12, 0)  # kDLExtDev, index 0
    cap = t.__dlpack__()
    assert type(cap).__name__ == "PyCapsule"
    with pytest.raises(ValueError, match="copy=True"):
        t.numpy()
    np.testing.assert_array_equal(t.numpy(copy=True), a)
    with pytest.raises(BufferError, match="copy=True"):
        t.__dlpack__(dl_device=(1, 0))
    np.testing.assert_array_equal(tessera.from_dlpack(t, copy=True).cpu().numpy(), a)
    with pytest.raises((BufferError, RuntimeError, TypeError, ValueError)):
        np.from_dlpack(t)  # NumPy cannot read kDLExtDev memory, and Tessera does not copy behind its back


class _Producer:
    """Another framework's array as DLPack sees it: only __dlpack__ and __dlpack_device__."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self.t.__dlpack__(max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_device_memory_is_taken_without_a_copy(rng, mhd):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    t = tessera.from_numpy(a).my_hardware_device()
    u = tessera.from_dlpack(_Producer(t[:, 1:]))  # kDLExtDev: adopted by tessera::from_dlpack
    assert u.device == t.device and u.shape == (2, 2)
    np.testing.assert_array_equal(u.cpu().numpy(), a[:, 1:])
    t.add_(tessera.ones((2, 3)).my_hardware_device())  # the same memory: seen through u
    np.testing.assert_array_equal(u.cpu().numpy(), a[:, 1:] + 1)
    assert tessera.from_dlpack(_Producer(t), copy=True).is_cpu  # copy=True still copies to the CPU


def test_torch_if_present(rng):
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 4)
    t = tessera.from_dlpack(x)
    assert t.data_ptr() == x.data_ptr()
    y = torch.from_dlpack(t)
    assert y.data_ptr() == t.data_ptr()


def test_exporting_memory_moves_the_storage_version(rng):
    t = tessera.from_numpy(rng.standard_normal(4).astype(np.float32))
    v0 = t._storage_version()
    t.numpy()
    v1 = t._storage_version()
    np.from_dlpack(t)
    assert v0 != v1 != t._storage_version()
