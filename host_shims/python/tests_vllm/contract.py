"""The vLLM contract suite's ground, imported by conftest.py before anything else of vLLM: the
installed vllm wheel (exactly CONTRACT_VLLM_VERSION, a name vLLM's environment check leaves alone:
.ci/vllm-contract runs the suite once against 0.33.0 and once against 0.34.0, each in its own
environment) on a machine without a GPU,
the plugin NVFP4_MLA_PLUGIN names (a CPU build in CI), a tiny DeepSeek-V3.2 (TINY_CONFIG: the
fixtures write it as a config.json, dummy weights, offline), and the helpers the tests share.

vLLM detects no platform without a GPU, so before anything else of vLLM is imported a stand-in
platform is made current: vLLM's own NonNvmlCudaPlatform reporting one SM90 GPU (an H200), whose
tensors live on the CPU (device_type "cpu"), so that the real model code builds its layers here.
Run by .ci/vllm-contract (which makes the environment, the plugin and a libcuda stub).
"""
import importlib.metadata
import logging
import os
import sys
import tempfile
from dataclasses import replace

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
VERSION = os.environ.get("CONTRACT_VLLM_VERSION", "0.33.0")
VERSIONS = ("0.33.0", "0.34.0")  # what the package's extra allows and .ci/vllm-contract runs

if importlib.metadata.version("vllm") != VERSION:
    pytest.exit(f"the contract suite runs against vllm=={VERSION}, this environment has "
                f"{importlib.metadata.version('vllm')}: run .ci/vllm-contract", returncode=2)


def _install_platform():
    import vllm.platforms as platforms
    from vllm.platforms.cuda import NonNvmlCudaPlatform
    from vllm.platforms.interface import DeviceCapability

    assert platforms._current_platform is None, "a vLLM platform was resolved before the stand-in"

    class ContractPlatform(NonNvmlCudaPlatform):
        """One SM90 GPU that is not there: capability 9.0, 141 GB, tensors on the CPU."""
        device_type = "cpu"

        @classmethod
        def get_device_capability(cls, device_id=0):
            return DeviceCapability(major=9, minor=0)

        @classmethod
        def get_device_name(cls, device_id=0):
            return "NVIDIA H200 (contract stand-in, no GPU)"

        @classmethod
        def get_device_total_memory(cls, device_id=0):
            return 141 << 30

        @classmethod
        def device_count(cls):
            return 1

        @classmethod
        def is_pin_memory_available(cls):
            return False

    platforms._current_platform = ContractPlatform()


_install_platform()

import torch  # noqa: E402

from nvfp4_mla import _abi  # noqa: E402

# A DeepSeek-V3.2 with every size the records fix (kv_lora_rank 512, RoPE 64, indexer head 128) and
# everything else small: 2 layers, 16 heads, dense MLPs, 64-token top-k.
TINY_CONFIG = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "vocab_size": 256,
    "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64, "num_hidden_layers": 2,
    "num_nextn_predict_layers": 0, "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 1,
    "n_routed_experts": 4, "routed_scaling_factor": 1.0, "kv_lora_rank": 512, "q_lora_rank": 64,
    "qk_rope_head_dim": 64, "v_head_dim": 32, "qk_nope_head_dim": 32, "topk_method": "noaux_tc", "n_group": 1,
    "topk_group": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 2, "norm_topk_prob": True,
    "hidden_act": "silu", "max_position_embeddings": 4096, "initializer_range": 0.02, "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False, "rope_theta": 10000, "rope_scaling": None, "attention_bias": False,
    "attention_dropout": 0.0, "index_topk": 64, "index_n_heads": 4, "index_head_dim": 128, "bos_token_id": 0,
    "eos_token_id": 1, "torch_dtype": "bfloat16",
}


def environ(plugin_path, **settings):
    """A deployment's environment: the plugin and the cache settings given (name=value)."""
    return {_abi.PLUGIN_ENV: plugin_path, **settings}


def stand_in(decision):
    """A decision of the CPU-built plugin presented as a CUDA build for the SM90 stand-in: the
    compiled capabilities plus backend.cuda, and an sm_90a image (what a GPU build reports). A
    decision that failed stays as it is."""
    if decision.error:
        return decision
    return replace(decision, caps=decision.caps | _abi.CAP["backend.cuda"], archs=((9, 0),))


_distributed = []


def engine_config(model, dtype, backend=None, block_size=None, **extra):
    """A VllmConfig as `vllm serve` makes it (EngineArgs), offline, dummy weights; by default the
    shortest serve line: the dtype alone (no --attention-backend, no --block-size)."""
    from vllm.engine.arg_utils import EngineArgs
    args = EngineArgs(model=model, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                      kv_cache_dtype=dtype, attention_backend=backend, block_size=block_size, max_model_len=1024,
                      max_num_seqs=8, max_num_batched_tokens=1024, **extra)
    return args.create_engine_config()


def fresh_selection():
    """Forget vLLM's cached backend selections (a process makes one decision; the tests install
    several, and a cached selection would skip the new decision's validation)."""
    from vllm.v1.attention import selector
    cached = selector._cached_get_attn_backend
    getattr(cached, "nvfp4_mla_original", cached).cache_clear()


def build_model(config):
    """The real model class built on the CPU under `config` (one process group of one rank), and the
    page size settled for its backends as vLLM's executors do before they plan the cache
    (Platform.update_block_size_for_backend, where this vLLM has it)."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    fresh_selection()
    with set_current_vllm_config(config):
        if not _distributed:
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"file://{tempfile.mktemp(prefix='vllm-pg-')}")
            initialize_model_parallel(1, 1)
            _distributed.append(True)
        with set_default_torch_dtype(torch.bfloat16), torch.device("cpu"):
            model = initialize_model(vllm_config=config)
        from vllm.platforms import current_platform
        update = getattr(current_platform, "update_block_size_for_backend", None)
        if update is not None:
            update(config)
        return model


class Captured(logging.Filter):
    """The lines of vLLM's logger for the plugin (vllm.plugins.nvfp4_mla) and of vLLM's environment
    check, as records. vLLM's loggers do not propagate to the root, so caplog does not see them, and
    when vLLM configures logging (create_engine_config may) it drops the handlers of every logger
    under "vllm": a filter on the logger itself stays, and sees each record logged to it."""
    NAMES = ("vllm.plugins.nvfp4_mla", "vllm.platforms.interface")

    def __init__(self, *names):
        super().__init__()
        self.names, self.records = names or self.NAMES, []

    def filter(self, record):
        self.records.append(record)
        return True

    def lines(self, level=logging.DEBUG):
        return [r.getMessage() for r in self.records if r.levelno >= level]

    def __enter__(self):
        # INFO must get through: vLLM sets its loggers to INFO when it configures logging, and a test
        # process may not have yet (the level is reset to follow "vllm" when it does).
        self._levels = {}
        for name in self.names:
            logger = logging.getLogger(name)
            self._levels[name] = logger.level
            logger.setLevel(logging.DEBUG)
            logger.addFilter(self)
        return self

    def __exit__(self, *exc):
        for name in self.names:
            logging.getLogger(name).removeFilter(self)
            logging.getLogger(name).setLevel(self._levels[name])
