"""Where a results file came from, written into the file itself (issue 47): the one helper every
Python measurement uses (flashmla_compare.py, hot_path.py, dcp_measure.py), so that a file copied
into results/ carries its plugin revision, build, device, driver, peer kernel, date and command.

`collect()` returns the object a script stores under the key "provenance"; `check()` says what a
file's provenance lacks (compare_table.py refuses to index or tabulate such a file). The C bench
(bench/bench_provenance.cu) writes the same keys from C; REQUIRED lists them.

    python3 bench/provenance.py [--plugin P] [--build-dir D]   prints what collect() finds here
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_code  # noqa: E402  (bench/device_code.py: the digest of the kernels, issue 57)

SCHEMA = "nvfp4-mla provenance 1"
# Keys every results file's provenance must carry, as "section.key" ("." alone: top level).
REQUIRED = ("schema", "date_utc", "command", "plugin.git_revision", "plugin.version", "plugin.cuda_archs",
            "build.buildtype", "device.name", "device.driver", "device_code.digest")
# Environment variables that change what a run measures (the plugin's settings, the GPU chosen).
_ENV_PREFIXES = ("NVFP4_MLA_", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "NCCL_NVLS_ENABLE")


def sha256(path):
    """Hex SHA-256 of a file, or None when it cannot be read."""
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError:
        return None


def driver_version():
    """The NVIDIA kernel driver's version ("580.159.04"): /proc first (no process to start), then
    nvidia-smi; "unknown" without either (a CPU machine)."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]+)", f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def plugin_info(plugin):
    """What the loaded plugin reports about itself (its table's build strings) and its file."""
    t = plugin.table
    path = os.path.realpath(plugin.path)
    return {"path": path, "sha256": sha256(path), "name": _text(t.plugin_name), "version": _text(t.version),
            "git_revision": _text(t.git_revision),
            # "" from a build without CUDA: said so (a required key; the CPU runs of tests/ make such files)
            "cuda_archs": _text(t.cuda_archs) or "none (CPU backend only)",
            "record_format": _text(t.record_format), "abi": plugin.abi}


def build_dir_of(plugin_path):
    """The Meson build folder a plugin file was built in (.../BUILD/plugin/libnvfp4_mla.so), or None."""
    d = os.path.dirname(os.path.dirname(os.path.realpath(plugin_path)))
    return d if os.path.isdir(os.path.join(d, "meson-info")) else None


def compilers(build_dir):
    """"c": "gcc 12.2.0", "cuda": "nvcc 13.0.88": the compilers Meson's log says it configured with
    (Meson before 1.1 writes no intro-compilers.json)."""
    found = {}
    try:
        with open(os.path.join(build_dir, "meson-logs", "meson-log.txt"), errors="replace") as f:
            for line in f:
                m = re.match(r"(C|Cuda|C\+\+) compiler for the host machine: \S+ \((\S+) ([^ )]+)", line)
                if m:
                    found[{"C": "c", "Cuda": "cuda", "C++": "cpp"}[m.group(1)]] = f"{m.group(2)} {m.group(3).strip()}"
    except OSError:
        pass
    return found


def build_info(build_dir):
    """The build's options and compilers from Meson's files; a note when none is found."""
    if not build_dir:
        return {"buildtype": "unknown", "note": "no Meson build folder beside the plugin"}
    info = {"dir": os.path.realpath(build_dir)}
    try:
        with open(os.path.join(build_dir, "meson-info", "intro-buildoptions.json")) as f:
            options = {o["name"]: o["value"] for o in json.load(f)}
        for key in ("buildtype", "optimization", "debug", "b_ndebug", "cuda", "gpu_archs", "b_sanitize", "c_args",
                    "cuda_args"):
            if key in options:
                info[key] = options[key]
    except (OSError, ValueError, KeyError) as exc:
        info["buildtype"] = "unknown"
        info["note"] = f"Meson's introspection file unreadable: {exc}"
    info["compilers"] = compilers(build_dir)
    return info


def device_info(torch=None):
    """The GPU the run used (PyTorch's view of cuda:0) and the driver; CPU runs say so."""
    info = {"driver": driver_version()}
    if torch is not None and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, sm_count=p.multi_processor_count, compute_capability=f"{p.major}.{p.minor}",
                    memory_gib=round(p.total_memory / 2**30, 1), cuda_runtime=torch.version.cuda)
    else:
        info.update(name="cpu", cpu=platform.processor() or platform.machine())
    return info


def peer_info(path, wheel):
    """FlashMLA's kernel file: its hash, and the wheel it came from (tools/flashmla-fetch writes
    .anchor/_flashmla_C.source.json beside it; else the --flashmla-wheel the caller gave)."""
    info = {"path": os.path.realpath(path), "sha256": sha256(path), "wheel": wheel, "wheel_source": "command line"}
    side = os.path.join(os.path.dirname(path), "_flashmla_C.source.json")
    try:
        with open(side) as f:
            fetched = json.load(f)
        info.update(wheel=fetched.get("wheel", wheel), wheel_sha256=fetched.get("wheel_sha256"),
                    wheel_source=os.path.relpath(side))
        if fetched.get("sha256") and fetched["sha256"] != info["sha256"]:
            info["note"] = "the .so differs from the one the fetch recorded"
    except (OSError, ValueError):
        pass
    return info


def collect(plugin=None, torch=None, argv=None, build_dir=None, peer=None):
    """The provenance object of a run: `plugin` a loaded nvfp4_mla plugin, `torch` the module when
    the run used it, `peer` {"path", "wheel"} of FlashMLA's kernel when compared with."""
    argv = sys.argv if argv is None else argv
    prov = {
        "schema": SCHEMA,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(["python3"] + list(argv)),
        "cwd": os.getcwd(),
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)},
        "host": {"hostname": platform.node(), "python": platform.python_version()},
        "device": device_info(torch),
        # the kernels of the tree this script sits in: on the GPU machine the tree .ci/gpu just built
        "device_code": device_code.record(),
    }
    if torch is not None:
        prov["host"]["torch"] = torch.__version__
    try:
        import numpy
        prov["host"]["numpy"] = numpy.__version__
    except ImportError:
        pass
    if plugin is not None:
        prov["plugin"] = plugin_info(plugin)
        prov["build"] = build_info(build_dir or build_dir_of(plugin.path))
    if peer:
        prov["peer"] = peer_info(peer["path"], peer.get("wheel"))
    return prov


def check(prov):
    """The REQUIRED keys a provenance object lacks (an empty list when complete)."""
    missing = []
    for key in REQUIRED:
        node = prov
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node in (None, ""):
            missing.append(key)
    return missing


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plugin", help="plugin path (default: NVFP4_MLA_PLUGIN)")
    p.add_argument("--build-dir")
    args = p.parse_args()
    plugin = None
    try:
        import nvfp4_mla
        plugin = nvfp4_mla.load(args.plugin) if args.plugin else nvfp4_mla.load()
    except Exception as exc:  # noqa: BLE001  (printing what is there: a missing plugin is a note)
        print(f"(no plugin: {exc})", file=sys.stderr)
    try:
        import torch
    except ImportError:
        torch = None
    prov = collect(plugin, torch, build_dir=args.build_dir)
    json.dump(prov, sys.stdout, indent=1)
    print()
    missing = check(prov)
    if missing:
        print(f"incomplete for a results file: {', '.join(missing)}", file=sys.stderr)


if __name__ == "__main__":
    main()
