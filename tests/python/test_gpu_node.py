"""The GPU-node bundle's runner (scripts/gpu-node/run), around the project's debug binary: the
bundle's folder assembled by scripts/gpu-bundle --binary --unpacked, its CPU references made,
then the runner's small CPU steps as a node would run them, and its refusals: a mismatched
PyTorch, a Python without torch, --device cuda with no GPU.

The release bundle for PyTorch 2.11 is built and proven by benches/gpu-node-cpu.sh, outside the
suite (a second release build and two PyTorch installs; see docs/src/publisher/gpu-nodes.md).
"""
import importlib.machinery
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BPALS_BIN", os.path.join(ROOT, "target", "debug", "bpals-release"))
TORCH = torch.__version__.split("+")[0]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle")
    # The bundle makes its MoE fixture with the project's Python (BPALS_VENV): this one.
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}", BPALS_VENV=os.path.dirname(os.path.dirname(sys.executable)))
    run = subprocess.run([os.path.join(ROOT, "scripts", "gpu-bundle"), "--torch", TORCH, "--binary", BIN, "--unpacked", "--out", str(out)],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    folder = out / f"bpals-release-gpu-torch{TORCH}"
    assert folder.is_dir() and os.access(folder / "run", os.X_OK), run.stderr
    return folder


def runner(bundle, *args, python=sys.executable):
    return subprocess.run([python, str(bundle / "run"), *map(str, args)], capture_output=True, text=True)


def test_the_bundle_carries_its_references_and_what_it_runs(bundle):
    meta = json.loads((bundle / "bundle.json").read_text())
    assert meta["torch"] == TORCH and meta["format"] == "bpals-gpu-bundle/1"
    parity = json.loads((bundle / "refs" / "parity.json").read_text())
    # The suite's Python has transformers, so the bundle makes its mixture-of-experts fixture too.
    assert set(parity) == {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "trained/qwen2_vl", "gemma4/gemma4_moe"}
    for family in parity.values():
        assert len(family["f32"]) == 2 and all(len(questions) == 3 for questions in family["f32"].values())
        assert 0 < family["cpu_bf16_diff"]["logit"] < 1, "bf16 on the CPU is near f32, and not equal to it"
    assert (bundle / "refs" / "s1a-cpu" / "manifest.json").is_file()
    assert not list(bundle.glob("fixtures/vlm/**/goldens.safetensors")), "the references are the engine's CPU values, not goldens"
    cubins = sorted(bundle.glob("kernels/*.cubin"))
    kernel_files = ("delta_rule_across", "delta_rule_within", "experts", "gated_activation", "gated_norm", "linear_inputs", "rms_norm",
                    "router", "suffix_attention")
    assert [p.name for p in cubins] == [f"{k}.sm_{a}.cubin" for k in kernel_files for a in (100, 80, 90)]
    assert all(p.read_bytes()[:4] == b"\x7fELF" for p in cubins), "a cubin is an ELF image"


def test_the_engines_own_kernels_are_asked_for_by_a_flag(bundle, tmp_path):
    """`--kernels` hands the engine the bundle's cubins (a CPU runs none of them) and says so in the
    report; a bundle without them is refused before anything is written."""
    run = runner(bundle, "--device", "cpu", "--out", tmp_path / "out", "--quick", "--steps", "prep", "--kernels")
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((tmp_path / "out" / "report.json").read_text())["kernels"] is True
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy, symlinks=True, ignore=shutil.ignore_patterns("kernels"))
    run = runner(copy, "--device", "cpu", "--out", tmp_path / "refused", "--quick", "--kernels")
    assert run.returncode == 2 and "--kernels:" in run.stderr and "holds no cubins" in run.stderr, run.stderr
    assert not (tmp_path / "refused").exists()
    run = runner(copy, "--device", "cpu", "--out", tmp_path / "refused", "--quick", "--steps", "throughput", "--ways", "shared+kernels:1")
    assert run.returncode == 2 and "--ways" in run.stderr and "holds no cubins" in run.stderr, run.stderr
    assert not (tmp_path / "refused").exists()


