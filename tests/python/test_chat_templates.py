"""The chat templates publishers ship, rendered by the engine exactly as transformers renders them.

The published templates come from llama.cpp's collection as PyPI's pinned llama-cpp-python
source distribution carries it (scripts/fetch-llama-cpp-sdist.sh downloads it once and checks
its sha256; nothing of it is committed). Each Qwen template there, and each template of this
project's fixtures, goes into a copy of a tiny fixture model and is read by
`bpals-release doctor --model`:

- a template with image markers renders the engine's prompt (one user turn: the image, then the
  question) byte for byte as transformers' `apply_chat_template` renders it with
  `enable_thinking=False` and with `True`, and tokenizes to the same ids;
- a text-only template (one that renders no image placeholder, or fails on an image part as
  transformers does) is refused, naming its file;
- on the published Qwen3.5 template, `probe`'s yes/no logits equal transformers' with
  `enable_thinking=False` within 1e-4 at f32, and are far from transformers' with the switch left
  unset (the reasoning block open), so the test can tell the two apart.
"""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch
import transformers
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BPALS_BIN", os.path.join(ROOT, "target", "debug", "bpals-release"))
FIXTURES = os.path.join(ROOT, "fixtures", "vlm")

# Published Qwen-style templates in llama.cpp's models/templates/, with the fixture whose
# tokenizer and config stand in for the checkpoint. Only Qwen3.5's holds image markers; the
# text-only ones (MiMo-VL's there is its text model's) must be refused, not rendered wrong.
PUBLISHED = {
    "Qwen3.5-4B.jinja": "qwen3_5",
    "MiMo-VL.jinja": "qwen2_5_vl",
    "Qwen-Qwen3-0.6B.jinja": "qwen3_5",
    "Qwen-Qwen2.5-7B-Instruct.jinja": "qwen2_5_vl",
    "Qwen-QwQ-32B.jinja": "qwen2_5_vl",
    "Qwen3-Coder.jinja": "qwen3_5",
}
QUESTIONS = [
    "Is there a pleural effusion in this chest X-ray?",
    "Does the image show 'cardiomegaly'? Answer \"yes\" or no.\nThink of the heart's width.",
    "Is there a nodule (≥ 3 mm) in the left upper lobe?",
]


@pytest.fixture(scope="module")
def templates_dir():
    llama = os.environ.get("BPALS_LLAMA_CPP_SRC")
    if not llama:
        llama = subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch-llama-cpp-sdist.sh")], check=True,
                               capture_output=True, text=True).stdout.strip()
    return os.path.join(llama, "models", "templates")


