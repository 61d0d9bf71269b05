"""docs/python.md's examples run: every ```python block, in order, in one fresh interpreter."""
import os
import re
import subprocess
import sys

import pytest

import tessera


def test_python_md_examples_run(source_dir, tmp_path):
    if not any(p["name"] == "my_hardware_device" for p in tessera.plugins()):
        pytest.skip("the examples use the reference accelerator (built with the samples)")
    text = (source_dir / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 5
    script = tmp_path / "python_md.py"
    script.write_text("\n".join(blocks))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tessera.__file__)))  # the package under test
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tensor([[" in r.stdout and "my_hardware_device" in r.stdout
