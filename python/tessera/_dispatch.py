"""Overload resolution for the generated op functions (tessera/_ops.py)."""


def resolve_overload(name, candidates, args, kwargs):
    """Calls the first overload whose parameters bind `args`/`kwargs` and whose argument types match
    without conversion (a Tensor where a Tensor is expected, a number where a Scalar is); failing
    that, the first that binds, converting numbers to wrapped scalars. `candidates` holds
    (binder, op, inplace) triples in contract order."""
    bound = []
    for binder, op, inplace in candidates:
        try:
            values = binder(*args, **kwargs)
        except TypeError:
            continue
        if op.accepts(*values):
            return _call(op, values, inplace)
        bound.append((op, values, inplace))
    if bound:
        op, values, inplace = bound[0]
        return _call(op, values, inplace)
    schemas = "; ".join(op.schema for _, op, _ in candidates)
    raise TypeError("%s(): no overload takes these arguments; the overloads are: %s" % (name, schemas))


def _call(op, values, inplace):
    out = op(*values)
    return values[0] if inplace else out
