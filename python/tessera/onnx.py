"""ONNX models in and out (libtessera_onnx; docs/onnx.md has what is supported, docs/python.md the
Python side).

    program = tessera.onnx.import_model("model.onnx")         # or the model's bytes, or an onnx.ModelProto
    y = program(tessera.from_numpy(x))                          # run it (the interpreter), on any device
    fast = tessera.compile(program)                             # or as generated C++ (CPU)
    tessera.onnx.export_model(program, "out.onnx")              # and back out (opset EXPORT_OPSET)

import_model returns a tessera.ExportedProgram: save it as a .tsr (program.save), print its graph,
export it again. Errors are raised as ValueError / RuntimeError with one line naming the node, its
op type and the opset (a node no converter takes), or what is wrong with the file."""
import os

from . import _C

_impl = _C._onnx
if not _impl.available:
    raise ImportError("tessera.onnx: this build has no ONNX front end (libtessera_onnx needs protobuf at configure "
                      "time: apt-get install libprotobuf-dev protobuf-compiler, then rebuild)")

MIN_OPSET = _impl.min_opset        # the oldest ai.onnx opset the importer reads
MAX_OPSET = _impl.max_opset        # the newest
EXPORT_OPSET = _impl.export_opset  # the opset export_model writes


def _range(r, what):
    if not (isinstance(r, (tuple, list)) and len(r) == 2 and all(isinstance(v, int) for v in r)):
        raise TypeError("tessera.onnx.import_model: %s must be a (min, max) pair of ints, got %r" % (what, r))
    return (int(r[0]), int(r[1]))


def import_model(model, *, ranges=None, fixed_dims=None, constant_inputs=None, device=None, fold_constants=True,
                 default_range=(1, 65536), external_data_dir=None):
    """Reads an ONNX model as a tessera.ExportedProgram.

    model: a path (str or os.PathLike), the model's bytes, or an object with SerializeToString() (an
      onnx.ModelProto). External data is read next to a model given by path, or from
      external_data_dir for bytes (refused when neither is given).
    ranges: {symbol: (min, max)} for symbolic dims (a dim_param's name, or "<input>_dim<i>");
      default_range applies to the others. fixed_dims: {symbol: size} makes a dim static.
    constant_inputs: {input name: tensor} fixes graph inputs at import (a Reshape's shape given as an
      input, TopK's k): they become constants instead of inputs.
    device: the device the program's inputs are declared on (default cpu).
    fold_constants: compute weight-only subgraphs and fold BatchNormalization into convs at import."""
    ranges = {str(k): _range(v, "ranges[%r]" % k) for k, v in (ranges or {}).items()}
    fixed = {str(k): int(v) for k, v in (fixed_dims or {}).items()}
    consts = {}
    for k, v in (constant_inputs or {}).items():
        consts[str(k)] = v if isinstance(v, _C.Tensor) else _C.tensor(v)
    default_range = _range(default_range, "default_range")
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _impl.import_model_bytes(bytes(model), ranges, fixed, consts, device, bool(fold_constants),
                                        os.fspath(external_data_dir) if external_data_dir else "", default_range)
    if isinstance(model, (str, os.PathLike)):
        if external_data_dir is not None:
            raise ValueError("tessera.onnx.import_model: external_data_dir is for a model given as bytes; a model "
                             "read from a path finds its external data in its own folder")
        return _impl.import_model(os.fspath(model), ranges, fixed, consts, device, bool(fold_constants), default_range)
    raise TypeError("tessera.onnx.import_model: expected a path, bytes or an onnx.ModelProto, not %s"
                    % type(model).__name__)


def export_model(program, path=None):
    """Writes a tessera.ExportedProgram as an ONNX model (opset EXPORT_OPSET, weights inside the file,
    symbolic dims as dim_param): to `path`, or returned as bytes when path is None (onnx.load_from_string
    reads them). Raises naming the first node whose op has no ONNX equivalent."""
    if not isinstance(program, _C.ExportedProgram):
        raise TypeError("tessera.onnx.export_model: expected a tessera.ExportedProgram (tessera.export, "
                        "tessera.load or tessera.onnx.import_model), not %s" % type(program).__name__)
    if path is None:
        return _impl.export_model_bytes(program)
    _impl.export_model(program, os.fspath(path))
    return None


def supported_op_types():
    """The ONNX op types (ai.onnx domain) the importer converts, sorted."""
    return list(_impl.supported_op_types())
