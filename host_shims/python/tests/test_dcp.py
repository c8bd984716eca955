"""Decode context parallelism through torch.distributed (examples/dcp_decode.py, the repository's
bench/dcp_measure.py): one process per GPU over NCCL, world size 2 and NVFP4_MLA_DCP_WORLD_SIZE when
it names a larger one; the merged decode equals one attend over the whole cache and the all-gathered
records equal the single-GPU writer's bytes (the example exits 1 otherwise); the measurement writes its JSON. Skips
without PyTorch or with fewer GPUs than the world size. The same recipe also runs over gloo on the
plugin's CPU backend wherever PyTorch is installed. NVLink multicast stays off in every process."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.dirname(HERE)
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
WORLDS = sorted({2, int(os.environ.get("NVFP4_MLA_DCP_WORLD_SIZE") or 2)})


def run(script, plugin_path, *args, timeout=600):
    path = os.pathsep.join(p for p in (SHIM, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, NVFP4_MLA_PLUGIN=plugin_path, PYTHONPATH=path, **NO_MULTICAST)
    return subprocess.run([sys.executable, os.path.join(SHIM, script), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_dcp_recipe_should_hold_over_gloo_on_the_cpu_backend(plugin_path):
    done = run("examples/dcp_decode.py", plugin_path, "--device", "cpu", "--world-size", "3", "--heads", "2",
               "--topk", "48", "--tokens", "700", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "world 3: all checks passed" in done.stdout
    assert done.stdout.count(": ok (") == 2 * 2 * (1 + 2)  # modes x layouts x (gather + sparse/compact decode)


@pytest.mark.parametrize("world", WORLDS)
def test_dcp_decode_and_gather_should_match_one_gpu(plugin_path, world):
    if GPUS < world:
        pytest.skip(f"DCP over {world} ranks needs {world} GPUs, {GPUS} visible")
    done = run("examples/dcp_decode.py", plugin_path, "--world-size", str(world))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"world {world}: all checks passed" in done.stdout
    assert done.stdout.count(": ok (") == 2 * 2 * (1 + 2 * 2 * 2)  # modes x layouts x (gather + h x topk x rows)


def test_dcp_measurement_should_write_its_table_and_json(plugin_path, tmp_path):
    if GPUS < 2:
        pytest.skip(f"the DCP measurement needs 2 GPUs, {GPUS} visible")
    out = tmp_path / "dcp.json"
    done = run("../../bench/dcp_measure.py", plugin_path, "--world-size", "2", "--quick", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["meta"]["world"] == 2 and result["meta"]["nvls"]["NCCL_NVLS_ENABLE"] == "0"
    gathered = result["allgather"][0]
    assert gathered["tokens"] == 1 << 14 and gathered["rows_bytes"] * 368 == gathered["records_bytes"] * 1152
    assert all(v > 0 for k, v in result["decode"][0].items() if k.endswith("_us"))
