"""Errors: TypeError for wrong Python types, ValueError for bad values (tessera::Error InvalidArgument),
IndexError for out-of-range indices, RuntimeError for the rest, each carrying the C++ message."""
import pytest

import tessera


def test_type_errors():
    t = tessera.ones(3)
    with pytest.raises(TypeError, match="argument 'other' \\(position 2\\) must be a Tensor or a number, not str"):
        tessera.add(t, "x")
    with pytest.raises(TypeError):
        t + "x"  # the operator returns NotImplemented; Python raises
    with pytest.raises(TypeError, match="valid indices"):
        t[1.5]
    with pytest.raises(TypeError, match="dtype"):
        tessera.zeros(2, dtype=3.5)
    with pytest.raises(TypeError, match="must be an int"):
        tessera.softmax(t, 0.5)
    with pytest.raises(TypeError, match="takes at most"):
        tessera.ops._op_neg(t, t)


def test_value_errors_carry_the_cpp_message():
    with pytest.raises(ValueError, match="broadcast|shape|size") as e:
        tessera.ones(3) + tessera.ones(4)
    assert "3" in str(e.value) and "4" in str(e.value)
    with pytest.raises(ValueError, match="not a known device|unknown|device"):
        tessera.device("nosuchdevice")
    with pytest.raises(ValueError, match="dimension 5 out of range"):
        tessera.ones(2, 2).select(5, 0)
    with pytest.raises(ValueError, match="integers to negative integer powers are not allowed"):
        tessera.tensor([2, 3]) ** -1


def test_index_errors():
    t = tessera.ones(3, 4)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        t[3]
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 1 with size 4"):
        t[0, -5]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        t[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        t[..., ...]
    with pytest.raises(IndexError, match=r"The shape of the mask \[4\] at index 0 does not match the shape of the "
                                         r"indexed tensor \[3, 4\] at index 0"):  # PyTorch's words
        t[tessera.ones(4) > 0]
    with pytest.raises(ValueError, match="^step must be greater than zero$"):  # PyTorch's words
        t[::-1]
    with pytest.raises(ValueError, match="slice step cannot be zero"):  # Python's, as in PyTorch
        t[:, ::0]


def test_runtime_errors():
    if tessera.device_count("cuda") > 0:
        pytest.skip("a CUDA device is present: nothing fails")
    with pytest.raises(RuntimeError) as e:  # no device: the plugin's reason, as a RuntimeError
        tessera.zeros(2, device="cuda")
    assert not isinstance(e.value, ValueError) and "cuda" in str(e.value)
