"""llama.cpp's server as a real OpenAI-compatible backend.

`llama-server` is built from the llama.cpp source PyPI's pinned llama-cpp-python sdist carries
(scripts/build-llama-server.sh; scripts/test passes its path in BPALS_LLAMA_SERVER). The trained
tiny Qwen2-VL (fixtures/vlm/trained/qwen2_vl) is converted to GGUF, its vision projector too, by
the converter in the same source tree (tests/llama_cpp/convert.py), and served on a loopback
port. Then:

- what the server honours, asked directly: first-token logprobs with an image, greedy answers,
  `logit_bias`, `chat_template_kwargs`;
- `build` with `backend: openai`, `server: llama-cpp` against it completes and verifies, and its
  scores agree with the native engine's on the same model within the tolerance below;
- the server process is stopped by its pid and none is left.
"""
import base64
import json
import math
import os
import subprocess
import sys
import time
import urllib.request

import pyarrow.parquet as pq
import pytest
from helpers import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BPALS_BIN", os.path.join(ROOT, "target", "debug", "bpals-release"))
SERVER = os.environ.get("BPALS_LLAMA_SERVER")
MODEL = os.path.join(ROOT, "fixtures", "vlm", "trained", "qwen2_vl")
SAMPLE_IMAGE = os.path.join(ROOT, "fixtures", "sample", "images", "00000001_000.png")
SERVED_NAME = "bpals/trained-tiny-qwen2-vl"
IMAGES = 160

# Agreement with the native engine. The server runs ggml's kernels on the GGUF weights (f32 here)
# and its own image preprocessing, so equality is not expected. Measured here on 194 rows
# (160 images, every question): largest p_yes difference 0.0018, trust classes all equal. The
# bounds leave room for another CPU's kernels (ggml is built for the machine it runs on) and for
# a row whose agreement sits within a hair of a class threshold.
MAX_P_YES_DIFFERENCE = 0.01
MIN_TRUST_CLASS_AGREEMENT = 0.98

pytestmark = pytest.mark.skipif(not SERVER, reason="BPALS_LLAMA_SERVER is not set (scripts/test builds llama-server)")


def answer_ids():
    vocab = json.load(open(os.path.join(MODEL, "tokenizer.json")))["model"]["vocab"]
    return vocab["Yes"], vocab["No"]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    out = tmp_path_factory.mktemp("gguf")
    src = os.environ.get("BPALS_LLAMA_CPP_SRC") or subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "fetch-llama-cpp-sdist.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    convert = os.path.join(ROOT, "tests", "llama_cpp", "convert.py")
    for name, extra in (("model.gguf", []), ("mmproj.gguf", ["--mmproj"])):
        subprocess.run([sys.executable, convert, src, MODEL, "--outfile", str(out / name), "--outtype", "f32"] + extra,
                       check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def server(gguf, tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("server") / "llama-server.log", "w")
    # One thread: the suite runs other tests beside this one, and ggml's threads wait for each
    # other at every operation by spinning, so two on two busy cores waste what they wait for.
    process = subprocess.Popen(
        [SERVER, "-m", str(gguf / "model.gguf"), "--mmproj", str(gguf / "mmproj.gguf"), "--host", "127.0.0.1",
         "--port", str(port), "--alias", SERVED_NAME, "-t", "1", "-c", "8192", "--reasoning-format", "none"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(url + "/health", timeout=1).status == 200:
                    break
            except OSError:
                pass
            assert process.poll() is None, f"llama-server exited: {open(log.name).read()[-2000:]}"
            time.sleep(0.2)
        else:
            raise AssertionError("llama-server did not become healthy in 120 s")
        yield url + "/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        # Stopped by its pid, and no other llama-server of this test's model left behind.
        assert not os.path.exists(f"/proc/{process.pid}") or open(f"/proc/{process.pid}/stat").read().split()[2] == "Z"
        left = [p for p in os.listdir("/proc") if p.isdigit() and str(gguf) in _cmdline(p)]
        assert not left, f"llama-server processes left: {left}"


def _cmdline(pid):
    try:
        return open(f"/proc/{pid}/cmdline").read()
    except OSError:
        return ""


def chat(url, question, **extra):
    image = base64.b64encode(open(SAMPLE_IMAGE, "rb").read()).decode()
    body = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
            {"type": "text", "text": question}]}],
        "max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": 20,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    body.update(extra)
    request = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(request, timeout=60))


