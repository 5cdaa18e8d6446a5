"""What several of the Python tests share."""
import json
import os
import pathlib
import socket
import subprocess

import numpy as np
import torch
import transformers
from PIL import Image


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BPALS_BIN", os.path.join(ROOT, "target", "debug", "bpals-release"))

_RELEASES = {}


def sample_release(name, tmp_path_factory):
    """The embedded-sample release of specs/NAME.yaml, built once per test session and shared by
    every module that only reads it (the readers, Croissant, the review round trip). The builds
    share one score cache, as a publisher's would: a release's bytes do not depend on what the
    cache held (tests/build_release.rs merges sharded runs through one cache and reruns a killed
    build), and each image is scored once, not per module."""
    if name not in _RELEASES:
        out = tmp_path_factory.getbasetemp() / "sample-releases" / name
        out.parent.mkdir(parents=True, exist_ok=True)
        build_sample(os.path.join(ROOT, "specs", f"{name}.yaml"), out, tmp_path_factory)
        _RELEASES[name] = out
    return _RELEASES[name]


def sample_score_cache(tmp_path_factory):
    """The score cache the session's sample builds share: the one scripts/test names for every
    lane's sample builds (BPALS_SAMPLE_SCORE_CACHE; the engine's S2 and S4 test builds into it
    too), else one in this session's folder."""
    shared = os.environ.get("BPALS_SAMPLE_SCORE_CACHE")
    cache = pathlib.Path(shared) if shared else tmp_path_factory.getbasetemp() / "sample-releases" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    return cache


def build_sample(spec, out, tmp_path_factory):
    """`build SPEC --out OUT` on the embedded sample (any NIH location in the environment left out),
    through the session's shared score cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BPALS_NIH")}
    done = subprocess.run([BIN, "build", str(spec), "--out", str(out), "--cache-dir", str(sample_score_cache(tmp_path_factory)),
                           "--no-progress"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"build {spec}:\n{done.stderr}"


def free_port():
    """A loopback port nothing listens on now, for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def noise_image(path, size, seed):
    """An RGB PNG of `size` x `size` random pixels. Pick a size the processor does not resize
    (a multiple of its merged patch, within its pixel bounds): transformers' PIL processor and the
    engine's resize are not what these tests compare."""
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)).save(path)


def render(model_dir, question, enable_thinking):
    """transformers' rendering of the engine's message (the image, then the question)."""
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    return tok, tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)


def transformers_yes_no(model_dir, image_path, question, enable_thinking):
    """transformers' last-position logits of "Yes" and "No" at f32: the prompt rendered as above,
    its image placeholder expanded as the processor does, the pixels from the image processor."""
    model = transformers.AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    image_processor = transformers.AutoImageProcessor.from_pretrained(str(model_dir))
    config = json.loads((model_dir / "config.json").read_text())
    pixels = image_processor(images=[Image.open(image_path).convert("RGB")], return_tensors="pt")
    merge = image_processor.merge_size
    image_tokens = int(pixels["image_grid_thw"][0].prod()) // (merge * merge)
    tok, text = render(model_dir, question, enable_thinking)
    ids = torch.tensor([tok(text.replace("<|image_pad|>", "<|image_pad|>" * image_tokens))["input_ids"]])
    with torch.no_grad():
        out = model(input_ids=ids, mm_token_type_ids=(ids == config["image_token_id"]).long(),
                    pixel_values=pixels["pixel_values"], image_grid_thw=pixels["image_grid_thw"]).logits[0, -1]
    yes, no = tok.encode("Yes", add_special_tokens=False)[0], tok.encode("No", add_special_tokens=False)[0]
    return out[yes].item(), out[no].item()


def probe(bin, model_dir, image_path, question):
    """The engine's answer to one question, at f32 on the CPU, as `probe` reports it."""
    run = subprocess.run([bin, "probe", "--model", str(model_dir), "--image", str(image_path), "--question", question,
                          "--device", "cpu", "--dtype", "f32"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)
