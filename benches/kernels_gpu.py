"""The engine's own kernels for a mixture of experts and the norms, each timed alone beside the
libtorch form it replaces, on Qwen3.6-35B-A3B's shapes (PyTorch only).

The runner's parts table clocks these parts inside a whole model, where a pass clocked part by
part runs 4-20% slow; this replays each part alone on one layer's full-size tensors (a pass of N
images: its prefixes, 1,064 tokens each, then its 57 questions of 24 tokens each, as two calls)
and checks on the GPU what the suite checks on the CPU through the stand-in driver:

  experts: router        crates/vlm/src/cuda_kernels/router.cu against libtorch's softmax, top k and
                         renormalisation (crates/vlm/src/moe.rs): the experts chosen, the weights;
  experts: grouping      crates/vlm/src/cuda_kernels/experts.cu's three launches against libtorch's form
                         (crates/vlm/src/moe.rs, `Experts::grouping`): the same bytes;
  experts: weighted sum  its one launch against the embedding bag; a token alone the same bits;
  experts: activation    crates/vlm/src/cuda_kernels/gated_activation.cu against SiLU and the product
                         (crates/vlm/src/moe.rs), on the grouped rows' two halves;
  MLP: activation        the same kernel on a dense MLP's gate and up, at Qwen3-VL-8B's width
                         (12,288) and its 36 layers (crates/vlm/src/layers.rs, `GatedMlp`);
  gated norm             crates/vlm/src/cuda_kernels/gated_norm.cu against libtorch's five kernels
                         (crates/vlm/src/families/qwen3_5/linear_attention.rs);
  rms norm               crates/vlm/src/cuda_kernels/rms_norm.cu against libtorch's (crates/vlm/src/layers.rs), a
                         weight of 1 + w in f32 as Qwen3.5's norms have it.

The libtorch forms are copies of the engine's, in PyTorch. Each row gives milliseconds for the
pass's two calls of one layer, and an image's share over the model's layers of that part. Random
inputs in bf16; the kernels are compiled here by NVRTC (`torch.cuda._compile_kernel`).

    python3 benches/kernels_gpu.py [--images 8,16] [--device cuda]
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_kernels import compile_kernel, float32  # noqa: E402
from gpu_timing import timed  # noqa: E402

HIDDEN, EXPERTS, TOP_K, HEADS, DV, EPS = 2048, 256, 8, 32, 128, 1e-6
PREFIX, QUESTIONS, QUESTION_TOKENS = 1064, 57, 24
MOE_LAYERS, LINEAR_LAYERS, NORMS = 40, 30, 80  # the 35B's: every layer's experts, its linear layers, two norms a layer
MOE_INTERMEDIATE = 512  # the 35B's experts' hidden width
DENSE_INTERMEDIATE, DENSE_LAYERS = 12288, 36  # Qwen3-VL-8B's MLP
ROWS_A_BLOCK = 8  # crates/vlm/src/cuda_kernels/gated_activation.rs
GROUP_ROWS = 8  # crates/vlm/src/moe.rs
THREADS, TILE = 256, 512  # every kernel's block; the grouping's assignments a tile (experts.cu)


# libtorch's forms, as the engine runs them on a GPU.

def router(logits, k):
    """`top_k_by_libtorch`: each token's k most probable experts, their renormalised weights."""
    weights, chosen = logits.softmax(-1, dtype=torch.float32).topk(k, -1)
    return (weights / weights.sum(-1, keepdim=True)).to(logits.dtype), chosen