def model_with_template(tmp_path, fixture, template_text):
    """A copy of a fixture model whose chat template is `template_text` (in chat_template.jinja)."""
    out = tmp_path / fixture
    shutil.copytree(os.path.join(FIXTURES, fixture), out, ignore=shutil.ignore_patterns("goldens"))
    for name in ("chat_template.json", "chat_template.jinja"):
        if (out / name).exists():
            (out / name).unlink()
    config = json.loads((out / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    (out / "chat_template.jinja").write_text(template_text)
    return out


def doctor(model, question):
    run = subprocess.run([BIN, "doctor", "--model", str(model), "--question", question], capture_output=True, text=True)
    return run


def transformers_render(model, question, enable_thinking):
    tok = transformers.AutoTokenizer.from_pretrained(str(model))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
    return tok, text


def fixture_templates():
    """Every chat template this project's fixtures ship, wherever the checkpoint keeps it."""
    found = []
    for fixture in sorted(os.listdir(FIXTURES)):
        d = os.path.join(FIXTURES, fixture)
        if not os.path.isfile(os.path.join(d, "config.json")):
            continue
        jinja = os.path.join(d, "chat_template.jinja")
        if os.path.isfile(jinja):
            found.append((fixture, open(jinja).read()))
            continue
        for name in ("chat_template.json", "tokenizer_config.json"):
            path = os.path.join(d, name)
            if os.path.isfile(path) and isinstance(json.load(open(path)).get("chat_template"), str):
                found.append((fixture, json.load(open(path))["chat_template"]))
                break
    return found


def check_renders_as_transformers(model, expect_switch):
    for question in QUESTIONS:
        run = doctor(model, question)
        assert run.returncode == 0, run.stderr
        report = json.loads(run.stdout)["model_dir"]
        assert ("enable_thinking" in report["template_reads"]) == expect_switch
        for prompt in report["prompts"]:
            on = prompt["thinking"] == "on"
            tok, text = transformers_render(model, question, on)
            assert prompt["text"] == text, f"{model}: thinking {prompt['thinking']}: the engine renders\n{prompt['text']!r}\nnot\n{text!r}"
            assert prompt["input_ids"] == tok(text)["input_ids"]
            if not on:
                assert not prompt["opens_reasoning"]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_each_published_qwen_template_renders_as_transformers_or_is_refused(name, templates_dir, tmp_path):
    template = open(os.path.join(templates_dir, name)).read()
    model = model_with_template(tmp_path, PUBLISHED[name], template)
    try:
        _, rendered = transformers_render(model, QUESTIONS[0], False)
    except Exception:  # a text-only template that cannot hold an image part at all
        rendered = None
    if rendered is None or "<|image_pad|>" not in rendered:
        run = doctor(model, QUESTIONS[0])
        assert run.returncode != 0, f"{name} cannot render the image, yet the engine took it"
        assert "chat_template.jinja" in run.stderr, run.stderr
        return
    check_renders_as_transformers(model, expect_switch="enable_thinking" in template)


def test_the_published_vision_templates_are_in_the_pinned_collection(templates_dir):
    """The byte-for-byte checks above are not vacuous: the collection holds Qwen3.5's switched template."""
    qwen35 = open(os.path.join(templates_dir, "Qwen3.5-4B.jinja")).read()
    assert "enable_thinking" in qwen35 and "<|image_pad|>" in qwen35 and ".startswith(" in qwen35


@pytest.mark.parametrize("fixture,template", fixture_templates(), ids=[f for f, _ in fixture_templates()])
def test_each_fixture_template_renders_as_transformers(fixture, template, tmp_path):
    check_renders_as_transformers(model_with_template(tmp_path, fixture, template), expect_switch=False)


def test_probe_on_the_published_qwen3_5_template_equals_transformers_with_thinking_off(templates_dir, tmp_path):
    model_dir = model_with_template(tmp_path, "qwen3_5", open(os.path.join(templates_dir, "Qwen3.5-4B.jinja")).read())
    # 256 x 256: a multiple of the 32-pixel merged patch at the processor's minimum size, so no
    # resize (transformers' PIL processor and the engine's resize are not compared here).
    rng = np.random.default_rng(20261125)
    image_path = tmp_path / "image.png"
    Image.fromarray(rng.integers(0, 256, size=(256, 256, 3), dtype=np.uint8)).save(image_path)
    question = QUESTIONS[0]

    run = subprocess.run([BIN, "probe", "--model", str(model_dir), "--image", str(image_path), "--question", question,
                          "--device", "cpu", "--dtype", "f32"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    probe = json.loads(run.stdout)
    assert probe["model"]["chat_template_variables"] == {"enable_thinking": False}
    engine = probe["questions"][0]

    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    image_processor = transformers.AutoImageProcessor.from_pretrained(str(model_dir))
    config = json.loads((model_dir / "config.json").read_text())
    image = Image.open(image_path).convert("RGB")
    pixels = image_processor(images=[image], return_tensors="pt")
    merge = image_processor.merge_size
    image_tokens = int(pixels["image_grid_thw"][0].prod()) // (merge * merge)

    def logits(enable_thinking):
        tok, text = transformers_render(model_dir, question, enable_thinking)
        text = text.replace("<|image_pad|>", "<|image_pad|>" * image_tokens)
        ids = torch.tensor([tok(text)["input_ids"]])
        mm = (ids == config["image_token_id"]).long()
        with torch.no_grad():
            out = model(input_ids=ids, mm_token_type_ids=mm, pixel_values=pixels["pixel_values"],
                        image_grid_thw=pixels["image_grid_thw"]).logits[0, -1]
        yes, no = tok.encode("Yes", add_special_tokens=False)[0], tok.encode("No", add_special_tokens=False)[0]
        return out[yes].item(), out[no].item()

    off = logits(False)
    print(f"engine {engine}, transformers thinking off {off}")
    assert abs(engine["logit_yes"] - off[0]) < 1e-4 and abs(engine["logit_no"] - off[1]) < 1e-4, (engine, off)
    left_open = logits(None)
    print(f"transformers, block left open {left_open}")
    assert max(abs(engine["logit_yes"] - left_open[0]), abs(engine["logit_no"] - left_open[1])) > 1e-3, \
        "with the block left open transformers should answer differently: the comparison above would not catch the bug"
