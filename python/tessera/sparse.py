"""2:4 semi-structured sparsity (docs/sparsity.md)."""
from . import _C


def prune_2_4(weight):
    """A dense copy of a 2-D weight keeping the two largest magnitudes of every group of four."""
    return _C._sparse_prune_2_4(weight)


def to_sparse_semi_structured(weight):
    """The semi-structured form of a weight that is already 2:4 (prune_2_4 makes one): linear and
    matmul with it run the sparse kernels where a kernels plugin takes them."""
    return _C._sparse_to_semi_structured(weight)


def is_sparse(t):
    return _C._sparse_is_sparse(t)


def to_dense(t):
    return _C._sparse_to_dense(t)


def describe(t):
    return _C._sparse_describe(t)
