"""The benchmark scripts that run without the tool: each runs, and measures what it says it does.

benches/delta_rule_gpu.py replays the engine's delta rule on a GPU; here, on the CPU, its f32
form is held to the delta rule token by token (the recurrence as transformers' reference writes
it), so its timings are of the right arithmetic, and its table is printed for every chunk size.
The fused kernel it times on a GPU is compiled here for the GPUs it is measured on (ptxas's
report); the engine's test of it runs its source on the CPU (src/vlm/families/qwen3_5/delta_rule.rs).
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benches" / "delta_rule_gpu.py"


def load():
    spec = importlib.util.spec_from_file_location("delta_rule_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_delta_rule_bench_computes_the_delta_rule():
    bench = load()
    q, k, v, decay, beta = bench.inputs(1, "cpu", seed=3)
    first = torch.randn(1, bench.HEADS, bench.DK, bench.DV) * 0.1
    out = bench.across(bench.prepare(q, k, v, decay, beta), first)

    # Token by token: decay, read, correct, write, then read out with the query.
    flat = lambda t: t.reshape(1, bench.HEADS, bench.CHUNKS * bench.CHUNK, *t.shape[4:])
    q_t, k_t, v_t, beta_t = flat(q), flat(k), flat(v), flat(beta)[..., 0]
    step_decay = torch.diff(decay, dim=-1, prepend=torch.zeros_like(decay[..., :1])).reshape(1, bench.HEADS, -1)
    state, outs = first.clone(), []
    for t in range(q_t.shape[2]):
        state = state * step_decay[:, :, t].exp()[..., None, None]
        read = (state * k_t[:, :, t, :, None]).sum(-2)
        delta = (v_t[:, :, t] - read) * beta_t[:, :, t, None]
        state = state + k_t[:, :, t, :, None] * delta[..., None, :]
        outs.append((state * q_t[:, :, t, :, None]).sum(-2))
    expected = torch.stack(outs, 2)
    diff = (flat(out) - expected).abs().max().item()
    assert diff < 1e-3, diff
    assert expected.abs().max().item() > 0.1  # outputs of a size where a wrong form shows


def test_the_delta_rule_bench_prints_a_row_per_chunk_size_and_way():
    run = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--images", "1", "--chunks", "64,128"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| 64 |") or line.startswith("| 128 |")]
    assert len(rows) == 4, run.stdout
    assert all(row.endswith("0.00e+00 |") for row in rows if "across" in row), run.stdout


def load_nvrtc():
    spec = importlib.util.spec_from_file_location("nvrtc", ROOT / "benches" / "kernels" / "nvrtc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.version.cuda is None, reason="this PyTorch is a CPU build: no NVRTC beside it")
def test_the_fused_kernel_compiles_for_the_gpus_it_is_measured_on_without_spilling():
    """ptxas's report, made here without a GPU (benches/kernels/nvrtc.py), for an A100 (sm_80) and
    an H100 or H200 (sm_90): nothing spilled to local memory, and few enough registers for two
    blocks of 256 threads an SM, which their shared memory allows. A chunk the kernel's tiling
    cannot take is refused when it compiles, not at a launch."""
    nvrtc = load_nvrtc()
    kernel = ROOT / "benches" / "kernels" / "delta_rule_across.cu"
    for arch in ["sm_80", "sm_90"]:
        report = nvrtc.compile_cubin(kernel, arch, ["-DCHUNK=64", "-DDK=128"])
        assert (report["stack_bytes"], report["spill_stores"], report["spill_loads"]) == (0, 0, 0), report["log"]
        assert 0 < report["registers"] * 256 * 2 <= 65536, report["log"]
    with pytest.raises(RuntimeError, match="must be multiples of 16"):
        nvrtc.compile_cubin(kernel, "sm_90", ["-DCHUNK=60"])
