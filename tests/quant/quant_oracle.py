"""NumPy oracle of the quantized-tensor tests (test_quant_tensor.cpp): random float32 inputs with
special values, per-tensor and per-channel parameters, and the expected integer representation
and dequantized values under PyTorch's definitions:
  quantize:   clamp(rint(x * float32(1 / float32(scale))) + zero_point, qmin, qmax)  (NaN -> qmax)
  dequantize: per-tensor float32(q - zp) * float32(scale); per-channel float32((q - zp) * scale)
Prints one JSON object; argv[1] is the seed."""
import json
import sys

import numpy as np

RANGES = {"qint8": (-128, 127), "quint8": (0, 255), "qint32": (-2**31, 2**31 - 1)}


def quantize(x, scale, zp, dtype, axis=None):
    lo, hi = RANGES[dtype]
    inv = np.float32(1) / np.asarray(scale, dtype=np.float32)
    zp = np.asarray(zp, dtype=np.float64)
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = -1
        inv, zp = inv.reshape(shape), zp.reshape(shape)
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.rint((x * inv).astype(np.float32)).astype(np.float64) + zp
    v = np.where(np.isnan(v), hi, v)
    return np.clip(v, lo, hi).astype(np.int64)


def dequantize(q, scale, zp, axis=None):
    if axis is None:
        return ((q - zp).astype(np.float32) * np.float32(scale)).astype(np.float32)
    shape = [1] * q.ndim
    shape[axis] = -1
    s = np.asarray(scale, dtype=np.float64).reshape(shape)
    z = np.asarray(zp, dtype=np.int64).reshape(shape)
    return ((q - z).astype(np.float64) * s).astype(np.float32)


def main():
    rng = np.random.default_rng(int(sys.argv[1]))
    cases = []
    for i in range(12):
        dtype = ["qint8", "quint8", "qint32"][i % 3]
        lo, hi = RANGES[dtype]
        shape = [int(rng.integers(1, 6)), int(rng.integers(1, 7)), int(rng.integers(1, 5))]
        x = (rng.standard_normal(shape) * 10 ** rng.uniform(-1, 2)).astype(np.float32)
        flat = x.reshape(-1)
        specials = [np.nan, np.inf, -np.inf, 0.5, -0.5, 1e30, -1e30]
        for j in range(min(len(specials), flat.size // 3)):
            flat[int(rng.integers(0, flat.size))] = specials[j]
        case = {"dtype": dtype, "sizes": shape, "x": [float(v) if np.isfinite(v) else str(v) for v in flat]}
        if i % 2 == 0:
            scale = float(rng.uniform(0.01, 2.0))
            zp = int(rng.integers(max(lo, -100), min(hi, 100) + 1))
            q = quantize(x, scale, zp, dtype)
            case.update(scale=scale, zero_point=zp, q=q.reshape(-1).tolist(),
                        deq=dequantize(q, scale, zp).reshape(-1).astype(float).tolist())
        else:
            axis = int(rng.integers(0, 3))
            n = shape[axis]
            scales = rng.uniform(0.01, 2.0, n)
            zps = rng.integers(max(lo, -100), min(hi, 100) + 1, n)
            q = quantize(x, scales, zps, dtype, axis)
            case.update(axis=axis, scales=scales.tolist(), zero_points=zps.tolist(), q=q.reshape(-1).tolist(),
                        deq=dequantize(q, scales, zps, axis).reshape(-1).astype(float).tolist())
        cases.append(case)
    json.dump({"cases": cases}, sys.stdout)


if __name__ == "__main__":
    main()
