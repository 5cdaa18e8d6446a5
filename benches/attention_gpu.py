"""The questions' attention over an image's prefix held once, timed on one attention layer of each
model's shapes: libtorch's form beside the engine's kernel for the questions' own tokens and the
merge (crates/vlm/src/cuda_kernels/suffix_attention.cu), after the same fused prefix part (PyTorch only).

The runner's parts table clocks this part as `attention: questions over the prefix`: 0.42 ms an
image a layer on an H100 for Qwen3-VL-30B-A3B and Qwen3.6-35B-A3B, where the prefix's fused
kernel needs about a quarter of that. The rest is libtorch's form of the questions' own part and
of the merge, some twenty kernels over every question's heads. This replays both ways for a pass
of N images, each with 57 questions of 24 tokens after a 1,064-token prefix, and checks on the
GPU what the suite checks on the CPU through the stand-in driver: the largest difference from
libtorch's form, and one image's questions alone the same bits as in the pass.

    python3 benches/attention_gpu.py [--images 8,16] [--device cuda]
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_kernels import compile_kernel, float32  # noqa: E402
from gpu_timing import timed  # noqa: E402

PREFIX, QUESTIONS, QUESTION_TOKENS = 1064, 57, 24
THREADS = 256

# Each model's attention: query heads, key/value heads, head width, attention layers.
MODELS = {
    "Qwen3-VL-8B": (32, 8, 128, 36),
    "Qwen3-VL-30B-A3B": (32, 4, 128, 48),
    "Qwen3.6-35B-A3B": (16, 2, 256, 10),
    "Gemma 4 31B (sliding layers)": (32, 16, 256, 50),
}


def stacked(q, images):
    """The questions' queries (rows, heads, s, d) as one matrix an image and key/value head, as
    `stacked_queries` in crates/vlm/src/shared_prefix.rs stacks them."""
    rows, heads, s, d = q.shape
    return lambda kv_heads: q.view(images, rows // images, kv_heads, heads // kv_heads, s, d).permute(0, 2, 1, 3, 4, 5).reshape(
        images, kv_heads, -1, d)


def prefix_part(q, pk, pv, scale):
    """libtorch's fused attention of the stacked queries over the prefix: its output and log-sum-exp."""
    images, kv_heads = pk.shape[:2]
    queries = stacked(q, images)(kv_heads)
    if q.is_cuda:
        out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(queries, pk, pv, None, True, scale=scale)[:2]
    else:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(queries, pk, pv, scale=scale)
    return out, lse[:, :, :queries.shape[2]].float()


def merged_by_libtorch(q, k, v, out_p, lse, mask, scale):
    """`attention_in_groups` in crates/vlm/src/shared_prefix.rs after the fused prefix part: the suffix
    causally in products, the two parts merged by log-sum-exp in f32."""
    rows, heads, s, d = q.shape
    images, kv_heads = out_p.shape[:2]
    groups = heads // kv_heads
    per_row = lambda t: t.view(images, kv_heads, rows // images, groups, s, t.shape[-1]).permute(0, 2, 1, 3, 4, 5).reshape(  # noqa: E731
        rows, kv_heads, groups, s, t.shape[-1])
    lse = lse.unsqueeze(-1)
    max_p, out_p = per_row(lse), per_row(out_p.float())
    qg = q.view(rows, kv_heads, groups, s, d)
    scores = (qg @ k.unsqueeze(2).transpose(-2, -1)).float() * scale + mask.float().view(1, 1, 1, s, s)
    max_s = scores.amax(-1, keepdim=True)
    weights = (scores - max_s).exp()
    sum_s = weights.sum(-1, keepdim=True)
    out_s = (weights.to(v.dtype) @ v.unsqueeze(2)).float()
    top = torch.maximum(max_p, max_s)
    w_p, w_s = (max_p - top).exp(), (max_s - top).exp()
    out = (out_p * w_p + out_s * w_s) / (torch.ones_like(max_p) * w_p + sum_s * w_s)
    return out.reshape(rows, heads, s, d).to(q.dtype)


