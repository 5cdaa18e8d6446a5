"""The benchmark scripts that run without the tool: each runs, and measures what it says it does.

Each script's sizes are its module's constants (the full-size models'); the tests set them to the
smallest shapes that still take every code path (2 heads, a few chunks, a handful of tokens) and
run the script's own `main()` in this process, so a CPU proves the plumbing in seconds. The
full-size runs are the benchmarks themselves, on a GPU (benches/gpu-call.sh).

benches/delta_rule_gpu.py replays the engine's delta rule on a GPU; here, on the CPU, its f32
form is held to the delta rule token by token (the recurrence as transformers' reference writes
it), so its timings are of the right arithmetic, and its table is printed for every chunk size.
The engine's kernels it times on a GPU are compiled here for the GPUs they are measured on
(ptxas's report), and its launches of them run here through the stand-in CUDA driver that
executes their source on the CPU (crates/vlm/tests/kernels/), as the engine's own test of them does
(crates/vlm/src/families/qwen3_5/delta_rule.rs).
"""

import contextlib
import ctypes
import importlib.util
import io
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benches" / "delta_rule_gpu.py"


def load_script(path):
    """A bench script of this repository, imported as a module (they are not a package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(bench, *argv):
    """The script's command line (`main()` under `argv`) in this process, at the sizes set on its
    module: what it prints."""
    printed = io.StringIO()
    with mock.patch.object(sys, "argv", [bench.__file__, *map(str, argv)]), contextlib.redirect_stdout(printed):
        bench.main()
    return printed.getvalue()


def load():
    return load_script(SCRIPT)


def small_delta_rule():
    """benches/delta_rule_gpu.py at 2 heads and a prefix of 200 tokens: 4 chunks of 64, 2 of 128."""
    bench = load()
    bench.HEADS, bench.PREFIX, bench.CHUNKS = 2, 200, 4
    return bench


def test_the_delta_rule_bench_computes_the_delta_rule():
    bench = load()
    bench.HEADS = 2  # of 32: each head's recurrence is its own; every token of the full-size prefix
    q, k, v, log_decay, beta = bench.inputs(1, "cpu", seed=3)
    first = torch.randn(1, bench.HEADS, bench.DK, bench.DV) * 0.1
    out = bench.across(bench.prepare(q, k, v, log_decay, beta), first)

    # Token by token: decay, read, correct, write, then read out with the query.
    flat = lambda t: t.reshape(1, bench.HEADS, bench.CHUNKS * bench.CHUNK, *t.shape[4:])
    q_t, k_t, v_t, beta_t = flat(q), flat(k), flat(v), flat(beta)[..., 0]
    step_decay = log_decay.reshape(1, bench.HEADS, -1)
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
    printed = run_main(small_delta_rule(), "--device", "cpu", "--images", "1", "--chunks", "64,128")
    rows = [line for line in printed.splitlines() if line.startswith("| 64 |") or line.startswith("| 128 |")]
    assert len(rows) == 4, printed
    assert all(row.endswith("0.00e+00 |") for row in rows if "across" in row), printed


def load_nvrtc():
    return load_script(ROOT / "crates" / "vlm" / "src" / "cuda_kernels" / "nvrtc.py")


@pytest.mark.skipif(torch.version.cuda is None, reason="this PyTorch is a CPU build: no NVRTC beside it")
def test_the_engines_kernels_compile_for_the_gpus_they_are_measured_on_without_spilling():
    """ptxas's report, made here without a GPU (crates/vlm/src/cuda_kernels/nvrtc.py), for an A100 (sm_80) and
    an H100 or H200 (sm_90): nothing spilled to local memory, and few enough registers for two
    blocks of 256 threads an SM, which their shared memory allows on an H100. A width the kernels'
    tiling cannot take is refused when they compile, not at a launch."""
    nvrtc = load_nvrtc()
    kernels = ROOT / "crates" / "vlm" / "src" / "cuda_kernels"
    kernel_files = [("delta_rule_across.cu", ["-DCHUNK=64", "-DDK=128"]), ("delta_rule_within.cu", ["-DKEY_DIM=128"]),
                    ("linear_inputs.cu", []), ("experts.cu", []), ("gated_norm.cu", []), ("rms_norm.cu", []), ("router.cu", []),
                    ("suffix_attention.cu", []), ("gated_activation.cu", [])]
    assert {name for name, _ in kernel_files} == {p.name for p in kernels.glob("*.cu")}, "every kernel the bundle ships"
    for kernel, defines in kernel_files:
        for arch in ["sm_80", "sm_90"]:
            report = nvrtc.compile_cubin(kernels / kernel, arch, defines)
            assert (report["stack_bytes"], report["spill_stores"], report["spill_loads"]) == (0, 0, 0), report["log"]
            assert 0 < report["registers"] * 256 * 2 <= 65536, report["log"]
    with pytest.raises(RuntimeError, match="must be multiples of 16"):
        nvrtc.compile_cubin(kernels / "delta_rule_across.cu", "sm_90", ["-DCHUNK=60"])
    with pytest.raises(RuntimeError, match="must cover KEY_DIM columns"):
        nvrtc.compile_cubin(kernels / "delta_rule_within.cu", "sm_90", ["-DKEY_DIM=96"])


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """The stand-in CUDA driver (crates/vlm/tests/kernels/), built once for this file's tests (a compile of
    every kernel) and loaded; its tests run one after another, so they may share its state."""
    return stand_in_driver(tmp_path_factory.mktemp("stand-in"))


def stand_in_driver(folder):
    """The stand-in CUDA driver (crates/vlm/tests/kernels/), built into `folder` and loaded."""
    path = folder / "libcuda-standin.so"
    sources = sorted((ROOT / "crates" / "vlm" / "tests" / "kernels").glob("*.cpp"))
    built = subprocess.run(["c++", "-std=c++20", "-O2", "-shared", "-fPIC", "-o", path, *sources],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return ctypes.CDLL(str(path))


class StandInKernel:
    """A kernel of the stand-in CUDA driver (crates/vlm/tests/kernels/), called as the bench calls the kernels
    `torch.cuda._compile_kernel` makes; its launch refuses another block or shared memory size
    than the kernel's source was written for."""

    def __init__(self, driver, name):
        module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
        assert driver.cuModuleLoadData(ctypes.byref(module), b"FAKE-CUBIN") == 0
        assert driver.cuModuleGetFunction(ctypes.byref(self.function), module, name.encode()) == 0
        self.driver, self.name = driver, name

    def set_shared_memory_config(self, size):
        assert self.driver.cuFuncSetAttribute(self.function, 8, size) == 0  # its dynamic shared memory

    def __call__(self, grid, block, args, shared_mem):
        def held_as(a):  # as `torch.cuda._compile_kernel`'s launch passes them: a float as a double
            if isinstance(a, torch.Tensor):
                return ctypes.c_uint64(a.data_ptr())
            return ctypes.c_double(a) if isinstance(a, float) else ctypes.c_int(a)
        held = [held_as(a) for a in args]
        params = (ctypes.c_void_p * len(held))(*(ctypes.addressof(h) for h in held))
        launch = self.driver.cuLaunchKernel
        launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        assert launch(self.function, *grid, *block, shared_mem, None, params, None) == 0, f"{self.name}: launch refused"


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler for the stand-in driver")
def test_the_benchs_launches_of_the_engines_kernels_give_its_f32_form(driver):
    """The bench's operands, grids and shared memory for the two kernels (its own copies of the
    kernels' geometry), run on the CPU through the stand-in driver on a slice of the full-size
    shapes (2 heads, 3 chunks of 64): each kernel alone and both together give the f32 form's
    outputs within 1e-5."""
    bench = load()
    bench.HEADS, bench.CHUNKS = 2, 3
    within, across = StandInKernel(driver, "delta_rule_within"), StandInKernel(driver, "delta_rule_across")
    within.set_shared_memory_config(bench.within_shared_bytes())
    across.set_shared_memory_config(bench.across_shared_bytes())

    q, k, v, log_decay, beta = bench.inputs(1, "cpu", seed=5)
    first = torch.randn(1, bench.HEADS, bench.DK, bench.DV) * 0.1
    prepared = bench.prepare(q, k, v, log_decay, beta)
    reference = bench.across(prepared, first)
    assert reference.abs().max().item() > 0.05  # outputs of a size where a wrong form shows
    fused_prepared = bench.fused_prepare(within, q, k, v, log_decay, beta)
    ways = {
        "prepare, fused kernel": bench.across(fused_prepared, first),
        "across, fused kernel": bench.fused_across(across, prepared, first),
        "both kernels": bench.fused_across(across, fused_prepared, first),
    }
    for way, out in ways.items():
        diff = (out - reference).abs().max().item()
        assert diff < 1e-5, f"{way}: {diff}"


