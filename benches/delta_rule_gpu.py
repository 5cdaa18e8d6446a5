"""Where the delta rule's time goes on a GPU, and what other numerics would buy (PyTorch only).

The engine's parts table puts the Gated DeltaNet's chunked delta rule first in a hybrid model's
time (Qwen3.5, Qwen3.6), most of it the pass across a prefix's chunks. This replays that pass and
the chunk preparation before it on the full-size shapes (32 value heads of 128, 17 chunks of 64
tokens, N images a pass; --chunks tries other sizes), in the form the engine runs (`crates/vlm/src/families/qwen3_5/delta_rule.rs`,
`Chunked::states_kept`), and beside it:

  tf32        the same products with TF32 allowed (cuBLAS's tensor cores on f32 operands);
  bf16-ops    the products' operands in bf16, accumulated and written in f32 (`bmm(out_dtype=)`),
              the state kept in f32: the numerics of the FLA kernels vLLM and SGLang use;
  graph       the engine's form replayed as one CUDA graph: what the host's launches cost;
  fused       the engine's own kernels, compiled by NVRTC through PyTorch's `torch.cuda._compile_kernel`,
              f32 throughout, on trial in the engine (off by default): the preparation as one
              block a chunk (crates/vlm/src/cuda_kernels/delta_rule_within.cu), and the pass across as one
              kernel that holds each head's state on chip through all the chunks
              (crates/vlm/src/cuda_kernels/delta_rule_across.cu).

Each prints milliseconds a layer and an image (30 linear layers, as Qwen3.6-35B-A3B), and the
largest difference of its outputs from the f32 form's. Random inputs in the layer's ranges.

    python3 benches/delta_rule_gpu.py [--images 8,16] [--device cuda]
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_kernels import compile_kernel  # noqa: E402
from gpu_timing import timed  # noqa: E402

HEADS, DK, DV, PREFIX, LINEAR_LAYERS = 32, 128, 128, 1064, 30
CHUNK, CHUNKS = 64, 17  # set per run by --chunks: tokens a chunk, and chunks to hold the prefix
TILE, THREADS = 64, 256  # the pass-across kernel's state columns a block; both kernels' threads a block


def inputs(b, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    shape = (b, HEADS, CHUNKS, CHUNK)

    def rand(*s):
        return torch.rand(*s, generator=g).to(device)

    def unit(*s):
        x = torch.randn(*s, generator=g)
        return (x / x.norm(dim=-1, keepdim=True)).to(device)

    q, k = unit(*shape, DK) * DK**-0.5, unit(*shape, DK)
    v = torch.randn(*shape, DV, generator=g).to(device)
    log_decay = -rand(*shape) * 0.1
    beta = rand(*shape, 1)
    return q, k, v, log_decay, beta


def prepare(q, k, v, log_decay, beta):
    """The chunk preparation of `chunked_rule_across`: what the pass across chunks reads."""
    decay = log_decay.cumsum(-1)
    k_beta, v_beta = k * beta, v * beta
    future = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).triu(1)
    between = (decay.unsqueeze(-1) - decay.unsqueeze(-2)).masked_fill(future, float("-inf")).exp()
    system = (k_beta @ k.transpose(-1, -2)) * between
    identity = torch.eye(CHUNK, device=q.device).expand_as(system)
    inverse = torch.linalg.solve_triangular(system, identity, upper=False, unitriangular=True)
    decay_exp = decay.exp().unsqueeze(-1)
    values = inverse @ v_beta
    keys_read = inverse @ (k_beta * decay_exp)
    within = (q @ k.transpose(-1, -2)) * between
    q_decayed = q * decay_exp
    last = decay[..., -1:]
    k_to_end = (k * (last - decay).exp().unsqueeze(-1)).transpose(-1, -2)
    chunk_decay = last.exp().unsqueeze(-1)
    return values, keys_read, q_decayed, within, k_to_end, chunk_decay


def across(prepared, first, ops="f32"):
    """`Chunked::states_kept`: each chunk's new values and next state, then two products."""
    states, news = states_and_news(prepared, first, ops)
    _, _, q_decayed, within, _, _ = prepared
    return q_decayed @ states + within @ news


