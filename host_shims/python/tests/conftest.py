"""Paths the build passes to the shim suite (tests/meson.build sets them)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def _env(name):
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run through `meson test --suite shim`", returncode=2)
    return value


@pytest.fixture(scope="session")
def plugin_path():
    return _env("NVFP4_MLA_PLUGIN_PATH")


@pytest.fixture(scope="session")
def mock_dir():
    return _env("NVFP4_MLA_MOCK_DIR")


@pytest.fixture(scope="session")
def data_dir():
    return _env("NVFP4_MLA_TEST_DATA")


@pytest.fixture(scope="session")
def profile_path():
    """The real magnitude profile, product data (data/ of the repository)."""
    return _env("NVFP4_MLA_TEST_PROFILE")


@pytest.fixture(scope="session")
def plugin(plugin_path):
    import nvfp4_mla
    return nvfp4_mla.load(plugin_path)


@pytest.fixture
def ctx(plugin):
    """A CPU context of the plugin, closed after the test."""
    import nvfp4_mla
    with nvfp4_mla.Context(plugin) as c:
        yield c
