"""The vLLM plugin's names and sizes, and the decisions a serving process makes (standard library
and nvfp4_mla only: no vLLM, no PyTorch, so the shim suite tests it where neither is installed).

Names. Upstream vLLM already spends `nvfp4_ds_mla` on FlashMLA's 352-byte SM100 record (and on
DeepSeek-V4.1's 288-byte compressed record), so this project's records go into vLLM under names of
their own; vLLM requires an `nvfp4*` cache dtype of an MLA model to end in `_ds_mla`
(VllmConfig.validate_nvfp4_kv_cache_with_mla):

    nvfp4_mla368_ds_mla   the 368-byte record (E4M3 RoPE; static or per-token outer scales)
    nvfp4_mla432_ds_mla   the 432-byte record (bf16 RoPE; static outer scales)

Inside the plugin the records keep their own name, `nvfp4_ds_mla` (the original fork's dtype, the
plugin's record_format and the prefix of its cache identities): that is the name config_create is
given here, whatever the vLLM name.

Two decisions, so that the one flag (--kv-cache-dtype) says everything the name says:

  Decision  `current()`: the process's, made once (register() makes it; vLLM loads general plugins
            in every process, also those that never use this backend, so nothing is raised): the
            environment snapshot read by the plugin's rule (the attention's init settings too, so a
            typo there is refused at start-up, not when a GPU worker makes its context), the plugin
            loaded, its compiled capabilities and CUDA architectures.
  Plan      `Decision.plan(dtype, model)`: what one dtype serves for one model, made once a
            (dtype, model) and kept. The dtype name chooses the layout (KV_FP8_ROPE, when set, is
            only a cross-check: a contradiction is refused naming the fix). The scales: the
            environment's or the checkpoint's calibration (which must cover the model's attention
            layers: fewer layers, or more than the model and its draft/MTP layers, is refused naming
            the file); else, with no scale source, the calibration-free per-token mode where the
            layout has it (the plugin's write.per_token_scale and read.latent_scale_per_token bits),
            logged at INFO; else a refusal naming the fix, unless NVFP4_MLA_UNCALIBRATED=1 asks for
            static scale 1.0 on every layer (logged at WARNING). The plugin's own log lines
            (config_create's host callback) and these go to the logger `set_log` installed
            (vLLM's, once register() ran).

`Plan.refusal(capability)` is the one place that says, in the plugin's words, why a dtype cannot be
served on a device: vLLM's backend selection shows it (validate_configuration) and the Impl raises
it, so a deployment fails closed before any cache is written.
"""

import difflib
import json
import logging
import os
from dataclasses import dataclass, field, replace

from .. import _abi
from .. import settings
from ..config import FP8_ROPE_ENV, CacheFormat
from .. import loader
from ..loader import PluginError, load, require_capabilities as require
from ..settings import SettingError

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
# The calibration-free mode's bits (docs/architecture.md): the writer's per-token scale, the readers'.
PER_TOKEN_CAPS = _abi.CAP["write.per_token_scale"] | _abi.CAP["read.latent_scale_per_token"]
UNCALIBRATED_ENV = settings.UNCALIBRATED.name
SCALES_FILE_ENV = settings.SCALES_FILE.name
# Variables vLLM's environment check (Platform.validate_environ) would call unknown: registered with it.
VLLM_PREFIXED = tuple(s.name for s in settings.SETTINGS if s.name.startswith("VLLM_"))
_KNOWN = tuple(s.name for s in settings.SETTINGS)
# The project's own build and test variables (meson, tests/, bench/): not settings, never warned about.
_TOOLING = ("NVFP4_MLA_PLUGIN_PATH", "NVFP4_MLA_CLI", "NVFP4_MLA_LAYOUT_MANIFEST", "NVFP4_MLA_MOCK_DIR",
            "NVFP4_MLA_TEST_DATA", "NVFP4_MLA_TEST_PROFILE", "NVFP4_MLA_DCP_WORLD_SIZE", "NVFP4_MLA_GPU_TEST_MAX_T",
            "NVFP4_MLA_GPU_TEST_RACECHECK", "NVFP4_MLA_PLAN_TABLE_OUT")

_logger = logging.getLogger("nvfp4_mla.vllm_plugin")


def set_log(logger):
    """Where the plugin's lines go (a logging.Logger; register() passes vLLM's). Returns the previous."""
    global _logger
    previous, _logger = _logger, logger
    return previous


