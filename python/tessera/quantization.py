"""Quantization of exported programs (docs/quantization.md): PyTorch 2's prepare / calibrate / convert
flow over a tessera.ExportedProgram, with the built-in quantizers ("x86", "xnnpack_like") or a
quantizer plugin by its manifest name, plus dynamic quantization and the int8 lowering."""
from . import _C


def prepare(program, quantizer="x86", *, activation_observer="histogram"):
    """Annotates `program` with each quantizer (a name or a list of names, applied in order) and places
    observers. Returns a PreparedProgram; `program` itself is not changed."""
    names = [quantizer] if isinstance(quantizer, str) else list(quantizer)
    return _C._quant_prepare(program, names, activation_observer)


def calibrate(prepared, *inputs):
    """Runs the prepared program on one batch of user inputs and feeds the observers."""
    _C._quant_calibrate(prepared, list(inputs))
    return prepared


def convert(prepared):
    """The program with quantize / dequantize nodes (an ExportedProgram), from a PreparedProgram after
    calibration or from a QatProgram after training."""
    if isinstance(prepared, _C.QatProgram):
        return _C._quant_convert_qat(prepared)
    return _C._quant_convert(prepared)


def prepare_qat(program, quantizer="x86"):
    """Quantization-aware training (PyTorch's prepare_qat_pt2e): a QatProgram whose call runs `program`
    with every quantized point fake-quantized. Its parameters() are copies of the program's weights
    that require grad: train them with any optimizer, then convert(). `program` is not changed."""
    names = [quantizer] if isinstance(quantizer, str) else list(quantizer)
    return _C._quant_prepare_qat(program, names)


def quantize_dynamic(program, *, reduce_range=True):
    """Each float32 linear becomes a dynamically quantized int8 linear (PyTorch's quantize_dynamic)."""
    return _C._quant_dynamic(program, reduce_range)


def lower_to_int8(program):
    """Replaces matched dequantize -> conv2d/linear -> quantize regions of a converted program by the
    int8 kernels, in place; returns how many were lowered."""
    return _C._quant_lower_to_int8(program)
