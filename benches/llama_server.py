"""The comparison benches/llama-server.sh runs: BIN SERVER LLAMA_CPP_SRC."""
import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "fixtures", "vlm", "trained", "qwen2_vl")
IMAGE = os.path.join(ROOT, "fixtures", "sample", "images", "00000001_000.png")
QUESTIONS = [f"Question number {i}: is there a finding of kind {i} in this chest X-ray?" for i in range(1, 58)]
RUNS = 3


def main() -> None:
    bin, server, src = sys.argv[1:4]
    work = tempfile.mkdtemp(prefix="bpals-llama-bench-")
    for name, extra in (("model.gguf", []), ("mmproj.gguf", ["--mmproj"])):
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "llama_cpp", "convert.py"), src, MODEL,
                        "--outfile", os.path.join(work, name), "--outtype", "f32"] + extra, check=True, capture_output=True)

    args = [bin, "probe", "--model", MODEL, "--image", IMAGE, "--device", "cpu", "--dtype", "f32", "--repeat", str(RUNS)]
    for q in QUESTIONS:
        args += ["--question", q]
    probe = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    native = min(probe["runs_ms"]) / 1000

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([server, "-m", os.path.join(work, "model.gguf"), "--mmproj", os.path.join(work, "mmproj.gguf"),
                                "--host", "127.0.0.1", "--port", str(port), "-t", str(os.cpu_count()), "-c", "8192",
                                "--reasoning-format", "none"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if urllib.request.urlopen(url + "/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        image = base64.b64encode(open(IMAGE, "rb").read()).decode()

        def ask(question):
            body = {"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}}, {"type": "text", "text": question}]}],
                "max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": 20,
                "chat_template_kwargs": {"enable_thinking": False}}
            request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            json.load(urllib.request.urlopen(request, timeout=120))

        served = []
        for _ in range(RUNS):
            start = time.perf_counter()
            for q in QUESTIONS:
                ask(q)
            served.append(time.perf_counter() - start)
    finally:
        process.terminate()
        process.wait()
    llama = min(served)
    print(f"one image, {len(QUESTIONS)} questions, trained tiny Qwen2-VL (f32), CPU, {os.cpu_count()} threads; best of {RUNS}")
    print(f"  native engine      {native:8.3f} s per image")
    print(f"  llama.cpp server   {llama:8.3f} s per image")
    print(f"  ratio native / llama.cpp: {native / llama:.2f}  (below 1: the engine is faster)")


if __name__ == "__main__":
    main()