def load_kernels_bench():
    return load_script(ROOT / "benches" / "kernels_gpu.py")


def small_kernels_bench():
    """benches/kernels_gpu.py at small widths: 300 experts (more than a tile's worth of
    assignments), 3 questions of a few tokens after a prefix of 40."""
    bench = load_kernels_bench()
    bench.HIDDEN, bench.EXPERTS, bench.HEADS, bench.DV, bench.PREFIX, bench.QUESTIONS = 64, 300, 2, 64, 40, 3
    bench.MOE_INTERMEDIATE, bench.DENSE_INTERMEDIATE, bench.EPS = 40, 300, 0.5
    return bench


def test_the_kernels_bench_groups_and_norms_as_the_engine_does():
    """benches/kernels_gpu.py's copies of the engine's libtorch forms, held to what they mean: each
    expert's assignments in (token, slot) order, padded with zero rows to whole groups of 8, zero
    rows after the last; the norms as their formulas."""
    bench = load_kernels_bench()
    torch.manual_seed(3)
    tokens, k, experts, width = 9, 2, 5, 16
    x = torch.randn(tokens, width)
    chosen = torch.randint(0, experts - 1, (tokens, k))  # the last expert chosen by none
    rows, ends, output_row = bench.grouping(x, chosen, experts)
    expected, places, start = [], {}, 0
    for e in range(experts):
        mine = [i for i in range(tokens * k) if chosen.flatten()[i] == e]
        for j, i in enumerate(mine):
            places[i] = start + j
        expected += [x[i // k] for i in mine] + [torch.zeros(width)] * (-len(mine) % 8)
        start += -(-len(mine) // 8) * 8
        assert ends[e].item() == start, f"expert {e}"
    expected += [torch.zeros(width)] * (rows.shape[0] - len(expected))
    assert torch.equal(rows, torch.stack(expected))
    assert output_row.tolist() == [places[i] for i in range(tokens * k)]

    weight, z = torch.rand(width) + 0.5, torch.randn(2, 3, 4, width)
    out = torch.randn(2, 4, 3, width).transpose(1, 2)
    normed = out * (out.square().mean(-1, keepdim=True) + 1e-6).rsqrt() * weight
    assert (bench.gated_norm(out, z, weight, 1e-6) - normed * z * z.sigmoid()).abs().max().item() < 1e-5
    assert (bench.rms_norm(x, weight, 1e-6) - x * (x.square().mean(-1, keepdim=True) + 1e-6).rsqrt() * weight).abs().max() < 1e-5


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler for the stand-in driver")
def test_the_kernels_benchs_launches_give_its_libtorch_forms(driver):
    """The bench's operands, grids and shared memory for the experts' and norms' kernels (its own
    copies of the launches in crates/vlm/src/cuda_kernels/), run on the CPU through the stand-in driver at
    small widths: the grouping the same bytes as libtorch's form, the sums and norms within
    rounding. The norms' epsilon large enough to show, had a launch passed it as a double."""
    bench = small_kernels_bench()
    kernel = lambda name: StandInKernel(driver, name)  # noqa: E731
    grouping_kernels = tuple(kernel(f"experts_{n}") for n in ("count", "offsets", "place"))
    weight = torch.rand(bench.DV).to(torch.bfloat16) + 0.5
    norm_weight = torch.rand(bench.HIDDEN) + 0.5
    for m in bench.inputs(2, "cpu", seed=7):
        weights, chosen = bench.fused_router(kernel("router_top_k_bf16"), m["logits"], bench.TOP_K)
        by_rule = m["logits"].neg().sort(stable=True).indices[:, :bench.TOP_K]
        assert torch.equal(chosen, by_rule), "the router's choice, equal logits ordered by expert"
        assert (weights.float() - bench.router(m["logits"], bench.TOP_K)[0].float()).abs().max().item() < 0.01
        by_kernels = bench.fused_grouping(grouping_kernels, m["x"], m["chosen"], bench.EXPERTS)
        by_libtorch = bench.grouping(m["x"], m["chosen"], bench.EXPERTS)
        assert all(torch.equal(a, b) for a, b in zip(by_kernels, by_libtorch)), "the grouping's bytes"
        output_row = by_libtorch[2]
        sums = bench.fused_weighted_sum(kernel("experts_weighted_sum_bf16"), m["both"], output_row, m["weights"])
        reference = bench.weighted_sum_by_bags(m["both"].float(), output_row, m["weights"].float())
        assert (sums.float() - reference).abs().max().item() < 0.05, "the weighted sum, within bf16's rounding"
        gated = bench.fused_gated_norm(kernel("gated_norm_bf16"), m["out"], m["z"], weight, bench.EPS)
        assert (gated.float() - bench.gated_norm(m["out"], m["z"], weight, bench.EPS).float()).abs().max().item() < 0.05
        for key in ("hidden", "mlp"):
            activated = bench.fused_gated_activation(kernel("gated_activation_bf16"), *m[key])
            assert (activated.float() - bench.gated_activation(*m[key]).float()).abs().max().item() < 0.05, key
        normed = bench.fused_rms_norm(kernel("rms_norm_bf16_weight_f32"), m["x"], norm_weight, bench.EPS)
        assert (normed.float() - bench.rms_norm(m["x"], norm_weight, bench.EPS).float()).abs().max().item() < 0.05


def test_the_kernels_bench_prints_a_row_per_part():
    printed = run_main(small_kernels_bench(), "--device", "cpu", "--images", "1")
    rows = [line for line in printed.splitlines() if line.startswith("| ") and "| 1 | libtorch |" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| experts: router", "| experts: grouping", "| experts: weighted sum",
                                                     "| experts: activation", "| MLP: activation", "| gated norm", "| rms norm"]
    assert "not run (no GPU)" in printed, printed


def load_attention_bench():
    return load_script(ROOT / "benches" / "attention_gpu.py")


def small_attention(bench, kind):
    """benches/attention_gpu.py's inputs at small widths: 2 images of 3 questions of 24 tokens
    after a prefix of 40, 4 query heads on 2 key/value heads 24 wide."""
    bench.PREFIX, bench.QUESTIONS = 40, 3
    q, k, v, pk, pv, mask = bench.inputs(2, 4, 2, 24, "cpu", seed=5)
    return [t.to(kind) for t in (q, k, v, pk, pv)] + [mask]


def test_the_attention_benchs_libtorch_form_is_attention_over_prefix_and_question():
    """benches/attention_gpu.py's copy of the engine's form (the fused prefix part, the questions'
    own part, the merge by log-sum-exp) is one attention call over each question's prefix and own
    tokens, causally."""
    bench = load_attention_bench()
    q, k, v, pk, pv, mask = small_attention(bench, torch.float32)
    merged = bench.merged_by_libtorch(q, k, v, *bench.prefix_part(q, pk, pv, 0.3), mask, 0.3)
    rows, heads, s, d = q.shape
    images, kv_heads, p, _ = pk.shape
    per_row = lambda t: t.repeat_interleave(rows // images, 0)  # noqa: E731
    full_k = torch.cat([per_row(pk), k], 2).repeat_interleave(heads // kv_heads, 1)
    full_v = torch.cat([per_row(pv), v], 2).repeat_interleave(heads // kv_heads, 1)
    full_mask = torch.cat([torch.zeros(s, p), mask], 1)
    copied = torch.nn.functional.scaled_dot_product_attention(q, full_k, full_v, attn_mask=full_mask, scale=0.3)
    assert (merged - copied).abs().max().item() < 1e-5


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler for the stand-in driver")
def test_the_attention_benchs_launch_gives_its_libtorch_form(driver):
    """The bench's operands, grid and shared memory for the suffix attention kernel (its own copy of
    the launch in crates/vlm/src/cuda_kernels/suffix_attention.rs), through the stand-in driver: libtorch's
    form in bf16 within rounding, an image's questions alone the same bits; the scale passed as an
    f32 (as a double, a launch would scale by another number)."""
    bench = load_attention_bench()
    kernel = StandInKernel(driver, "suffix_attention_bf16")
    q, k, v, pk, pv, mask = small_attention(bench, torch.bfloat16)
    prefix = bench.prefix_part(q, pk, pv, 0.3)
    by_kernel = bench.merged_by_kernel(kernel, q, k, v, *prefix, mask, 0.3)
    by_libtorch = bench.merged_by_libtorch(q, k, v, *prefix, mask, 0.3)
    assert by_kernel.shape == by_libtorch.shape
    assert (by_kernel.float() - by_libtorch.float()).abs().max().item() < 0.02
    second = slice(bench.QUESTIONS, 2 * bench.QUESTIONS)
    alone = bench.merged_by_kernel(kernel, q[second], k[second], v[second], *bench.prefix_part(q[second], pk[1:2], pv[1:2], 0.3), mask,
                                   0.3)
    assert torch.equal(alone, by_kernel[second])


def test_the_attention_bench_prints_a_row_per_way():
    bench = load_attention_bench()
    bench.PREFIX, bench.QUESTIONS = 40, 3
    printed = run_main(bench, "--device", "cpu", "--images", "1", "--models", "Qwen3-VL-30B-A3B")
    rows = [line.split(" | ")[2] for line in printed.splitlines() if line.startswith("| Qwen3-VL-30B-A3B | 1 |")]
    assert rows == ["prefix part alone (fused kernel)", "libtorch", "kernel not run (no GPU)"], printed
