#!/usr/bin/env python3
"""Finds which libtorch CPU kernels give other bits on another processor.

The engine's logits must be the same bits on every x86-64 machine with AVX2. When they are not,
this script says where they part: it runs a probe natively and under Debian's `qemu-x86_64`
presenting other CPU models (an Intel Haswell, an AMD EPYC Rome: the vendor string, the cache
sizes and the instruction sets a library dispatches on all change), and prints, for each probe
step, whether its bits equal the native run's.

  cross-cpu.py kernels                          # each kernel the engine calls, on small inputs
  cross-cpu.py layers MODEL_DIR IMAGE QUESTION  # every module's output of a model (transformers)
  cross-cpu.py compare [--cpus A,B] kernels|layers ...   # the same, natively and under each CPU

The probes run in the PyTorch of scripts/torch-env.sh's venv, whose libtorch the engine links,
under the kernel pins the engine sets (crates/vlm/src/cpu_kernels.rs) unless the environment sets them
otherwise: `MKL_CBWR=AVX2,STRICT cross-cpu.py compare kernels` shows what the old pin did.
Emulation is about 30 times slower than the host: `layers` on a tiny fixture takes a minute.
"""
import argparse
import hashlib
import os
import subprocess
import sys

# The engine's pins (crates/vlm/src/cpu_kernels.rs: PINS). Kept here by hand; tests/cross_cpu.rs checks
# that the two lists agree.
PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
DEFAULT_CPUS = ["Haswell-v4", "EPYC-Rome-v2"]


def digest(t) -> str:
    import torch

    t = t.detach().contiguous()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()[:12]


def kernels() -> list:
    """(name, digest) for each kernel family the engine's models call on the CPU."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    a, b = r(97, 300), r(300, 211)
    q, k, v = r(1, 4, 37, 32), r(1, 4, 37, 32), r(1, 4, 37, 32)
    out = {
        "matmul f32": a @ b,
        "matmul f32 large": r(512, 768) @ r(768, 1024),
        "matmul f32 256 x 256 (a merger's)": r(256, 256) @ r(256, 256),
        "linear f32 256 x 256 (a merger's)": F.linear(r(289, 256), r(256, 256), r(256)),
        "matrix-vector f32": r(1, 300) @ b,
        "linear f32": F.linear(a, b.t().contiguous(), r(211)),
        "linear f32, one row": F.linear(r(1, 300), b.t().contiguous()),
        "batched matmul": torch.bmm(r(8, 33, 64), r(8, 64, 45)),
        "conv3d (patch embed)": F.conv3d(r(2, 3, 2, 28, 28), r(16, 3, 2, 14, 14), stride=(2, 14, 14)),
        "conv2d (patch embed)": F.conv2d(r(2, 3, 32, 32), r(16, 3, 16, 16), stride=16),
        "softmax": torch.softmax(a, -1),
        "log_softmax": torch.log_softmax(a, -1),
        "layer_norm": F.layer_norm(a, (300,), r(300), r(300)),
        "rms (pow, mean, rsqrt)": a * (a.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt(),
        "gelu tanh": F.gelu(a, approximate="tanh"),
        "gelu erf": F.gelu(a),
        "silu": F.silu(a),
        "sigmoid": torch.sigmoid(a),
        "exp": a.exp(),
        "log": a.abs().log(),
        "tanh": a.tanh(),
        "sin": (a * 40).sin(),
        "cos": (a * 40).cos(),
        "pow tensor": torch.tensor(10000.0).pow(torch.arange(0, 64, 2) / 64),
        "sum": a.sum(-1),
        "scaled_dot_product_attention": F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "bicubic antialias": F.interpolate(torch.rand(1, 3, 50, 70, generator=g), size=(64, 64), mode="bicubic", antialias=True),
        "bilinear": F.interpolate(r(1, 8, 12, 12), size=(17, 17), mode="bilinear", align_corners=False),
        "avg_pool2d": F.avg_pool2d(r(1, 8, 12, 12), 3),
    }
    for kind in [torch.bfloat16, torch.float16]:
        name = "bf16" if kind == torch.bfloat16 else "f16"
        ak, bk = a.to(kind), b.to(kind)
        out[f"matmul {name}"] = ak @ bk
        out[f"linear {name}"] = F.linear(ak, bk.t().contiguous())
        out[f"softmax {name}"] = torch.softmax(ak, -1)
        out[f"sdpa {name}"] = F.scaled_dot_product_attention(q.to(kind), k.to(kind), v.to(kind), is_causal=True)
        out[f"silu {name}"] = F.silu(ak)
        out[f"exp {name}"] = ak.exp()
    return [(name, digest(t)) for name, t in out.items()]


def layers(model_dir: str, image: str, question: str) -> list:
    """(module name, digest of its first output) for every module of a model, in the order they
    ran, then the last position's logits: the first module that differs is where the bits part."""
    import torch
    import transformers
    from PIL import Image

    torch.set_num_threads(1)
    model = transformers.AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[prompt], images=[Image.open(image).convert("RGB")], return_tensors="pt")
    seen = []

    def hook(name):
        def record(_module, _inputs, output):
            first = output
            while isinstance(first, (tuple, list)) and first:
                first = first[0]
            if hasattr(first, "last_hidden_state"):
                first = first.last_hidden_state
            if isinstance(first, torch.Tensor):
                seen.append((name or "(model)", digest(first)))

        return record

    for name, module in model.named_modules():
        module.register_forward_hook(hook(name))
    with torch.no_grad():
        logits = model(**inputs).logits[0, -1]
    seen.append(("last-position logits", digest(logits)))
    return [("pixel values", digest(inputs["pixel_values"]))] + seen


