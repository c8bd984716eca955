#!/bin/sh
# What a Python host gets from `pip install host_shims/python`: a fresh virtual environment (it
# sees the system's site packages, for numpy, nothing of ours), the package built by its own
# backend (_build/: no setuptools or wheel used) and installed offline (--no-index
# --no-build-isolation), then imported from the environment, not the source tree, from another
# folder; it loads the plugin, opens a CPU context and writes and reads one record. The package is
# copied first, so that the build can write nothing into the source tree.
# Skips (77) where venv or pip is missing.
#   usage: check_pip_install.sh PYTHON PACKAGE_DIR PLUGIN.so VERSION
set -eu
python=$1
package=$2
plugin=$3
version=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv --system-site-packages "$work/venv" >"$work/venv.log" 2>&1 || {
    cat "$work/venv.log"; echo "python3 -m venv is not available: skipped"; exit 77; }
venv_python="$work/venv/bin/python"
"$venv_python" -c "import pip" >/dev/null 2>&1 || { echo "pip missing in the environment: skipped"; exit 77; }
mkdir "$work/src"
cp -R "$package/pyproject.toml" "$package/README.md" "$package/_build" "$package/nvfp4_mla" "$work/src/"
"$venv_python" -m pip install --no-index --no-build-isolation --no-deps --no-cache-dir -q "$work/src" \
    >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; echo "FAIL: pip install"; exit 1; }
cd "$work"
NVFP4_MLA_PLUGIN="$plugin" "$venv_python" - "$work/venv" "$version" <<'PY'
import importlib.metadata
import sys

import nvfp4_mla

venv, version = sys.argv[1], sys.argv[2]
assert nvfp4_mla.__file__.startswith(venv), f"imported from {nvfp4_mla.__file__}, not the environment"
assert importlib.metadata.version("nvfp4-mla") == version, importlib.metadata.version("nvfp4-mla")
plugin = nvfp4_mla.load()
print(nvfp4_mla.require(plugin, nvfp4_mla.CacheFormat(dynamic_scale=True, fp8_rope=True)))
try:
    import numpy as np
except ImportError:  # the package itself needs no numpy; the round trip below does
    np = None
with nvfp4_mla.Context(plugin) as ctx:
    if np is None:
        sys.exit(0)
    x = nvfp4_mla.bf16_bits(np.linspace(-1, 1, 576, dtype=np.float32).reshape(1, 576))
    cache, rows = np.zeros((1, 1, 368), np.uint8), np.zeros((1, 576), np.uint16)
    ctx.write(x[:, :512], x[:, 512:], np.zeros(1, np.int64), cache, layout=nvfp4_mla.LAYOUT_FP8_ROPE_368,
              scale_mode=nvfp4_mla.SCALE_PER_TOKEN)
    ctx.gather(cache, np.zeros(1, np.int32), rows, layout=nvfp4_mla.LAYOUT_FP8_ROPE_368,
               scale_mode=nvfp4_mla.SCALE_PER_TOKEN)
    err = np.abs(nvfp4_mla.bf16_to_float32(rows) - nvfp4_mla.bf16_to_float32(x)).max()
    assert err < 0.2, err
print(f"ok: nvfp4-mla {version} installed by pip into a fresh environment, loaded {plugin.path} "
      f"(ABI {plugin.abi}) and round-tripped a record")
PY