def test_a_way_with_the_engines_own_kernels_runs_beside_libtorchs_in_one_call(bundle, tmp_path):
    """`--ways shared:1,shared+kernels:1`: each model once by libtorch's forms and once with the
    engine's kernels asked for (on a CPU they run nowhere, so only the plumbing is proven here),
    the second's time against the first's reported, and a column of its own in the tables."""
    out = tmp_path / "out"
    run = runner(bundle, "--device", "cpu", "--quick", "--steps", "throughput", "--ways", "shared:1,shared+kernels:1", "--out", out)
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((out / "report.json").read_text())["steps"]["throughput"]["results"]
    assert [(r["prefix_attention"], r["images_per_pass"], r["kernels"]) for r in results] == [("shared", 1, False), ("shared", 1, True)]
    assert "time_ratio_to_libtorch" not in results[0] and results[1]["time_ratio_to_libtorch"] > 0
    assert "of libtorch's time" in run.stdout
    assert "| shared, 1 a pass | shared + own kernels, 1 a pass |" in (out / "throughput.md").read_text()


def test_the_small_cpu_steps_pass_and_write_the_report(bundle, tmp_path):
    out = tmp_path / "out"
    run = runner(bundle, "--device", "cpu", "--out", out, "--quick")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["ok"] and list(report["steps"]) == ["parity", "demo", "throughput", "prep"]
    parity = report["steps"]["parity"]["results"]
    f32 = [r for r in parity if r["dtype"] == "f32"]
    assert len(f32) == 6 and all(r["max_logit_diff"] <= 1e-5 for r in f32), "the same binary and libtorch on the same CPU"
    assert all(0 < r["max_logit_diff"] <= r["logit_tolerance"] for r in parity if r["dtype"] == "bf16")
    demo = report["steps"]["demo"]
    assert demo["rows"] == demo["same_class"] == 776 and demo["max_abs_p_yes_change"] == 0.0, demo
    # Old beside new: the prefix copied per question, then held once, then held once with two
    # images a pass, whose scores are each image's alone, bit for bit; the fused kernel likewise.
    results = report["steps"]["throughput"]["results"]
    assert [(r["prefix_attention"], r["images_per_pass"]) for r in results] == [
        ("copied", 1), ("shared", 1), ("shared", 2), ("fused", 2)]
    assert all(r["time_ratio_to_copied"] > 0 for r in results[1:])
    # Each names the engine's arithmetic it measured (a CPU run here).
    revision = results[0]["arithmetic"]
    assert revision.startswith("cpu-") and {r["arithmetic"] for r in results} == {revision}
    assert f"arithmetic {revision})" in run.stdout
    assert results[2]["invariance"]["identical_padded"] and results[3]["invariance"]["identical_padded"]
    assert report["steps"]["throughput"]["batch_invariant"]
    # Each run says where an image's time went, stage by stage, and the fused kernel how far its
    # logits are from the products' (f32 on a CPU: rounding only).
    for r in results:
        assert [s["stage"] for s in r["stages"]] == ["vision", "prefix", "questions", "answers"]
        assert sum(s["ms_per_image"] for s in r["stages"]) <= r["device_ms_per_image"] * 1.001
    assert results[3]["max_abs_logit_diff_to_shared"] < 1e-4 and results[2]["max_abs_logit_diff_to_shared"] is None
    assert "per image: vision" in run.stdout and "the fused kernel's logits within" in run.stdout
    # And part by part, from one more pass clocked around each part of every layer.
    for r in results:
        parts = {p["part"]: p for p in r["parts"]["parts"]}
        assert {"vision tower", "attention", "mlp"} <= parts.keys(), parts.keys()
        assert ("attention: questions over the prefix" in parts) == (r["prefix_attention"] != "copied")
        assert parts["attention"]["calls"] == 2 and parts["vision tower"]["ms_per_image"] > 0
    assert "parts per image (a pass clocked part by part" in run.stdout and "attention " in run.stdout
    # The tables to paste: one row per model, a column per way, and the fastest way's stages.
    tables = (out / "throughput.md").read_text()
    assert "| qwen2_5_vl_7b | " in tables and "| model | copied, 1 a pass | shared, 1 a pass | shared, 2 a pass | fused, 2 a pass |" in tables
    assert "| model (fastest way) | vision | prefix | questions | answers |" in tables and tables in run.stdout
    throughput = report["steps"]["throughput"]["results"][0]
    assert throughput["config"] == "qwen2_5_vl_7b" and throughput["text_layers"] == 1 and throughput["images_per_second"] > 0
    prep = report["steps"]["prep"]
    assert prep["resized"] == [1036, 1036] and prep["runs"][0]["threads"] == 1 and prep["runs"][0]["images_per_second"] > 0
    assert "logits within" in run.stdout and run.stdout.rstrip().endswith("report.json")
    # Ran and passed is one thing, met the targets another: on a CPU there is no peak to judge by.
    assert report["finished"] and report["steps"]["throughput"]["met_targets"] is None
    assert "throughput targets not judged" in run.stdout.strip().splitlines()[-1]


