"""How the GPU node's runner (./run beside this file) says what it measured: a run's line, where
an image's and a layer's time went, the throughput step's Markdown tables, and the last line's
judgement. Only formatting: nothing here runs the engine."""

from collections import namedtuple

# One way of scoring the throughput step measures: the prefix's attention (copied, shared or
# fused), images a pass, the engine's own CUDA kernels or libtorch's forms, and how the questions'
# rows go through the token-wise parts: `deduplicated` (their real tokens, what an image's
# questions begin alike with once: how releases are scored), `packed` (every question's tokens
# its own) or `padded` (the old layout).
Way = namedtuple("Way", "path n kernels rows", defaults=(False, "deduplicated"))


def way_of(r):
    """The way a bench scoring report ran (the copied path always pads, and is named without it;
    a report from before the rows were deduplicated says `packed`)."""
    rows = "deduplicated" if r["prefix_attention"] == "copied" else r.get("suffix_rows", "packed")
    return Way(r["prefix_attention"], r["images_per_pass"], r.get("kernels", False), rows)


def describe_run(r, targets):
    mfu = f"MFU {r['mfu']:.1%} (target >= {targets['mfu_min']:.0%})" if r.get("mfu") is not None else "MFU n/a (no peak known)"
    roof = f", roofline {r['roofline_seconds'] / 60:.1f} min (ratio {r['roofline_ratio']:.2f}, target <= 2)" if r.get("roofline_seconds") else ""
    layers = f"{r['text_layers']} layer{'s' if r['text_layers'] != 1 else ''}"
    if r["active_parameters"] != r["parameters"]:
        layers += f", {r['active_parameters'] / 1e9:.2f}B active"
    memory = r["peak_gpu_memory_mib"]
    gib = f"peak GPU memory {memory / 1024:.1f} GiB" if memory is not None else "peak GPU memory n/a"
    return (f"{r['parameters'] / 1e9:.2f}B parameters ({layers}, arithmetic {r['arithmetic']}), {r['images_per_second']:.2f} images/s, "
            f"{r['prefill_tokens_per_second']:,.0f} prefill tokens/s, {mfu}, {gib}; {r['project_images']} images in "
            f"{r['projected_seconds'] / 60:.1f} min, 112,120 in {r['full_set_hours']:.2f} h{roof}")


def describe_stages(r):
    """Where an image's time went: each stage's milliseconds, and its MFU where it has FLOPs."""
    parts = []
    for s in r.get("stages", []):
        mfu = f" ({s['mfu']:.1%})" if s.get("mfu") is not None else ""
        parts.append(f"{s['stage']} {s['ms_per_image']:.1f} ms{mfu}")
    return "per image: " + ", ".join(parts)


def describe_parts(r):
    """Where a layer's time went, from the pass scored again with each part waited for: the
    top-level parts, largest first, each with its steps."""
    p = r.get("parts")
    if not p:
        return None
    top = sorted((x for x in p["parts"] if ":" not in x["part"]), key=lambda x: -x["ms_per_image"])
    items = []
    for x in top:
        steps = [y for y in p["parts"] if y["part"].startswith(x["part"] + ": ")]
        inner = "; ".join(f"{y['part'].split(': ', 1)[1]} {y['ms_per_image']:.1f}" for y in steps)
        items.append(f"{x['part']} {x['ms_per_image']:.1f} ms" + (f" [{inner}]" if inner else ""))
    return (f"parts per image (a pass clocked part by part, {p['clocked_ms_per_image']:.1f} ms an image against "
            f"{r['device_ms_per_image']:.1f} unclocked): " + ", ".join(items))


def way_name(way):
    rows = {"deduplicated": "", "packed": ", each question's tokens its own", "padded": ", rows padded"}[way.rows]
    return f"{way.path}{' + own kernels' if way.kernels else ''}{rows}, {way.n} a pass"


def throughput_tables(results):
    """The throughput step as two Markdown tables: per model, each way's images/s, MFU and peak
    memory, and the best against the copied prefix; then where an image's time went in each
    model's fastest way, stage by stage."""
    ways = list(dict.fromkeys(way_of(r) for r in results))
    lines = ["| model | " + " | ".join(way_name(w) for w in ways) + " | best against copied |",
             "| --- |" + " ---: |" * (len(ways) + 1)]
    stages = ["| model (fastest way) | vision | prefix | questions | answers |", "| --- | ---: | ---: | ---: | ---: |"]
    for config in dict.fromkeys(r["config"] for r in results):
        runs = {way_of(r): r for r in results if r["config"] == config}

        def cell(r):
            if r is None:
                return "n/a"
            mfu = f", {r['mfu']:.1%}" if r.get("mfu") is not None else ""
            memory = f", {r['peak_gpu_memory_mib'] / 1024:.1f} GiB" if r.get("peak_gpu_memory_mib") is not None else ""
            return f"{r['images_per_second']:.2f}/s{mfu}{memory}"

        best = max(runs.values(), key=lambda r: r["images_per_second"])
        ratio = f"{best['time_ratio_to_copied']:.2f}" if best.get("time_ratio_to_copied") else ""
        lines.append(f"| {config} | " + " | ".join(cell(runs.get(w)) for w in ways) + f" | {ratio} |")
        parts = {s["stage"]: s for s in best.get("stages", [])}

        def stage(key):
            s = parts.get(key)
            if s is None:
                return "n/a"
            return f"{s['ms_per_image']:.1f} ms" + (f" ({s['mfu']:.1%})" if s.get("mfu") is not None else "")

        stages.append(f"| {config} ({way_name(way_of(best))}) | "
                      + " | ".join(stage(k) for k in ["vision", "prefix", "questions", "answers"]) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(stages) + "\n"


def summary(report):
    """The last line's judgement: whether every step ran and passed, and, apart, the targets."""
    verdict = "ok" if report["ok"] else "FAILED"
    throughput = report["steps"].get("throughput")
    if not throughput or "met_targets" not in throughput:
        return verdict
    if throughput["met_targets"] is None:
        return f"{verdict} (throughput targets not judged: no peak known for this device)"
    met = "yes" if throughput["met_targets"] else "no"
    return f"{verdict} (throughput targets met: {met}, {throughput['models_meeting_targets']} of {throughput['models_judged']} models)"
