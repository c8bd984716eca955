"""The vLLM plugin's names and sizes, and the one decision a serving process makes (standard library
and nvfp4_mla only: no vLLM, no PyTorch, so the shim suite tests it where neither is installed).

Names. Upstream vLLM 0.33 already spends `nvfp4_ds_mla` on FlashMLA's 352-byte SM100 record (and on
DeepSeek-V4.1's 288-byte compressed record), so this project's records go into vLLM under names of
their own; vLLM requires an `nvfp4*` cache dtype of an MLA model to end in `_ds_mla`
(VllmConfig.validate_nvfp4_kv_cache_with_mla):

    nvfp4_mla368_ds_mla   the 368-byte record (E4M3 RoPE; static or per-token outer scales)
    nvfp4_mla432_ds_mla   the 432-byte record (bf16 RoPE; static outer scales)

Inside the plugin the records keep their own name, `nvfp4_ds_mla` (the original fork's dtype, the
plugin's record_format and the prefix of its cache identities): that is the name config_create is
given here, whatever the vLLM name.

The decision. `current()` snapshots the environment once per process (the original names:
VLLM_NVFP4_MLA_DYNAMIC_SCALE, VLLM_NVFP4_MLA_SCALES_FILE, KV_FP8_ROPE, NVFP4_MLA_WRITER_POLICY, and
NVFP4_MLA_PLUGIN), loads and probes the plugin, and makes the plugin's configuration; nothing is
raised then (vLLM loads general plugins in every process, also those that never use this backend).
`Decision.refusal(dtype, capability)` is the one place that says, in the plugin's words, why this
process cannot serve a dtype on a device: vLLM's backend selection shows it (validate_configuration)
and the Impl raises it, so a deployment that asked for the backend fails closed before any cache is
written.
"""

import os
from dataclasses import dataclass, field

from .. import _abi
from ..config import FP8_ROPE_ENV, CacheFormat
from .. import loader
from ..loader import PluginError, load, require_capabilities as require

BACKEND_NAME = "NVFP4_MLA_SPARSE"
BACKEND_PATH = "nvfp4_mla.vllm_plugin.backend.NvFp4MlaSparseBackend"
BLOCK_SIZE = 64  # tokens a page: the plugin's tested geometry, and DeepSeek-V3.2's indexer pages
DTYPE_368 = "nvfp4_mla368_ds_mla"
DTYPE_432 = "nvfp4_mla432_ds_mla"
DTYPES = {DTYPE_368: _abi.LAYOUT_FP8_ROPE_368, DTYPE_432: _abi.LAYOUT_BF16_ROPE_432}
PLUGIN_CACHE_DTYPE = _abi.RECORD_FORMAT  # "nvfp4_ds_mla": the name the plugin's config_create knows
HEAD_SIZE = _abi.ROW_DIM  # 512 latent + 64 RoPE: the only MLA geometry the records hold
FP8_DS_MLA_BYTES = _abi.RECORD_BYTES_656  # what FLASHMLA_SPARSE stores a token on Hopper
INDEXER_ROW_BYTES = 132  # DeepSeek-V3.2's indexer key a token and layer: 128 E4M3 + one f32 scale
# What every serving process calls: the writer, attend (decode and prefill), and the CUDA backend.
SERVING_CAPS = _abi.CAP["op.write"] | _abi.CAP["op.attend"] | _abi.CAP["backend.cuda"]


def record_bytes(dtype):
    """Bytes a token and layer for one of this plugin's vLLM dtype names (0 for any other name)."""
    layout = DTYPES.get(dtype)
    return _abi.record_bytes(layout) if layout is not None else 0


def capacity_gain(dtype, indexer=True):
    """Tokens a layer holds in the same bytes, against FLASHMLA_SPARSE's 656-byte records, counted
    as the engine stores them: a DeepSeek-V3.2 layer with an indexer also keeps a 132-byte row a
    token, for both formats."""
    extra = INDEXER_ROW_BYTES if indexer else 0
    return (FP8_DS_MLA_BYTES + extra) / (record_bytes(dtype) + extra)


def parse_cuda_archs(text):
    """The compute capabilities a plugin's fatbin holds machine code for: "sm_90a,sm_100a" ->
    ((9, 0), (10, 0)). PTX is not counted: a GPU the fatbin has no image for turns the plugin's CUDA
    capabilities off at init (docs/architecture.md), so it is refused here too."""
    caps = []
    for token in (text or "").split(","):
        token = token.strip()
        digits = token[3:].rstrip("abf") if token.startswith("sm_") else ""
        if digits.isdigit() and len(digits) >= 2:
            caps.append((int(digits[:-1]), int(digits[-1])))
    return tuple(caps)


def sm_name(capability):
    return f"sm_{capability[0]}{capability[1]}"


