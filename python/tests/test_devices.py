"""Devices by name: rename_privateuse1_backend, generated methods and device modules, on the reference
accelerator (samples/my_hardware_device, whose manifest names privateuse1 'my_hardware_device')."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tessera


def test_generated_methods_on_the_reference_accelerator(rng, mhd):
    assert mhd is tessera.my_hardware_device
    import tessera.my_hardware_device as imported  # a real module in sys.modules
    assert imported is mhd
    a = rng.standard_normal((4, 5)).astype(np.float32)
    t = tessera.from_numpy(a)
    d = t.my_hardware_device()
    assert d.is_my_hardware_device and not t.is_my_hardware_device
    assert d.device == tessera.device("my_hardware_device:0") and d.device.type == "my_hardware_device"
    assert d.my_hardware_device() is not None and t.my_hardware_device(0).device.index == 0
    np.testing.assert_allclose(((d * 2 + 1).exp()).cpu().numpy(), np.exp(a * 2 + 1), rtol=1e-5)
    np.testing.assert_allclose(tessera.sum(d, 1).cpu().numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
    assert mhd.device_count() >= 1 and mhd.is_available()
    mhd.synchronize()
    stats = mhd.memory_stats()
    assert stats["allocated_bytes"] >= d.nbytes and stats["num_allocations"] >= 1
    free, total = mhd.mem_get_info()
    assert total == 1 << 30 and free == total - mhd.memory_stats()["allocated_bytes"]
    assert tessera.memory_info("my_hardware_device:1")[1] == 1 << 30
    with pytest.raises(Exception, match="out of range"):
        tessera.memory_info("my_hardware_device:7")
    with pytest.raises(ValueError):
        t.my_hardware_device("cpu")


def test_current_device_and_the_device_guard(rng, mhd):
    import threading
    assert mhd.device_count() == 2 and mhd.current_device() == 0
    a = rng.standard_normal((3, 4)).astype(np.float32)
    with mhd.device(1) as d:
        assert d == tessera.device("my_hardware_device:1") and mhd.current_device() == 1
        t = tessera.from_numpy(a).my_hardware_device()  # no index: the current device
        assert t.device.index == 1
        np.testing.assert_allclose((t * 3).cpu().numpy(), a * 3, rtol=1e-6)
        seen = []
        th = threading.Thread(target=lambda: seen.append(mhd.current_device()))  # per thread
        th.start()
        th.join()
        assert seen == [0]
    assert mhd.current_device() == 0
    with pytest.raises(RuntimeError, match="leaving"):
        with mhd.device("my_hardware_device:1"):
            raise RuntimeError("leaving the block")
    assert mhd.current_device() == 0  # restored after the exception
    mhd.set_device(1)
    assert tessera.from_numpy(a).my_hardware_device().device.index == 1
    mhd.set_device(0)
    with pytest.raises(ValueError, match="out of range"):
        mhd.set_device(2)
    with pytest.raises(ValueError, match="expected a 'my_hardware_device' device"):
        mhd.set_device("cpu:0")
    assert mhd.current_device() == 0


def test_streams_and_events(rng, mhd):
    s = mhd.Stream()
    assert s.device.type == "my_hardware_device"
    e0, e1 = mhd.Event(), mhd.Event()
    e0.record(s)
    a = rng.standard_normal(1000).astype(np.float32)
    d = tessera.from_numpy(a).my_hardware_device()
    (d + 1).cpu()
    e1.record(s)
    s.synchronize()
    e1.synchronize()
    assert e0.is_created and e1.elapsed_time(e1) == pytest.approx(0.0, abs=1e3)
    assert mhd.current_stream().is_default


def run_python(code, **env):
    e = dict(os.environ)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_rename_and_generate_for_npu():
    # A process where no plugin claims privateuse1 (the reference accelerator disabled), as an
    # application that names its own device would see it.
    out = run_python("""
        import pytest, tessera
        with pytest.raises(RuntimeError, match="rename_privateuse1_backend"):
            tessera.generate_methods_for_privateuse1_backend()
        tessera.rename_privateuse1_backend("npu")
        tessera.rename_privateuse1_backend("npu")  # the same name again: a no-op
        with pytest.raises(ValueError, match="npu"):
            tessera.rename_privateuse1_backend("xpu")
        with pytest.raises(ValueError):
            tessera.rename_privateuse_backend(2, "cuda")  # a built-in name
        tessera.generate_methods_for_privateuse1_backend()
        import tessera.npu
        assert tessera.device("npu:1").type == "npu" and tessera.device("npu:1").index == 1
        assert hasattr(tessera.Tensor, "npu") and tessera.zeros(2).is_npu is False
        assert tessera.npu.device_count() == 0 and not tessera.npu.is_available()
        with pytest.raises(RuntimeError):
            tessera.zeros(2).npu()  # no plugin provides 'npu' here: the reason comes from the loader
        print("ok", tessera.privateuse_backend_name(1))
    """, TESSERA_PLUGINS_DISABLE="my_hardware_device*")
    assert out.strip() == "ok npu"


def test_methods_for_plugin_manifest_names(mhd):
    names = tessera.generate_methods_for_plugin_devices()
    assert "my_hardware_device" in names and "cpu" in names
    assert tessera.cpu.device_count() >= 1 and tessera.zeros(1).is_cpu


def test_plugins_and_devices_listing(mhd):
    ps = {p["name"]: p for p in tessera.plugins()}
    assert ps["cpu"]["kind"] == "backend" and ps["cpu"]["device"] == "cpu"
    assert ps["my_hardware_device"]["device"] == "my_hardware_device"
    # Found in the plugin folder next to libtessera, as the C++ programs find it.
    assert os.path.dirname(ps["cpu"]["manifest"]).endswith(os.path.join("lib", "tessera", "plugins"))
    devs = [d["name"] for d in tessera.devices()]
    assert "cpu:0" in devs and "my_hardware_device:0" in devs


def test_python_m_tessera_lists_devices():
    out = run_python("""
        import runpy, sys
        sys.argv = ["tessera", "devices"]
        runpy.run_module("tessera", run_name="__main__")
    """, PYTHONPATH=os.path.dirname(os.path.dirname(tessera.__file__)))
    assert "cpu" in out


def test_an_application_rename_replaces_a_manifest_claim():
    # The reference accelerator's manifest claims privateuse1 as 'my_hardware_device'; the application
    # names the slot first, so its name wins and the plugin is listed as failed, naming both.
    out = run_python("""
        import tessera
        tessera.rename_privateuse1_backend("npu")
        tessera.generate_methods_for_privateuse1_backend()
        p = [p for p in tessera.plugins() if p["name"] == "my_hardware_device"][0]
        print(tessera.privateuse_backend_name(1), p["status"], "npu" in p["reason"], hasattr(tessera, "npu"))
    """)
    assert out.split() == ["npu", "failed", "True", "True"]