def test_the_server_answers_with_first_token_logprobs_greedily_and_honours_logit_bias(server):
    question = "Is there a pleural effusion in this chest X-ray?"
    first = chat(server, question)
    entries = first["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert len(entries) == 20, "top_logprobs is honoured with an image"
    listed = {t["token"]: t["logprob"] for t in entries}
    # Greedy: the same answer token again. The logprobs are not bit-identical between two equal
    # requests (measured: about 1e-6 apart; the server reuses cached prompt state), so a
    # release served by llama.cpp is not byte-reproducible, and rebuild --audit reports drift.
    again = chat(server, question)
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    relisted = {t["token"]: t["logprob"] for t in again["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}
    assert all(abs(relisted[t] - listed[t]) < 1e-4 for t in ("Yes", "No") if t in listed)
    yes, no = answer_ids()
    # An equal bias on both answer tokens lifts them to the top and keeps their difference.
    biased = chat(server, question, logit_bias={str(yes): 100, str(no): 100})
    top = {t["token"]: t["logprob"] for t in biased["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}
    assert biased["choices"][0]["message"]["content"] in ("Yes", "No"), "logit_bias is honoured"
    if "Yes" in listed and "No" in listed:
        assert abs((top["Yes"] - top["No"]) - (listed["Yes"] - listed["No"])) < 1e-3


def shard_scores(release):
    """(image, label) -> (per-question p_yes list, trust class)."""
    out = {}
    for name in sorted(os.listdir(release / "data")):
        if not name.endswith(".parquet"):
            continue
        table = pq.read_table(release / "data" / name,
                              columns=["image_index", "label", "question_logit_yes", "question_logit_no", "trust_class"])
        for row in table.to_pylist():
            p = [1 / (1 + math.exp(n - y)) for y, n in zip(row["question_logit_yes"], row["question_logit_no"])]
            out[(row["image_index"], row["label"])] = (p, row["trust_class"])
    return out


def test_a_build_against_llama_server_verifies_and_agrees_with_the_native_engine(server, tmp_path):
    yes, no = answer_ids()
    base = tmp_path / "native.yaml"
    base.write_text(f"extends: {os.path.join(ROOT, 'specs', 's1a.yaml')}\n"
                    f"selection:\n  curated_images: {IMAGES}\n  expected_rows: null\n")
    served = tmp_path / "served.yaml"
    served.write_text(f"extends: {base}\nmodel:\n  backend: openai\n  id: {SERVED_NAME}\n  revision: gguf-f32\n"
                      f"  weight_license: apache-2.0\n  demo_weights: synthetic\n  endpoint: {server}\n  family: qwen2_vl\n"
                      f"  server: llama-cpp\n  answer_token_ids: [{yes}, {no}]\n  concurrency: 2\n  timeout_s: 60\n")
    for spec, out in ((base, "native"), (served, "served")):
        subprocess.run([BIN, "build", str(spec), "--out", str(tmp_path / out), "--cache-dir", str(tmp_path / f"cache-{out}"),
                        "--no-progress"], check=True, capture_output=True)
    subprocess.run([BIN, "verify", str(tmp_path / "served")], check=True, capture_output=True)
    lock = json.load(open(tmp_path / "served" / "build.lock"))
    assert "llama-cpp" in json.dumps(lock) and "logit_bias" in json.dumps(lock)

    native, llama = shard_scores(tmp_path / "native"), shard_scores(tmp_path / "served")
    assert native.keys() == llama.keys() and native
    worst = max(abs(a - b) for k in native for a, b in zip(native[k][0], llama[k][0]))
    agree = sum(native[k][1] == llama[k][1] for k in native) / len(native)
    print(f"llama-server against the native engine on {len(native)} rows: largest p_yes difference {worst:.4g}, "
          f"trust-class agreement {agree:.4f}")
    assert worst <= MAX_P_YES_DIFFERENCE, worst
    assert agree >= MIN_TRUST_CLASS_AGREEMENT, agree
