#!/usr/bin/env python3
"""A saved program run in fresh processes through the CLI, compared with NumPy.

make_program writes y = relu(x @ w.T + b); z = y + 0.5 * x (tests/compiler/test_programs.h). This
test reads its weights with the safetensors package (as other tools would), runs
`tessera run` on each device for three batch sizes and compares with the same computation in
NumPy (float64), then checks `tessera graph` and the one-line errors of broken files.
"""
import argparse
import io
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
from safetensors.numpy import load as safetensors_load


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--maker", required=True)
    ap.add_argument("--devices", default="cpu")
    args = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model.tsr")
        r = run([args.maker, model])
        assert r.returncode == 0, r.stderr

        with zipfile.ZipFile(model) as z:
            names = [i.filename for i in z.infolist()]
            assert names == ["weights.safetensors", "program.json"], names
            for info in z.infolist():
                assert info.compress_type == zipfile.ZIP_STORED, info
            weights = safetensors_load(z.read("weights.safetensors"))
        w, b = weights["w"].astype(np.float64), weights["b"].astype(np.float64)
        assert w.shape == (4, 4) and b.shape == (4,), (w.shape, b.shape)
        # The values make_program wrote: 0.8 * sin(1.7 i + 0.3), 0.2 * sin(1.7 i + 1.1) in float32.
        i = np.arange(16, dtype=np.float32)
        np.testing.assert_allclose(w.ravel(), 0.8 * np.sin(i * np.float32(1.7) + np.float32(0.3)), rtol=1e-6, atol=1e-6)

        rng = np.random.default_rng(7)
        for device in args.devices.split(","):
            for batch in (1, 3, 9):
                x = rng.standard_normal((batch, 4)).astype(np.float32)
                xin = os.path.join(tmp, f"x{batch}.npy")
                out = os.path.join(tmp, f"out_{device}_{batch}.npz")
                if batch == 9:  # an .npz input, deflated as savez_compressed writes it
                    xin = os.path.join(tmp, f"x{batch}.npz")
                    np.savez_compressed(xin, x=x)
                else:
                    np.save(xin, x)
                r = run([args.tessera, "run", model, "--device", device, "--input", xin, "--output", out])
                if r.returncode != 0:
                    failures.append(f"{device} batch {batch}: exit {r.returncode}: {r.stderr.strip()}")
                    continue
                got = np.load(out)
                y_ref = np.maximum(x.astype(np.float64) @ w.T + b, 0)
                z_ref = y_ref + 0.5 * x
                for name, ref in (("y", y_ref), ("z", z_ref)):
                    if got[name].shape != ref.shape or got[name].dtype != np.float32 or \
                            not np.allclose(got[name], ref, rtol=1e-5, atol=1e-5):
                        failures.append(f"{device} batch {batch}: output {name} {got[name]} != {ref}")

        r = run([args.tessera, "graph", model])
        expected_lines = [
            "graph(%x: f32[batch, 4] cpu:0, %w: f32[4, 4] cpu:0 parameter, %b: f32[4] cpu:0 parameter):",
            "  %3: f32[batch, 4] cpu:0 = linear(%x, %w, %b)",
            "  %4: f32[batch, 4] cpu:0 = relu(%3)",
            "  %5: f32[batch, 4] cpu:0 = add.Tensor(%4, %x, 0.5)",
            "  return (%5, %4)",
            "ranges: batch in [1, 64]",
        ]
        if r.returncode != 0 or r.stdout.splitlines() != expected_lines:
            failures.append(f"tessera graph printed:\n{r.stdout}{r.stderr}")

        data = open(model, "rb").read()
        truncated = os.path.join(tmp, "truncated.tsr")
        open(truncated, "wb").write(data[: len(data) // 2])
        newer = os.path.join(tmp, "newer.tsr")
        with zipfile.ZipFile(model) as zin, zipfile.ZipFile(newer, "w", zipfile.ZIP_STORED) as zout:
            for info in zin.infolist():
                body = zin.read(info.filename)
                if info.filename == "program.json":
                    body = body.replace(b'"major": 1', b'"major": 2')
                zout.writestr(info, body)
        for path, needle in ((truncated, "truncated"), (newer, "format 2.")):
            r = run([args.tessera, "graph", path])
            lines = r.stderr.strip().splitlines()
            if r.returncode != 1 or len(lines) != 1 or needle not in lines[0] or path not in lines[0]:
                failures.append(f"tessera graph {os.path.basename(path)}: exit {r.returncode}, stderr {r.stderr!r}")

    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("program_cli: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
