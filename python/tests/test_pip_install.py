"""`pip install .` works: the wheel carries libtessera and the in-tree plugins in the plugin folder next
to it, and `import tessera` from the install runs ops with them. Slow (builds the wheel; its build
folder build/pip-<tag> is kept, and ccache serves unchanged files): run by ./run.sh test."""
import os
import pathlib
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_pip_install_into_a_target_folder(source_dir, tmp_path):
    target = tmp_path / "site"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.setdefault("CCACHE_BASEDIR", str(source_dir))
    env.setdefault("CCACHE_NOHASHDIR", "1")
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", os.environ.get("JOBS", "2"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
                        "--target", str(target), str(source_dir)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    pkg = target / "tessera"
    libs = sorted(p.name for p in (pkg / "lib").glob("libtessera*.so*"))
    assert any(n.startswith("libtessera.so") for n in libs), libs
    assert any(n.startswith("libtessera_compiler.so") for n in libs), libs
    plugins = pkg / "lib" / "tessera" / "plugins"
    assert (plugins / "libtessera_cpu.so").exists() and list(plugins.glob("*.json"))
    assert list(pkg.glob("_C*.so")) and (pkg / "_ops.py").exists()
    assert (pkg / "_ops.pyi").exists() and (pkg / "_C.pyi").exists() and (pkg / "py.typed").exists()
    assert (pkg / "bin" / "tessera").exists()  # the command python -m tessera runs
    code = ("import numpy as np, tessera, os\n"
            "a = np.arange(6, dtype=np.float32)\n"
            "t = tessera.from_numpy(a)\n"
            "r = (t * 2 + 1).numpy()\n"
            "assert (r == a * 2 + 1).all() and np.shares_memory(t.numpy(), a)\n"
            "cpu = [p for p in tessera.plugins() if p['name'] == 'cpu'][0]\n"
            "import tessera.onnx\n"  # libtessera_onnx is in the wheel too (found through the RPATH)
            "assert 'Conv' in tessera.onnx.supported_op_types()\n"
            "print(tessera.__file__)\n"
            "print(cpu['manifest'], cpu['status'])\n")
    env["PYTHONPATH"] = str(target)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    init, manifest = r.stdout.split("\n")[:2]
    assert pathlib.Path(init).resolve().parent == pkg.resolve()
    assert pathlib.Path(manifest.split()[0]).resolve().parent == plugins.resolve() and manifest.endswith("loaded")
    r = subprocess.run([sys.executable, "-m", "tessera", "devices"], env=env, capture_output=True, text=True,
                       cwd=str(tmp_path))
    assert r.returncode == 0 and "cpu" in r.stdout, r.stdout + r.stderr
