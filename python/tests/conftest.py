"""pytest set-up: the package under test is the one on PYTHONPATH (the build tree's python/ folder when
run through ctest: Note [Python package layout]). Every test draws fresh random inputs; the seed is
printed so that a failure can be replayed with TESSERA_TEST_SEED."""
import os
import pathlib
import random

import numpy as np
import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("TESSERA_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: builds the wheel (pip install .); run by ./run.sh test")


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("TESSERA_TEST_SEED", random.SystemRandom().randrange(2**31)))
    print("%s: TESSERA_TEST_SEED=%d" % (request.node.name, seed))
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def source_dir():
    return SOURCE_DIR


@pytest.fixture(scope="session")
def mhd():
    """The reference accelerator (samples/my_hardware_device, in the build tree's plugin folder), with
    its generated methods (its manifest names privateuse1 'my_hardware_device')."""
    import tessera
    tessera.generate_methods_for_privateuse1_backend()
    if tessera.privateuse_backend_name(1) != "my_hardware_device" or not tessera.my_hardware_device.is_available():
        pytest.skip("the reference accelerator is not in the plugin folder (build the samples)")
    return tessera.my_hardware_device