def shared_bytes(s, d, element):
    """The kernel's shared memory a block (`shared_bytes` in crates/vlm/src/cuda_kernels/suffix_attention.rs)."""
    return 4 * (s * s + 2 * s) + element * (2 * s * (d + 4 // element) + s * d)


def merged_by_kernel(kernel, q, k, v, out_p, lse, mask, scale):
    """The kernel's launch as crates/vlm/src/cuda_kernels/suffix_attention.rs makes it."""
    rows, heads, s, d = q.shape
    images, kv_heads = out_p.shape[:2]
    result = torch.empty(rows, s, heads, d, dtype=q.dtype, device=q.device)
    shared = shared_bytes(s, d, q.element_size())
    strides = [x for t in (q, k, v, out_p, lse) for x in t.stride()[:3]]
    args = [q, k, v, out_p, lse, mask.float().contiguous(), result, s, d, heads, heads // kv_heads, rows // images, *strides,
            float32(scale)]
    kernel(grid=(heads, rows, 1), block=(THREADS, 1, 1), args=args, shared_mem=shared)
    return result.permute(0, 2, 1, 3)


def inputs(images, heads, kv_heads, d, device, seed=0):
    """One attention layer's questions for a pass: queries, their own keys and values (the values
    a view with the heads moved, as the decoders give them), the prefixes' keys and values, the
    causal mask."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    rows, s = images * QUESTIONS, QUESTION_TOKENS
    made = lambda *shape: torch.randn(*shape, generator=g).to(device, torch.bfloat16)  # noqa: E731
    q, k = made(rows, heads, s, d), made(rows, kv_heads, s, d)
    v = made(rows, s, kv_heads, d).transpose(1, 2)
    pk, pv = made(images, kv_heads, PREFIX, d), made(images, kv_heads, PREFIX, d)
    mask = torch.full((s, s), torch.finfo(torch.float32).min, device=device).triu(1)
    return q, k, v, pk, pv, mask


def measure(images, model, device, kernel, why):
    heads, kv_heads, d, layers = MODELS[model]
    q, k, v, pk, pv, mask = inputs(images, heads, kv_heads, d, device)
    scale = d ** -0.5

    def row(way, ms, check=""):
        print(f"| {model} | {images} | {way} | {ms:.3f} | {ms * layers / images:.2f} | {check} |", flush=True)

    row("prefix part alone (fused kernel)", timed(lambda: prefix_part(q, pk, pv, scale)))
    by_libtorch = lambda: merged_by_libtorch(q, k, v, *prefix_part(q, pk, pv, scale), mask, scale)  # noqa: E731
    row("libtorch", timed(by_libtorch))
    if kernel is None:
        row(f"kernel not run ({why})", 0.0)
        return
    by_kernel = lambda: merged_by_kernel(kernel, q, k, v, *prefix_part(q, pk, pv, scale), mask, scale)  # noqa: E731
    together, reference = by_kernel(), by_libtorch()
    diff = (together.float() - reference.float()).abs().max().item()
    first = slice(QUESTIONS, 2 * QUESTIONS)  # the second image's questions
    alone = merged_by_kernel(kernel, q[first], k[first], v[first], *prefix_part(q[first], pk[1:2], pv[1:2], scale), mask, scale)
    same = "the same bits" if torch.equal(alone, together[first]) else "OTHER BITS"
    row("kernel", timed(by_kernel), f"max diff {diff:.2e}; an image alone {same}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", default="8,16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    args = parser.parse_args()
    cuda = args.device == "cuda"
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0) if cuda else 'the CPU (times not measured)'}")
    print("| model | images a pass | way | ms a layer | ms an image (its layers) | check |")
    print("| --- | ---: | --- | ---: | ---: | --- |")
    # The most shared memory a block of these models takes.
    shared = max(shared_bytes(QUESTION_TOKENS, d, 2) for _, _, d, _ in MODELS.values())
    kernel, why = compile_kernel("suffix_attention", "suffix_attention_bf16", shared=shared) if cuda else (None, "no GPU")
    for images in [int(x) for x in args.images.split(",")]:
        for model in args.models.split(","):
            measure(images, model, args.device, kernel, why)
            if cuda:
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