def grouping(x, chosen, experts):
    """`Experts::grouping`: rows grouped by expert, each group padded to GROUP_ROWS; the groups'
    ends; each (token, slot)'s grouped row."""
    tokens, k = chosen.shape
    device = x.device
    sorted_, order = chosen.flatten().to(torch.uint8 if experts <= 256 else torch.int64).sort(stable=True)
    sorted_ = sorted_.long()
    ids = torch.arange(experts, device=device)
    starts = torch.searchsorted(sorted_, ids, right=False)
    counts = torch.searchsorted(sorted_, ids, right=True) - starts
    padded = (counts + GROUP_ROWS - 1) // GROUP_ROWS * GROUP_ROWS
    padded_ends = padded.cumsum(0)
    padded_starts = padded_ends - padded
    rank = torch.arange(tokens * k, device=device) - starts[sorted_]
    place = padded_starts[sorted_] + rank
    rows = tokens * k + experts * (GROUP_ROWS - 1)
    source = torch.full((rows,), tokens, device=device).index_copy(0, place, order // k)
    with_zero_row = torch.cat([x, x.new_zeros(1, x.shape[1])])
    output_row = torch.zeros_like(place).index_copy(0, order, place)
    return with_zero_row[source], padded_ends.int(), output_row


def weighted_sum_by_bags(both, output_row, weights):
    tokens, k = weights.shape
    offsets = torch.arange(0, tokens * k, k, device=both.device)
    return torch.nn.functional.embedding_bag(output_row, both, offsets, mode="sum", per_sample_weights=weights.flatten())


def gated_norm(out, z, weight, eps):
    """The delta rule's f32 output (its heads moved) cast, normed with its weight, gated."""
    x = torch.empty(out.shape, dtype=z.dtype, device=out.device)
    x.copy_(out)
    normed = torch.rms_norm(x, [x.shape[-1]], weight, eps)
    return torch.mul(normed, torch.nn.functional.silu(z.float()), out=torch.empty_like(normed))


def gated_activation(gate, up):
    """`layers::gated_activation` by libtorch: SiLU of the gate, times up."""
    return torch.nn.functional.silu(gate) * up


def rms_norm(x, weight, eps):
    """`RmsNorm::forward` with an f32 weight (Qwen3.5's 1 + w): normed in f32, scaled, cast."""
    return (torch.rms_norm(x.float(), [x.shape[-1]], None, eps) * weight).to(x.dtype)


# The engine's kernels, launched as crates/vlm/src/cuda_kernels/ launches them.

def fused_router(kernel, logits, k):
    tokens, experts = logits.shape
    weights = torch.empty(tokens, k, dtype=logits.dtype, device=logits.device)
    chosen = torch.empty(tokens, k, dtype=torch.int64, device=logits.device)
    kernel(grid=(-(-tokens // THREADS), 1, 1), block=(THREADS, 1, 1), args=[logits, weights, chosen, tokens, experts, k, 1],
           shared_mem=0)
    return weights, chosen


def fused_grouping(kernels, x, chosen, experts):
    count, offsets_kernel, place = kernels
    tokens, k = chosen.shape
    assignments = tokens * k
    tiles = -(-assignments // TILE)
    total_rows = assignments + experts * (GROUP_ROWS - 1)
    int32 = lambda n: torch.empty(n, dtype=torch.int32, device=x.device)  # noqa: E731
    counts, ends, filled = int32(tiles * experts), int32(experts), int32(experts)
    rows = torch.empty(total_rows, x.shape[1], dtype=x.dtype, device=x.device)
    output_row = torch.empty(assignments, dtype=torch.int64, device=x.device)
    row_words = x.shape[1] * x.element_size() // 16
    chosen = chosen.contiguous()
    count(grid=(tiles, 1, 1), block=(THREADS, 1, 1), args=[chosen, counts, assignments, experts], shared_mem=4 * TILE)
    offsets_kernel(grid=(1, 1, 1), block=(THREADS, 1, 1), args=[counts, ends, filled, tiles, experts, GROUP_ROWS],
                   shared_mem=8 * experts)
    place(grid=(tiles + experts, 1, 1), block=(THREADS, 1, 1),
          args=[chosen, counts, ends, filled, x, rows, output_row, assignments, experts, k, row_words, total_rows, GROUP_ROWS],
          shared_mem=8 * TILE)
    return rows, ends, output_row


def fused_weighted_sum(kernel, both, output_row, weights):
    tokens, k = weights.shape
    sums = torch.empty(tokens, both.shape[1], dtype=both.dtype, device=both.device)
    kernel(grid=(tokens, 1, 1), block=(THREADS, 1, 1), args=[both, output_row, weights.contiguous(), sums, k, both.shape[1]],
           shared_mem=0)
    return sums


def fused_gated_norm(kernel, out, z, weight, eps):
    rows, s, heads, dv = out.shape
    result = torch.empty(rows, s, heads, dv, dtype=z.dtype, device=z.device)
    stride = out.stride()
    args = [out, z, weight, result, s, heads, dv, stride[0], stride[1], stride[2], float32(eps)]
    kernel(grid=(s, rows, 1), block=(THREADS, 1, 1), args=args, shared_mem=4 * (heads * (dv + 1) + heads))
    return result


def fused_rms_norm(kernel, x, weight, eps):
    width = x.shape[-1]
    out = torch.empty_like(x)
    kernel(grid=(x.numel() // width, 1, 1), block=(THREADS, 1, 1), args=[x, weight, out, width, float32(eps)],
           shared_mem=4 * THREADS)
    return out


def fused_gated_activation(kernel, gate, up):
    rows, width = gate.shape
    out = torch.empty(rows, width, dtype=gate.dtype, device=gate.device)
    grid = (-(-width // THREADS), min(-(-rows // ROWS_A_BLOCK), 65535), 1)
    kernel(grid=grid, block=(THREADS, 1, 1), args=[gate, up, out, rows, width, gate.stride(0), up.stride(0), 0], shared_mem=0)
    return out


def calls(images):
    """The pass's two calls: its prefixes (rows, tokens), then its questions."""
    return [(images, PREFIX), (images * QUESTIONS, QUESTION_TOKENS)]


def inputs(images, device, seed=0):
    """Per call: the rows x, each token's experts and weights, the grouped products' outputs, the
    delta rule's output (heads moved, padded to whole chunks of 64 as the engine's is), the gate,
    the experts' hidden rows (gate and up, halves of one product's rows), a dense MLP's gate and up."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    made = []
    for rows, tokens in calls(images):
        n = rows * tokens
        x = torch.randn(n, HIDDEN, generator=g).to(device, torch.bfloat16)
        logits = torch.randn(n, EXPERTS, generator=g).to(device, torch.bfloat16)
        weights, chosen = router(logits, TOP_K)
        both = torch.randn(n * TOP_K + EXPERTS * (GROUP_ROWS - 1), HIDDEN, generator=g).to(device, torch.bfloat16)
        padded = -(-tokens // 64) * 64
        out = torch.randn(rows, HEADS, padded, DV, generator=g).to(device)[:, :, :tokens].transpose(1, 2)
        z = torch.randn(rows, tokens, HEADS, DV, generator=g).to(device, torch.bfloat16)
        hidden = torch.randn(n * TOP_K, 2 * MOE_INTERMEDIATE, generator=g).to(device, torch.bfloat16)
        mlp = torch.randn(n, 2 * DENSE_INTERMEDIATE, generator=g).to(device, torch.bfloat16)
        made.append({"x": x, "logits": logits, "chosen": chosen, "weights": weights, "both": both, "out": out, "z": z,
                     "hidden": hidden.split(MOE_INTERMEDIATE, 1), "mlp": [t.contiguous() for t in mlp.split(DENSE_INTERMEDIATE, 1)]})
    return made


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", default="8,16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0) if cuda else 'the CPU (times not measured)'}")
    print("| part | images a pass | way | ms a layer (both calls) | ms an image (its layers) | check |")
    print("| --- | ---: | --- | ---: | ---: | --- |")
    kernels, why = {}, None
    if cuda:
        for file, name in [("router", "router_top_k_bf16"), ("experts", "experts_count"), ("experts", "experts_offsets"), ("experts", "experts_place"),
                           ("experts", "experts_weighted_sum_bf16"), ("gated_activation", "gated_activation_bf16"),
                           ("gated_norm", "gated_norm_bf16"),
                           ("rms_norm", "rms_norm_bf16_weight_f32")]:
            kernels[name], why = compile_kernel(file, name)
            if why:
                kernels = {}
                break
    for images in [int(x) for x in args.images.split(",")]:
        measure(images, args.device, kernels, why or ("no GPU" if not cuda else None))
        if cuda:
            torch.cuda.empty_cache()


def measure(images, device, kernels, why):
    """Each part's rows for a pass of `images`: libtorch's form, then the kernel's."""
    made = inputs(images, device)
    weight = torch.rand(DV, device=device).to(torch.bfloat16) + 0.5
    norm_weight = torch.rand(HIDDEN, device=device) + 0.5

    def row(part, way, ms, layers, check=""):
        print(f"| {part} | {images} | {way} | {ms:.3f} | {ms * layers / images:.2f} | {check} |", flush=True)

    def both_calls(fn):
        return lambda: [fn(m) for m in made]

    for m in made:
        m["output_row"] = grouping(m["x"], m["chosen"], EXPERTS)[2]
    parts = [
        ("experts: router", MOE_LAYERS, lambda m: router(m["logits"], TOP_K)),
        ("experts: grouping", MOE_LAYERS, lambda m: grouping(m["x"], m["chosen"], EXPERTS)),
        ("experts: weighted sum", MOE_LAYERS, lambda m: weighted_sum_by_bags(m["both"], m["output_row"], m["weights"])),
        ("experts: activation", MOE_LAYERS, lambda m: gated_activation(*m["hidden"])),
        ("MLP: activation", DENSE_LAYERS, lambda m: gated_activation(*m["mlp"])),
        ("gated norm", LINEAR_LAYERS, lambda m: gated_norm(m["out"], m["z"], weight, EPS)),
        ("rms norm", NORMS, lambda m: rms_norm(m["x"], norm_weight, EPS)),
    ]
    for part, layers, fn in parts:
        row(part, "libtorch", timed(both_calls(fn)), layers)
    if not kernels:
        print(f"| the engine's kernels | {images} | not run ({why}) | | | |", flush=True)
        return
    router_kernel = kernels["router_top_k_bf16"]
    m = made[0]
    (weights, chosen), (weights0, chosen0) = fused_router(router_kernel, m["logits"], TOP_K), router(m["logits"], TOP_K)
    differ = (chosen != chosen0).any(-1).float().mean().item()
    diff = (weights.float() - weights0.float()).abs().max().item()
    row("experts: router", "kernel", timed(both_calls(lambda m: fused_router(router_kernel, m["logits"], TOP_K))), MOE_LAYERS,
        f"{differ:.1%} of tokens choose otherwise (equal logits ordered by expert); weights within {diff:.2e}")

    grouping_kernels = (kernels["experts_count"], kernels["experts_offsets"], kernels["experts_place"])
    same = all(torch.equal(a, b) for m in made
               for a, b in zip(fused_grouping(grouping_kernels, m["x"], m["chosen"], EXPERTS), grouping(m["x"], m["chosen"], EXPERTS)))
    row("experts: grouping", "kernels", timed(both_calls(lambda m: fused_grouping(grouping_kernels, m["x"], m["chosen"], EXPERTS))),
        MOE_LAYERS, "the same bytes" if same else "DIFFERENT BYTES")

    sum_kernel = kernels["experts_weighted_sum_bf16"]
    m = made[1]
    sums = fused_weighted_sum(sum_kernel, m["both"], m["output_row"], m["weights"])
    alone = fused_weighted_sum(sum_kernel, m["both"], m["output_row"][5 * TOP_K:6 * TOP_K], m["weights"][5:6])
    diff = (sums.float() - weighted_sum_by_bags(m["both"], m["output_row"], m["weights"]).float()).abs().max().item()
    row("experts: weighted sum", "kernel", timed(both_calls(lambda m: fused_weighted_sum(sum_kernel, m["both"], m["output_row"], m["weights"]))),
        MOE_LAYERS, f"max diff {diff:.2e}; a token alone {'the same bits' if torch.equal(alone, sums[5:6]) else 'OTHER BITS'}")

    activation_kernel = kernels["gated_activation_bf16"]
    for part, key, layers in [("experts: activation", "hidden", MOE_LAYERS), ("MLP: activation", "mlp", DENSE_LAYERS)]:
        diff = max((fused_gated_activation(activation_kernel, *m[key]).float() - gated_activation(*m[key]).float()).abs().max().item()
                   for m in made)
        row(part, "kernel", timed(both_calls(lambda m, key=key: fused_gated_activation(activation_kernel, *m[key]))), layers,
            f"max diff {diff:.2e}")

    norm_kernel = kernels["gated_norm_bf16"]
    diff = max((fused_gated_norm(norm_kernel, m["out"], m["z"], weight, EPS).float()
                - gated_norm(m["out"], m["z"], weight, EPS).float()).abs().max().item() for m in made)
    row("gated norm", "kernel", timed(both_calls(lambda m: fused_gated_norm(norm_kernel, m["out"], m["z"], weight, EPS))),
        LINEAR_LAYERS, f"max diff {diff:.2e}")

    rms_kernel = kernels["rms_norm_bf16_weight_f32"]
    diff = max((fused_rms_norm(rms_kernel, m["x"], norm_weight, EPS).float() - rms_norm(m["x"], norm_weight, EPS).float()).abs().max().item()
               for m in made)
    row("rms norm", "kernel", timed(both_calls(lambda m: fused_rms_norm(rms_kernel, m["x"], norm_weight, EPS))), NORMS,
        f"max diff {diff:.2e}")


if __name__ == "__main__":
    main()
