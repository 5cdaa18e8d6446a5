"""The comparison benches/servers.sh runs: BIN LLAMA_SERVER LLAMA_CPP_SRC VLLM_PYTHON.

Seconds per image to answer 57 yes/no questions about one image with one model (the trained tiny
Qwen2-VL, f32): the native engine (`probe`, its best of three runs in one process), llama.cpp's
server (the model converted to GGUF f32 by llama.cpp's own converter) and vLLM's CPU server (the
model folder as it is). A server's pass sends the 57 requests as the openai backend does, with
up to N in flight; N is the backend's default (16, `model.concurrency`), then 1, 2, 4 and 8, and
the best is reported beside the default. Each server's passes follow one warm-up pass; each
figure is the best of three passes.
"""
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "fixtures", "vlm", "trained", "qwen2_vl")
IMAGE = os.path.join(ROOT, "fixtures", "sample", "images", "00000001_000.png")
QUESTIONS = [f"Question number {i}: is there a finding of kind {i} in this chest X-ray?" for i in range(1, 58)]
RUNS = 3
DEFAULT_CONCURRENCY = 16
CONCURRENCIES = [DEFAULT_CONCURRENCY, 1, 2, 4, 8]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port, process, seconds=600):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200:
                return
        except OSError:
            pass
        if process.poll() is not None:
            raise SystemExit("a server exited while starting")
        time.sleep(0.5)
    raise SystemExit("a server did not become healthy")


def timings(port, model):
    """{concurrency: best seconds for the 57 questions}."""
    image = base64.b64encode(open(IMAGE, "rb").read()).decode()

    def ask(question):
        body = {"model": model, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}}, {"type": "text", "text": question}]}],
            "max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": 20,
            "chat_template_kwargs": {"enable_thinking": False}}
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        json.load(urllib.request.urlopen(request, timeout=300))

    def one_pass(concurrency):
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(ask, QUESTIONS))
        return time.perf_counter() - start

    one_pass(DEFAULT_CONCURRENCY)  # warm-up
    return {c: min(one_pass(c) for _ in range(RUNS)) for c in CONCURRENCIES}


def serve(command, port, env=None):
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    wait_healthy(port, process)
    return process


def stop(process):
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def main() -> None:
    bin, llama_server, src, vllm_python = sys.argv[1:5]
    work = tempfile.mkdtemp(prefix="bpals-servers-bench-")
    args = [bin, "probe", "--model", MODEL, "--image", IMAGE, "--device", "cpu", "--dtype", "f32", "--repeat", str(RUNS)]
    for q in QUESTIONS:
        args += ["--question", q]
    native = min(json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)["runs_ms"]) / 1000

    for name, extra in (("model.gguf", []), ("mmproj.gguf", ["--mmproj"])):
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "llama_cpp", "convert.py"), src, MODEL,
                        "--outfile", os.path.join(work, name), "--outtype", "f32"] + extra, check=True, capture_output=True)
    port = free_port()
    process = serve([llama_server, "-m", os.path.join(work, "model.gguf"), "--mmproj", os.path.join(work, "mmproj.gguf"),
                     "--host", "127.0.0.1", "--port", str(port), "-t", str(os.cpu_count()), "-c", "8192", "--reasoning-format", "none",
                     "--parallel", str(DEFAULT_CONCURRENCY)], port)
    try:
        llama = timings(port, "model")
    finally:
        stop(process)

    port = free_port()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_CACHE_ROOT=os.path.join(work, "vllm-cache"), HF_HUB_OFFLINE="1")
    process = serve([vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, "--served-model-name", "bench",
                     "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048"],
                    port, env)
    try:
        vllm = timings(port, "bench")
    finally:
        stop(process)

    print(f"one image, {len(QUESTIONS)} questions, trained tiny Qwen2-VL (f32), CPU, {os.cpu_count()} threads; best of {RUNS}")
    print(f"  native engine        {native:8.3f} s per image")
    for name, t in (("llama.cpp server", llama), ("vLLM CPU server", vllm)):
        best = min(t, key=t.get)
        per = ", ".join(f"{c} in flight {t[c]:.3f} s" for c in sorted(t))
        print(f"  {name:20} {t[DEFAULT_CONCURRENCY]:8.3f} s per image at the default {DEFAULT_CONCURRENCY} in flight, "
              f"{t[best]:.3f} s at its best ({best}); {per}")
        print(f"    ratio native / {name}: {native / t[DEFAULT_CONCURRENCY]:.2f} at the default, {native / t[best]:.2f} at its best "
              f"(target <= 1.0)")


if __name__ == "__main__":
    main()
