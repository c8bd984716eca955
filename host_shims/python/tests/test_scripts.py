"""The example backend and the hot-path microbenchmark, run as a user runs them (CPU backend here;
the benchmark's PyTorch CUDA part runs on the GPU machine). Where PyTorch is installed both also take
the torch operators' path (nvfp4_mla.torch_ops), and these tests check it; where it is not, they check
that the scripts say so."""
import importlib.util
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.dirname(HERE)
TORCH = importlib.util.find_spec("torch") is not None  # what the scripts, run by this interpreter, find


def run(script, plugin_path, *args):
    env = dict(os.environ, NVFP4_MLA_PLUGIN=plugin_path, PYTHONPATH=SHIM)
    return subprocess.run([sys.executable, os.path.join(SHIM, script), *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_example_backend_should_run_a_decode_step_through_the_prepared_calls(plugin_path):
    done = run("examples/sparse_mla_backend.py", plugin_path)
    assert done.returncode == 0, done.stderr
    assert "decode output norm per query" in done.stdout
    assert "prepared and one-shot outputs agree" in done.stdout
    if TORCH:  # (4): the same step as torch ops under torch.compile(fullgraph=True)
        assert "compiled torch ops and prepared outputs agree" in done.stdout
    else:
        assert "PyTorch is not installed: the compiled path (nvfp4_mla.torch_ops) is not shown" in done.stdout


def test_hot_path_benchmark_should_time_every_form_on_the_cpu_backend(plugin_path, tmp_path):
    out = tmp_path / "hot_path.json"
    done = run("../../bench/hot_path.py", plugin_path, "--device", "cpu", "--calls", "3", "--reps", "1", "--json",
               str(out))
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["host_us_per_call"]
    assert [(r["h"], r["batch"], r["backend"]) for r in rows] == [(16, 0, "cpu"), (128, 0, "cpu")]
    forms = [f"{op} {form}" for op in ("write", "attend") for form in ("one-shot", "arrays", "run")]
    if TORCH:
        forms += ["write op", "attend op", "attend op new"]
    else:
        assert "(torch ops not measured: PyTorch is not installed)" in done.stdout
    for r in rows:
        assert all(r[f] > 0 for f in forms)