def test_a_pytorch_of_another_version_is_refused_in_one_line(bundle, tmp_path):
    copy = tmp_path / "other"
    shutil.copytree(bundle, copy, symlinks=True, ignore=shutil.ignore_patterns("fixtures", "refs", "bin"))
    meta = json.loads((copy / "bundle.json").read_text())
    meta["torch"] = "2.11.0"
    (copy / "bundle.json").write_text(json.dumps(meta))
    run = runner(copy, "--device", "cpu", "--out", tmp_path / "out")
    assert run.returncode == 2 and run.stdout == "", run.stdout
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: this bundle's engine was built for PyTorch 2.11.0"), run.stderr
    assert f"has PyTorch {torch.__version__}" in lines[0] and f"scripts/gpu-bundle --torch {TORCH}" in lines[0]


def test_a_python_without_torch_and_a_missing_gpu_are_refused_in_one_line(bundle, tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    run = runner(bundle, "--device", "cpu", "--out", tmp_path / "out", python=bare / "bin" / "python")
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "cannot import torch" in run.stderr and f"PyTorch {TORCH}" in run.stderr
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    run = runner(bundle, "--device", "cuda", "--out", tmp_path / "out")
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "--device cuda: PyTorch" in run.stderr and "sees no CUDA device" in run.stderr
    assert not (tmp_path / "out").exists(), "nothing is written before the device is known"


def load_runner(bundle):
    """The runner as a module, for its helpers (it is a script without a .py name)."""
    loader = importlib.machinery.SourceFileLoader("gpu_node_runner", str(bundle / "run"))
    spec = importlib.util.spec_from_loader("gpu_node_runner", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_nothing_to_run_is_refused_before_anything_is_written(bundle, tmp_path):
    for args in (["--steps", ""], ["--steps", " , "], ["--steps", "throughput", "--configs", ""]):
        run = runner(bundle, "--device", "cpu", "--out", tmp_path / "out", *args)
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, (args, run.stderr)
        assert "names no" in run.stderr, run.stderr
    assert not (tmp_path / "out").exists()


def test_ways_pick_the_throughput_runs_and_a_malformed_one_is_refused(bundle, tmp_path):
    for bad in ("shared", "fast:8", "fused:0", "shared:8,", "fused+fast:8", "fused+:8", "fused/pad:8", "fused/:8", "fused/deduplicated:8"):
        run = runner(bundle, "--device", "cpu", "--quick", "--steps", "throughput", "--ways", bad, "--out", tmp_path / "bad")
        assert run.returncode == 2 and "--ways" in run.stderr and "PATH[+kernels][/padded|/packed]:N" in run.stderr, (bad, run.stderr)
    run = runner(bundle, "--device", "cpu", "--quick", "--steps", "throughput", "--ways", "copied/padded:1", "--out", tmp_path / "bad")
    assert run.returncode == 2 and "the copied path always pads" in run.stderr, run.stderr
    assert not (tmp_path / "bad").exists()
    # One image a pass: the ways asked for alone (the invariance check, which a pass of several
    # adds, is the test above's), the questions' rows padded (the old layout) and each question's
    # tokens its own beside how releases score them, which says its time against the others'.
    out = tmp_path / "out"
    ways = "shared/padded:1,shared/packed:1,shared:1"
    run = runner(bundle, "--device", "cpu", "--quick", "--steps", "throughput", "--ways", ways, "--out", out)
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((out / "report.json").read_text())["steps"]["throughput"]["results"]
    assert [(r["prefix_attention"], r["images_per_pass"], r["suffix_rows"]) for r in results] == [
        ("shared", 1, "padded"), ("shared", 1, "packed"), ("shared", 1, "deduplicated")]
    assert all(r.get("invariance") is None and r["images_per_second"] > 0 and r["question_tokens"] == [4, 8] for r in results)
    assert results[2]["time_ratio_to_padded"] > 0 and "time_ratio_to_padded" not in results[0]
    assert results[2]["time_ratio_to_packed"] > 0 and "time_ratio_to_packed" not in results[1]
    assert "of the padded rows' time (shared, rows padded, 1 a pass)" in run.stdout
    assert "of the time with each question's tokens its own (shared, each question's tokens its own, 1 a pass)" in run.stdout
    table = "| model | shared, rows padded, 1 a pass | shared, each question's tokens its own, 1 a pass | shared, 1 a pass |"
    assert table in (out / "throughput.md").read_text()


def test_the_out_folder_is_the_runners_own(bundle, tmp_path):
    foreign = tmp_path / "someone-elses"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    run = runner(bundle, "--device", "cpu", "--quick", "--steps", "prep", "--out", foreign)
    assert run.returncode == 2 and "is not a folder this runner made" in run.stderr, run.stderr
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    link = tmp_path / "link"
    link.symlink_to(foreign)
    run = runner(bundle, "--device", "cpu", "--quick", "--steps", "prep", "--out", link)
    assert run.returncode == 2 and "is a symbolic link" in run.stderr, run.stderr


def test_a_planted_link_is_replaced_not_followed(bundle, tmp_path):
    out = tmp_path / "out"
    assert runner(bundle, "--device", "cpu", "--quick", "--steps", "prep", "--out", out).returncode == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("not the runner's")
    (out / "report.json").unlink()
    (out / "report.json").symlink_to(victim)
    run = runner(bundle, "--device", "cpu", "--quick", "--steps", "prep", "--out", out)
    assert run.returncode == 0, run.stdout + run.stderr
    assert victim.read_text() == "not the runner's"
    assert not (out / "report.json").is_symlink() and json.loads((out / "report.json").read_text())["finished"]


def test_a_step_that_breaks_fails_alone_and_the_report_is_written(bundle, tmp_path):
    """An engine answering something that is not JSON: the step fails with the cause, the next
    step still runs, and the report says both and that the run finished."""
    copy = tmp_path / "broken"
    shutil.copytree(bundle, copy, symlinks=True, ignore=shutil.ignore_patterns("fixtures", "refs", "bin"))
    (copy / "bin").mkdir()
    (copy / "bin" / "bpals-release").write_text("#!/bin/sh\necho 'not json'\n")
    (copy / "bin" / "bpals-release").chmod(0o755)
    out = tmp_path / "out"
    run = runner(copy, "--device", "cpu", "--quick", "--steps", "prep,throughput", "--out", out)
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["finished"] and not report["ok"] and list(report["steps"]) == ["prep", "throughput"]
    assert all("JSONDecodeError" in step["error"] for step in report["steps"].values()), report["steps"]
    assert run.stdout.strip().splitlines()[-1].startswith("FAILED")


def test_a_difference_that_is_not_a_number_fails(bundle):
    run = load_runner(bundle)
    d = run.worst({"a.png": [(float("nan"), 0.0, 0.5)]}, {"a.png": [(1.0, 0.0, 0.5)]})
    assert d["logit"] == math.inf and not d["logit"] <= 1e-3
    assert run.strict_json({"max_logit_diff": math.inf, "rows": [float("nan")]}) == {"max_logit_diff": "inf", "rows": ["nan"]}