def emit(level, message):
    """One line at an nvfp4-mla log level (_abi.LOG_*), to the logger set_log installed."""
    py = logging.ERROR if level <= _abi.LOG_ERROR else logging.WARNING if level == _abi.LOG_WARN else \
        logging.INFO if level == _abi.LOG_INFO else logging.DEBUG
    _logger.log(py, "%s", message if message.startswith("nvfp4-mla: ") else "nvfp4-mla: " + message)


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
class Model:
    """What a plan needs to know of the model served (hooks.model_of reads it from a VllmConfig):
    its checkpoint folder (None: not a local folder or cached snapshot), its name, its attention
    layers (num_hidden_layers) and its draft/MTP layers (num_nextn_predict_layers), which sit past
    the main layers and may be calibrated or not."""
    folder: str = None
    name: str = ""
    layers: int = 0  # 0: not known (no coverage check)
    draft_layers: int = 0


def _file_model(path):
    """The `model` string a calibration file names ("" when none, or the file is not readable JSON:
    the plugin has already refused a bad file by then)."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(4 << 20))
        return data.get("model", "") if isinstance(data, dict) and isinstance(data.get("model"), str) else ""
    except (OSError, ValueError):
        return ""


def _same_model(file_model, served):
    """Whether a calibration file's `model` could name the model served: the last part of either
    name (case ignored) found in the other. A free-form field: only a hint for the warning."""
    def last(name):
        return name.strip().split(" ")[0].rstrip("/").split("/")[-1].lower()
    a, b = file_model.lower(), served.lower()
    return not a or not b or last(served) in a or last(file_model) in b


@dataclass(frozen=True)
class Plan:
    """What one dtype serves for one model in this process. `error` is why nothing can be served
    ("" when it can); `notes` are the (level, line) pairs logged when the plan was made."""
    decision: "Decision" = field(repr=False, compare=False)
    dtype: str = ""
    model: Model = None
    layout: int = 0
    scale_mode: int = _abi.SCALE_STATIC
    writer_policy: int = _abi.WRITER_POLICY_RTN
    identity: str = ""
    scale_source: int = _abi.SCALE_SOURCE_NONE
    error: str = ""
    notes: tuple = ()
    cfg: object = field(default=None, repr=False, compare=False)

    @property
    def plugin(self):
        return self.decision.plugin

    def refusal(self, capability=None):
        """None when this plan serves on a GPU of `capability` ((major, minor); None: not known
        yet), else the reason, naming what to change."""
        if self.error:
            return self.error
        decision = self.decision
        try:
            require(decision.plugin, self.layout, self.scale_mode, available=decision.caps,
                    extra=SERVING_CAPS | _abi.writer_policy_cap(self.writer_policy))
        except PluginError as exc:
            return f"{BACKEND_NAME} cannot serve {self.dtype}: {exc}"
        if capability is not None and tuple(capability) not in decision.archs:
            held = ", ".join(sm_name(c) for c in decision.archs) or "none (a CPU-only build)"
            return (f"{BACKEND_NAME}: nvfp4-mla plugin {decision.plugin_path} holds CUDA code for {held}; this GPU "
                    f"is {sm_name(tuple(capability))} (compute capability {capability[0]}.{capability[1]})")
        return None

    def layer_scale(self, layer_index):
        """A layer's outer scale as its writer and readers take it: the calibrated one (1.0 past the
        calibration: draft/MTP layers) in static mode, None (each record's own) per token."""
        if self.error:
            raise PluginError(self.error, "config_error")
        if self.scale_mode == _abi.SCALE_PER_TOKEN:
            return None
        return self.cfg.layer_scale(layer_index)


@dataclass(frozen=True)
class Decision:
    """What one serving process decided at start-up. `error` is why nothing can be served (the
    settings rule's or the plugin's words), else "". `caps` are the plugin's compiled capability bits
    and `archs` the compute capabilities its fatbin serves: what the backend checks before a device
    exists (the Impl checks the context's runtime bits again once it has one). `notes` are (level,
    line) pairs register() logs (a variable that looks like one of the plugin's but is not)."""
    environ: dict = field(repr=False, compare=False)
    fmt: CacheFormat = None
    plugin: object = field(default=None, repr=False)
    caps: int = 0
    archs: tuple = ()
    error: str = ""
    uncalibrated: bool = False  # NVFP4_MLA_UNCALIBRATED=1: static 1.0 on every layer, asked for
    notes: tuple = ()
    _plans: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # replace() starts anew

    @property
    def plugin_path(self):
        return self.plugin.path if self.plugin is not None else ""

    @property
    def cuda_known(self):
        """Whether `archs` says which GPUs the plugin serves: it loaded and has a CUDA backend (else
        the reason is that, not the GPU: N7)."""
        return not self.error and bool(self.caps & _abi.CAP["backend.cuda"])

    def refusal(self, dtype, capability=None, model=None):
        """None when this process serves `dtype` (a vLLM cache dtype name) for `model` on a GPU of
        `capability`, else the reason (Plan.refusal)."""
        return self.plan(dtype, model).refusal(capability)

    def plan(self, dtype, model=None):
        """The plan for `dtype` and `model` (a Model; None: the environment alone), made once and
        kept; its notes are logged when it is made."""
        key = (dtype, model)
        if key not in self._plans:
            made = self._make_plan(dtype, model)
            self._plans[key] = made
            for level, line in made.notes:
                emit(level, line)
        return self._plans[key]

    def _open(self, fmt, model, lines):
        return fmt.open(self.plugin, PLUGIN_CACHE_DTYPE, model.folder if model else None,
                        log=lambda level, msg: lines.append((level, msg)))

    def _make_plan(self, dtype, model):
        base = Plan(decision=self, dtype=dtype, model=model)
        if dtype not in DTYPES:
            return replace(base, error=f"{BACKEND_NAME} reads only {DTYPE_368} and {DTYPE_432} caches (this "
                                       f"plugin's 368- and 432-byte records); got kv_cache_dtype={dtype!r}")
        if self.error:
            return replace(base, error=f"{BACKEND_NAME} cannot serve {dtype}: {self.error}")
        layout = DTYPES[dtype]
        base = replace(base, layout=layout)
        fp8_rope = layout == _abi.LAYOUT_FP8_ROPE_368
        if self.environ.get(FP8_ROPE_ENV) and self.fmt.fp8_rope != fp8_rope:  # set, and it contradicts
            other = DTYPE_368 if self.fmt.fp8_rope else DTYPE_432
            said = _abi.record_bytes(_abi.LAYOUT_FP8_ROPE_368 if self.fmt.fp8_rope else _abi.LAYOUT_BF16_ROPE_432)
            return replace(base, error=(
                f"--kv-cache-dtype {dtype} asks for {record_bytes(dtype)}-byte records, but "
                f"{FP8_ROPE_ENV}={self.environ[FP8_ROPE_ENV]!r} says {said}-byte records: unset {FP8_ROPE_ENV} "
                f"(the dtype name chooses the layout), or serve --kv-cache-dtype {other}"))
        if self.fmt.dynamic_scale and not fp8_rope:
            return replace(base, error=(
                f"{BACKEND_NAME} cannot serve {dtype}: {settings.DYNAMIC_SCALE.name}=1 asks for per-token scales, "
                f"which only the 368-byte record has: serve --kv-cache-dtype {DTYPE_368}, or unset "
                f"{settings.DYNAMIC_SCALE.name}"))
        fmt = replace(self.fmt, fp8_rope=fp8_rope)
        lines, notes = [], []
        try:
            cfg = self._open(fmt, model, lines)
            if cfg.scale_source == _abi.SCALE_SOURCE_NONE and not self.uncalibrated:
                if fp8_rope and self.caps & PER_TOKEN_CAPS == PER_TOKEN_CAPS:
                    lines = []  # the static configuration's lines are not what is served
                    cfg = self._open(replace(fmt, dynamic_scale=True), model, lines)
                    notes.append((_abi.LOG_INFO, (
                        f"{dtype}: no calibration (no {SCALES_FILE_ENV}, no nvfp4_mla_outer_scales in the checkpoint): "
                        "per-token outer scales, which need none (each record carries its own)")))
                else:
                    return replace(base, error=self._no_scales(dtype, fp8_rope), notes=tuple(lines))
        except PluginError as exc:
            return replace(base, error=f"{BACKEND_NAME} cannot serve {dtype}: {exc}", notes=tuple(lines))
        notes = lines + notes
        plan = replace(base, scale_mode=cfg.scale_mode, writer_policy=cfg.writer_policy, identity=cfg.identity,
                       scale_source=cfg.scale_source, cfg=cfg)
        if cfg.scale_source == _abi.SCALE_SOURCE_NONE:
            notes.append((_abi.LOG_WARN, (
                f"{dtype}: every layer's outer scale is 1.0 ({UNCALIBRATED_ENV}=1): records of layers whose latent "
                "values are small lose most of their precision; calibrate (nvfp4-mla calibrate) or serve "
                f"{DTYPE_368} (per-token scales)")))
        elif cfg.scale_mode == _abi.SCALE_STATIC and model is not None and model.layers:
            error = self._coverage(dtype, cfg, model, notes)
            if error:
                return replace(base, error=error, notes=tuple(notes))
        if self.uncalibrated and cfg.scale_source != _abi.SCALE_SOURCE_NONE:
            notes.append((_abi.LOG_INFO, f"{UNCALIBRATED_ENV}=1 is not used: {dtype} has a scale source"))
        notes.append((_abi.LOG_INFO, f"{dtype} for {model.name if model and model.name else 'the environment'}: "
                                     f"cache identity {cfg.identity}"))
        return replace(plan, notes=tuple(notes))

    @staticmethod
    def _no_scales(dtype, fp8_rope):
        why = ("the plugin does not serve per-token scales" if fp8_rope
               else "the 432-byte record has no per-token scales")
        return (f"{BACKEND_NAME} cannot serve {dtype}: no outer scales (no {SCALES_FILE_ENV}, no "
                f"nvfp4_mla_outer_scales in the checkpoint's config.json) and {why}: give a calibration file ({SCALES_FILE_ENV}=<file>, made "
                f"by nvfp4-mla calibrate), " + ("" if fp8_rope else f"or serve --kv-cache-dtype {DTYPE_368} "
                                                "(per-token scales, no calibration needed), ")
                + f"or set {UNCALIBRATED_ENV}=1 to serve every layer at outer scale 1.0 (uncalibrated)")

    @staticmethod
    def _coverage(dtype, cfg, model, notes):
        """The calibration against the model's attention layers: every main layer covered, and no
        more layers than the model and its draft/MTP layers have (the rule "layers past the file
        stay 1.0" is for draft layers only). Returns the refusal, or "" (notes get the warnings)."""
        source = (f"{SCALES_FILE_ENV}={cfg.scale_source_path}" if cfg.scale_source == _abi.SCALE_SOURCE_ENV_FILE
                  else f"the checkpoint's calibration{' ' + cfg.scale_source_path if cfg.scale_source_path else ''}")
        named = _file_model(cfg.scale_source_path) if cfg.scale_source_path else ""
        of = f" (made for {named!r})" if named else ""
        served = f"{model.name} has" if model.name else "the model has"
        if cfg.num_layers < model.layers:
            return (f"{BACKEND_NAME} cannot serve {dtype}: {source}{of} calibrates {cfg.num_layers} layers, but "
                    f"{served} {model.layers} attention layers (num_hidden_layers): layers {cfg.num_layers}.."
                    f"{model.layers - 1} would run uncalibrated; calibrate this model (nvfp4-mla calibrate), or "
                    f"give its own file")
        if cfg.num_layers > model.layers + model.draft_layers:
            return (f"{BACKEND_NAME} cannot serve {dtype}: {source}{of} calibrates {cfg.num_layers} layers, but "
                    f"{served} {model.layers} attention layers and {model.draft_layers} draft/MTP layers "
                    "(num_nextn_predict_layers): a file for another model; give this model's calibration")
        if named and model.name and not _same_model(named, model.name):
            notes.append((_abi.LOG_WARN, f"{source} was made for {named!r}, and this model is {model.name!r}: "
                                         "check that the calibration is this model's"))
        if cfg.num_layers < model.layers + model.draft_layers:
            last = model.layers + model.draft_layers - 1
            notes.append((_abi.LOG_INFO, f"{source} calibrates {cfg.num_layers} layers; the draft/MTP layers "
                                         f"{cfg.num_layers}..{last} use outer scale 1.0"))
        return ""


def _unknown_variables(env):
    """(level, line) notes for variables named like the plugin's that are none of them (a typo would
    otherwise be ignored silently, and the plan fall back to its default)."""
    notes = []
    for name in sorted(env):
        if (name.startswith("NVFP4_MLA_") or name.startswith("VLLM_NVFP4_MLA_")) and name not in _KNOWN + _TOOLING:
            close = difflib.get_close_matches(name, _KNOWN, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            notes.append((_abi.LOG_WARN, f"{name} is not a variable nvfp4-mla reads, and is ignored{hint}; it reads "
                                         f"{', '.join(_KNOWN)}"))
    return tuple(notes)


def decide(environ=None):
    """The decision for an environment snapshot (a mapping; None: the process environment, read
    now). Never raises: what went wrong is the decision's `error`."""
    env = dict(os.environ if environ is None else environ)
    notes = _unknown_variables(env)
    try:
        fmt = CacheFormat.from_env(env)
        for row in settings.SETTINGS:  # the CUDA context's settings, read at init: checked now, not on the GPU
            if row.reader == "init":
                settings.parse(row, env.get(row.name))
        uncalibrated = settings.parse(settings.UNCALIBRATED, env.get(UNCALIBRATED_ENV))
    except (PluginError, SettingError) as exc:
        return Decision(environ=env, error=str(exc), notes=notes)
    if not env.get(_abi.PLUGIN_ENV):  # the snapshot's variable, not the process's: say so in its words
        return Decision(environ=env, fmt=fmt, error=loader.NOT_SELECTED, notes=notes)
    try:
        plugin = load(environ=env)
    except PluginError as exc:
        return Decision(environ=env, fmt=fmt, error=str(exc), notes=notes)
    return Decision(environ=env, fmt=fmt, plugin=plugin, caps=plugin.capability_bits(),
                    archs=parse_cuda_archs((plugin.table.cuda_archs or b"").decode()), uncalibrated=uncalibrated,
                    notes=notes)


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
