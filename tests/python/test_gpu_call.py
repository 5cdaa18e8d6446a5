"""benches/gpu-call.sh, the one call a lent GPU machine gets, run here without a GPU: it unpacks a
bundle archive as scripts/gpu-bundle packs it (a tar.xz of one bpals-release-gpu-torch*/ folder)
with Python's tarfile, gives each step its command and time limit, and writes its summary.

The bundle here is a stand-in made by this test, and so is the Python the call is given: it
exits at once for the bench steps (PyTorch scripts that need a GPU), records the runner's calls,
and runs anything else (the unpacking) with this interpreter.
"""

import os
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CALL = os.path.join(ROOT, "benches", "gpu-call.sh")

def archive_of(tmp_path, name, files):
    """TMP/NAME.tar.xz holding one folder NAME of `files` (name -> text), packed as
    scripts/gpu-bundle packs a bundle."""
    folder = tmp_path / "stage" / name
    folder.mkdir(parents=True)
    for file, text in files.items():
        (folder / file).write_text(text)
    archive = tmp_path / f"{name}.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(folder, arcname=name)
    return archive


def stand_in_bundle(tmp_path):
    """A bundle laid out as scripts/gpu-bundle's, with a runner the stand-in Python never runs."""
    return archive_of(tmp_path, "bpals-release-gpu-torch2.11.0", {"run": "#!/usr/bin/env python3\n"})


def stand_in_python(tmp_path):
    """PYTHON for the call: the bench steps exit at once; a runner's call is kept in `calls`
    (the runner's path, then its arguments); anything else (the unpacking) runs for real."""
    path = tmp_path / "python"
    path.write_text(
        "#!/bin/sh\n"
        'case "$1" in */benches/*_gpu.py) exit 0 ;; */run) echo "$@" >> "$(dirname "$0")/calls"; exit 0 ;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    path.chmod(0o755)
    return path


def call(archive, out, python, *extra):
    env = dict(os.environ, PYTHON=str(python))
    return subprocess.run(["bash", CALL, str(archive), str(out), *extra], capture_output=True, text=True, env=env, timeout=120)


def test_the_call_unpacks_an_xz_bundle_and_runs_each_step_with_its_arguments(tmp_path):
    archive, python, out = stand_in_bundle(tmp_path), stand_in_python(tmp_path), tmp_path / "out"
    done = call(archive, out, python)
    assert done.returncode == 0, done.stderr
    summary = (out / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == ["attention", "kernels", "delta_rule", "parity", "throughput"]
    assert all(": exit 0 after" in line for line in summary), summary
    parity, throughput = (tmp_path / "calls").read_text().splitlines()
    runner = f"{out}/node/bpals-release-gpu-torch2.11.0/run"
    assert parity == f"{runner} --device cuda --kernels --steps parity --out {out}/parity"
    assert throughput.startswith(f"{runner} --device cuda --steps throughput --out {out}/throughput ")
    assert "--ways fused/padded:8,fused/packed:8,fused:8,fused+kernels:8" in throughput
    # Gemma 4 31B last: a step stopped at its limit loses only what it had not reached.
    assert throughput.split("--configs ")[1].split()[0].endswith(",gemma4_31b")
    # The unpacked folder goes when the call ends.
    assert not (out / "node").exists()


def test_a_spent_budget_runs_no_step_and_says_so(tmp_path):
    archive, python, out = stand_in_bundle(tmp_path), stand_in_python(tmp_path), tmp_path / "out"
    done = call(archive, out, python, "--budget", "10")
    assert done.returncode == 0, done.stderr
    summary = (out / "summary.txt").read_text().splitlines()
    assert len(summary) == 5 and all(line.endswith(": not run (the budget is spent)") for line in summary), summary
    assert not (tmp_path / "calls").exists()


def test_a_file_that_is_not_a_bundle_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bundle.tar.xz"
    bad.write_bytes(b"not an archive")
    done = call(bad, tmp_path / "out", sys.executable)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == f"error: {bad}: not a bundle archive"
    assert not (tmp_path / "out" / "summary.txt").exists()


def test_an_archive_without_a_runner_is_refused(tmp_path):
    archive = archive_of(tmp_path, "something-else", {"README": "no runner here\n"})
    done = call(archive, tmp_path / "out", sys.executable)
    assert done.returncode == 2
    assert "holds no runner (bpals-release-gpu-torch*/run)" in done.stderr
