"""Fixtures of the vLLM contract suite (contract.py: the stand-in platform and the helpers; it is
imported first, so the stand-in platform is current before anything else of vLLM is imported)."""
import json
import os
import tempfile
from dataclasses import replace

import pytest

import contract  # noqa: F401  (the stand-in platform: first)
from contract import TINY_CONFIG, environ, fresh_selection, stand_in
from nvfp4_mla import _abi
from nvfp4_mla.vllm_plugin import serving


@pytest.fixture(scope="session")
def plugin_path():
    path = os.environ.get(_abi.PLUGIN_ENV)
    if not path:
        pytest.exit(f"{_abi.PLUGIN_ENV} is not set: run .ci/vllm-contract", returncode=2)
    return path


@pytest.fixture(scope="session")
def tiny_model():
    folder = tempfile.mkdtemp(prefix="tiny-deepseek-v32-")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(TINY_CONFIG, f)
    return folder


@pytest.fixture
def serve(plugin_path):
    """install(**settings) makes the process's decision a stand-in for that environment (cuda=False:
    the plugin as a CPU-only build, whatever the one given was built with); the previous decision
    comes back after the test."""
    previous = serving.install(None)

    def install(cuda=True, **settings):
        decision = serving.decide(environ(plugin_path, **settings))
        if not cuda and not decision.error:
            decision = replace(decision, caps=decision.caps & ~_abi.CAP["backend.cuda"], archs=())
        serving.install(stand_in(decision) if cuda else decision)
        fresh_selection()
        return serving.current()

    yield install
    serving.install(previous)


@pytest.fixture(scope="session")
def registered():
    """The plugin registered the way vLLM does it: its own loader, which reads the entry point."""
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    return True