def states_and_news(prepared, first, ops="f32"):
    """The loop of `Chunked::states_kept`: the state at each chunk's start, and what each chunk
    writes less what that state already holds."""
    values, keys_read, _, _, k_to_end, chunk_decay = prepared
    b, h, n, c, dv = values.shape
    states = torch.empty(b, h, n, DK, dv, device=values.device)
    news = torch.empty(b, h, n, c, dv, device=values.device)
    states[:, :, 0].copy_(first)

    def product(a, s):
        if ops == "bf16-ops":
            flat_a, flat_s = a.reshape(-1, *a.shape[-2:]), s.reshape(-1, *s.shape[-2:])
            out = torch.bmm(flat_a.bfloat16(), flat_s.bfloat16(), out_dtype=torch.float32)
            return out.view(*a.shape[:-1], s.shape[-1])
        return a @ s

    for i in range(n):
        torch.sub(values[:, :, i], product(keys_read[:, :, i], states[:, :, i]), out=news[:, :, i])
        if i + 1 < n:
            torch.add(states[:, :, i] * chunk_decay[:, :, i], product(k_to_end[:, :, i], news[:, :, i]), out=states[:, :, i + 1])
    return states, news


def kernel_operands(prepared, first):
    """The pass-across kernel's inputs, contiguous: the keys decayed to the chunk's end back in (token,
    key) order, the state after the prefix, and the chunks' decays."""
    values, keys_read, _, _, k_to_end, chunk_decay = prepared
    return [t.contiguous() for t in (values, keys_read, k_to_end.transpose(-1, -2), chunk_decay, first)]


def across_shared_bytes():
    """The pass-across kernel's shared memory a block: its state tile, a chunk's new values and
    one chunk's keys (its SHARED_BYTES)."""
    return 4 * (DK * TILE + CHUNK * TILE + DK * (CHUNK + 4))


def within_shared_bytes():
    """The preparation kernel's shared memory a block: a chunk's keys and one staged operand, the
    system's inverse, and three numbers a token (its SHARED_BYTES, at chunks of up to 64)."""
    return 4 * (2 * 64 * (DK + 4) + 64 * 68 + 3 * 64)


def fused_prepare(kernel, q, k, v, log_decay, beta):
    """`prepare` as one launch of the preparation kernel, in `prepare`'s layouts."""
    b, h, n, c, dv = v.shape
    q, k, v, log_decay, beta = (t.contiguous() for t in (q, k, v, log_decay, beta))
    values, keys_read, q_decayed, k_to_end = torch.empty_like(v), torch.empty_like(k), torch.empty_like(q), torch.empty_like(k)
    within, chunk_decay = torch.empty(b, h, n, c, c, device=v.device), torch.empty(b, h, n, 1, 1, device=v.device)
    args = [q, k, v, log_decay, beta, values, keys_read, q_decayed, within, k_to_end, chunk_decay, c, dv, 1]
    kernel(grid=(b * h * n, 1, 1), block=(THREADS, 1, 1), args=args, shared_mem=within_shared_bytes())
    return values, keys_read, q_decayed, within, k_to_end.transpose(-1, -2), chunk_decay


