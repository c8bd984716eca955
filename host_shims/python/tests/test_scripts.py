"""The example backend and the hot-path microbenchmark, run as a user runs them (CPU backend here;
the benchmark's PyTorch CUDA part runs on the GPU machine)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.dirname(HERE)


def run(script, plugin_path, *args):
    env = dict(os.environ, NVFP4_MLA_PLUGIN=plugin_path, PYTHONPATH=SHIM)
    return subprocess.run([sys.executable, os.path.join(SHIM, script), *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_example_backend_should_run_a_decode_step_through_the_prepared_calls(plugin_path):
    done = run("examples/sparse_mla_backend.py", plugin_path)
    assert done.returncode == 0, done.stderr
    assert "decode output norm per query" in done.stdout
    assert "prepared and one-shot outputs agree" in done.stdout


def test_hot_path_benchmark_should_time_every_form_on_the_cpu_backend(plugin_path, tmp_path):
    out = tmp_path / "hot_path.json"
    done = run("../../bench/hot_path.py", plugin_path, "--device", "cpu", "--calls", "3", "--reps", "1", "--json",
               str(out))
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["host_us_per_call"]
    assert [(r["h"], r["batch"], r["backend"]) for r in rows] == [(16, 0, "cpu"), (128, 0, "cpu")]
    for r in rows:
        forms = [f"{op} {form}" for op in ("write", "attend") for form in ("one-shot", "arrays", "run")]
        assert all(r[f] > 0 for f in forms)