def probe(argv: list) -> list:
    if argv[0] == "kernels":
        return kernels()
    if argv[0] == "layers" and len(argv) == 4:
        return layers(*argv[1:])
    sys.exit("usage: cross-cpu.py kernels | layers MODEL_DIR IMAGE QUESTION | compare [--cpus A,B] kernels|layers ...")


def run_probe(cpu, argv: list) -> list:
    """Runs this script's probe natively (cpu None) or under qemu-x86_64 -cpu CPU, in a child."""
    env = dict(os.environ)
    for name, value in PINS.items():
        env.setdefault(name, value)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", *argv]
    if cpu is not None:
        cmd = ["qemu-x86_64", "-cpu", cpu, *cmd]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the probe {'natively' if cpu is None else 'under ' + cpu} failed:\n{done.stderr[-2000:]}")
    return [tuple(line.split("\t")) for line in done.stdout.splitlines() if "\t" in line]


def compare(cpus: list, argv: list) -> int:
    native = run_probe(None, argv)
    runs = {cpu: run_probe(cpu, argv) for cpu in cpus}
    pins = ", ".join(f"{k}={os.environ.get(k, v)}" for k, v in PINS.items())
    print(f"pins: {pins}")
    print(f"{'step':40} " + " ".join(f"{c:>14}" for c in cpus))
    differs = 0
    for i, (name, bits) in enumerate(native):
        marks = []
        for cpu in cpus:
            other = runs[cpu][i] if i < len(runs[cpu]) else (name, "")
            same = other == (name, bits)
            differs += not same
            marks.append("same" if same else "DIFFERS")
        print(f"{name[:40]:40} " + " ".join(f"{m:>14}" for m in marks))
    print(f"{differs} of {len(native) * len(cpus)} steps differ from the native run")
    return 1 if differs else 0


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--child":
        for name, bits in probe(args[1:]):
            print(f"{name}\t{bits}")
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["kernels", "layers", "compare"])
    parser.add_argument("--cpus", default=",".join(DEFAULT_CPUS), help="qemu CPU models for compare (qemu-x86_64 -cpu help)")
    known, rest = parser.parse_known_args(args)
    if known.mode == "compare":
        return compare(known.cpus.split(","), rest)
    for name, bits in probe([known.mode, *rest]):
        print(f"{name:40} {bits}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