def fused_across(kernel, prepared, first):
    """`across` with the loop as one launch of the pass-across kernel."""
    values, keys_read, k_to_end, chunk_decay, first = kernel_operands(prepared, first)
    b, h, n, _, dv = values.shape
    states = torch.empty(b, h, n, DK, dv, device=values.device)
    news = torch.empty_like(values)
    args = [values, keys_read, k_to_end, chunk_decay, first, states, news, states, n, dv, 0]  # last: not written
    kernel(grid=(b * h, dv // TILE, 1), block=(THREADS, 1, 1), args=args, shared_mem=across_shared_bytes())
    _, _, q_decayed, within, _, _ = prepared
    return q_decayed @ states + within @ news


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", default="8,16")
    parser.add_argument("--chunks", default="64", help="tokens a chunk, comma-separated (the engine's: 64)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0) if cuda else 'the CPU (times not measured)'}")
    print("| chunk | images a pass | way | ms a layer | ms an image (30 layers) | max diff from f32 |")
    print("| ---: | ---: | --- | ---: | ---: | ---: |")
    global CHUNK, CHUNKS
    for CHUNK, b in [(int(c), int(x)) for c in args.chunks.split(",") for x in args.images.split(",")]:
        CHUNKS = -(-PREFIX // CHUNK)
        measure(b, args.device)
        if cuda:
            torch.cuda.empty_cache()


def measure(b, device):
    """Every way's rows at this run's chunk size and `b` images a pass."""
    cuda = device == "cuda"
    q, k, v, log_decay, beta = inputs(b, device)
    first = torch.randn(b, HEADS, DK, DV, device=device) * 0.1
    torch.backends.cuda.matmul.allow_tf32 = False
    prepared = prepare(q, k, v, log_decay, beta)
    reference = across(prepared, first)

    def row(way, ms, out):
        diff = (out - reference).abs().max().item() if out is not None else float("nan")
        print(f"| {CHUNK} | {b} | {way} | {ms:.3f} | {ms * LINEAR_LAYERS / b:.2f} | {diff:.2e} |", flush=True)

    def not_run(way, why):
        print(f"| {CHUNK} | {b} | {way}: not run ({why}) | | | |", flush=True)

    row("prepare, f32", timed(lambda: prepare(q, k, v, log_decay, beta)), None)
    row("across, f32 (the engine's)", timed(lambda: across(prepared, first)), reference)
    if not cuda:
        return
    torch.backends.cuda.matmul.allow_tf32 = True
    row("prepare, tf32", timed(lambda: prepare(q, k, v, log_decay, beta)), None)
    tf32_prepared = prepare(q, k, v, log_decay, beta)
    row("across, tf32", timed(lambda: across(prepared, first)), across(tf32_prepared, first))
    torch.backends.cuda.matmul.allow_tf32 = False
    row("across, bf16-ops", timed(lambda: across(prepared, first, "bf16-ops")), across(prepared, first, "bf16-ops"))
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        across(prepared, first)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        graphed = across(prepared, first)
    row("across, f32 as one graph", timed(graph.replay), graphed)

    within_kernel, within_why = compile_kernel("delta_rule_within", "delta_rule_within", [f"-DKEY_DIM={DK}"], within_shared_bytes())
    if within_kernel is not None and CHUNK > 64:
        within_kernel, within_why = None, f"chunks of {CHUNK} tokens are more than its 64"
    across_kernel, across_why = compile_kernel("delta_rule_across", "delta_rule_across", [f"-DCHUNK={CHUNK}", f"-DDK={DK}"], across_shared_bytes())
    if within_kernel is None:
        not_run("prepare, fused kernel", within_why)
    else:
        def fused():
            return fused_prepare(within_kernel, q, k, v, log_decay, beta)
        row("prepare, fused kernel (f32)", timed(fused), across(fused(), first))
    if across_kernel is None:
        not_run("across, fused kernel", across_why)
    else:
        row("across, fused kernel (f32)", timed(lambda: fused_across(across_kernel, prepared, first)), fused_across(across_kernel, prepared, first))
    if within_kernel is not None and across_kernel is not None:
        def both():
            return fused_across(across_kernel, fused_prepare(within_kernel, q, k, v, log_decay, beta), first)
        row("prepare and across, both kernels", timed(both), both())


if __name__ == "__main__":
    main()