@dataclass(frozen=True)
class Decision:
    """What one serving process decided at start-up. `error` is why nothing can be served (the
    settings rule's or the plugin's words), else "". `caps` are the plugin's compiled capability bits
    and `archs` the compute capabilities its fatbin serves: what the backend checks before a device
    exists (the Impl checks the context's runtime bits again once it has one)."""
    environ: dict = field(repr=False, compare=False)
    fmt: CacheFormat = None
    plugin: object = field(default=None, repr=False)
    layout: int = 0  # the layout the environment selects (KV_FP8_ROPE)
    scale_mode: int = 0
    writer_policy: int = _abi.WRITER_POLICY_RTN
    identity: str = ""  # the persistent-cache identity, environment only (checkpoint scales: config())
    caps: int = 0
    archs: tuple = ()
    error: str = ""
    _configs: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def plugin_path(self):
        return self.plugin.path if self.plugin is not None else ""

    def refusal(self, dtype, capability=None):
        """None when this process serves `dtype` (a vLLM cache dtype name) on a GPU of `capability`
        ((major, minor); None: not known yet), else the reason, naming what to change."""
        if dtype not in DTYPES:
            return (f"{BACKEND_NAME} reads only {DTYPE_368} and {DTYPE_432} caches (this plugin's 368- and "
                    f"432-byte records); got kv_cache_dtype={dtype!r}")
        if self.error:
            return f"{BACKEND_NAME} cannot serve {dtype}: {self.error}"
        wanted = DTYPES[dtype]
        if wanted != self.layout:
            other = next(name for name, layout in DTYPES.items() if layout == self.layout)
            setting = f"{FP8_ROPE_ENV}={self.environ.get(FP8_ROPE_ENV)!r}" if FP8_ROPE_ENV in self.environ \
                else f"{FP8_ROPE_ENV} unset"
            fix = f"set {FP8_ROPE_ENV}=1" if wanted == _abi.LAYOUT_FP8_ROPE_368 else f"unset {FP8_ROPE_ENV}"
            return (f"--kv-cache-dtype {dtype} asks for {record_bytes(dtype)}-byte records, but the environment "
                    f"({setting}) selects the {_abi.record_bytes(self.layout)}-byte layout "
                    f"({_abi.layout_name(self.layout)}): {fix}, or serve --kv-cache-dtype {other}")
        try:
            require(self.plugin, self.layout, self.scale_mode, available=self.caps,
                    extra=SERVING_CAPS | _abi.writer_policy_cap(self.writer_policy))
        except PluginError as exc:
            return f"{BACKEND_NAME} cannot serve {dtype}: {exc}"
        if capability is not None and tuple(capability) not in self.archs:
            held = ", ".join(sm_name(c) for c in self.archs) or "none (a CPU-only build)"
            return (f"{BACKEND_NAME}: nvfp4-mla plugin {self.plugin_path} holds CUDA code for {held}; this GPU "
                    f"is {sm_name(tuple(capability))} (compute capability {capability[0]}.{capability[1]})")
        return None

    def config(self, model_dir=None):
        """The plugin's configuration (a PluginConfig: layer scales, identity) for this process's
        format and a checkpoint folder (None: the environment alone), made once per folder and kept
        for the life of the process."""
        if self.error:
            raise PluginError(self.error, "config_error")
        key = model_dir or ""
        if key not in self._configs:
            self._configs[key] = self.fmt.open(self.plugin, PLUGIN_CACHE_DTYPE, model_dir or None)
        return self._configs[key]

    def layer_scale(self, layer_index, model_dir=None):
        """A layer's outer scale as its writer and readers take it: the calibrated one (1.0 past the
        calibration) in static mode, None (the mode's default: each record's own) per token."""
        if self.scale_mode == _abi.SCALE_PER_TOKEN:
            return None
        return self.config(model_dir).layer_scale(layer_index)


def decide(environ=None):
    """The decision for an environment snapshot (a mapping; None: the process environment, read
    now). Never raises: what went wrong is the decision's `error`."""
    env = dict(os.environ if environ is None else environ)
    try:
        fmt = CacheFormat.from_env(env)
    except PluginError as exc:
        return Decision(environ=env, error=str(exc))
    if not env.get(_abi.PLUGIN_ENV):  # the snapshot's variable, not the process's: say so in its words
        return Decision(environ=env, fmt=fmt, error=loader.NOT_SELECTED)
    try:
        plugin = load(environ=env)
    except PluginError as exc:
        return Decision(environ=env, fmt=fmt, error=str(exc))
    try:
        cfg = fmt.open(plugin, PLUGIN_CACHE_DTYPE)
    except PluginError as exc:
        return Decision(environ=env, fmt=fmt, plugin=plugin, error=str(exc))
    decision = Decision(environ=env, fmt=fmt, plugin=plugin, layout=cfg.layout, scale_mode=cfg.scale_mode,
                        writer_policy=cfg.writer_policy, identity=cfg.identity, caps=plugin.capability_bits(),
                        archs=parse_cuda_archs((plugin.table.cuda_archs or b"").decode()))
    decision._configs[""] = cfg
    return decision


_current = None


def current():
    """This process's decision, made at the first call (register() makes it) and kept."""
    global _current
    if _current is None:
        _current = decide()
    return _current


def install(decision):
    """Replace this process's decision (tests; a host that snapshots its environment itself); returns
    the previous one (None when none was made)."""
    global _current
    previous, _current = _current, decision
    return previous
