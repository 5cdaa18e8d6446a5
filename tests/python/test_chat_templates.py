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

import pytest
from helpers import noise_image, probe, render, transformers_yes_no

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
    run = subprocess.run([BIN, "doctor", "--json", "--model", str(model), "--question", question], capture_output=True, text=True)
    return run


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
            tok, text = render(model, question, on)
            assert prompt["text"] == text, f"{model}: thinking {prompt['thinking']}: the engine renders\n{prompt['text']!r}\nnot\n{text!r}"
            assert prompt["input_ids"] == tok(text)["input_ids"]
            if not on:
                assert not prompt["opens_reasoning"]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_each_published_qwen_template_renders_as_transformers_or_is_refused(name, templates_dir, tmp_path):
    template = open(os.path.join(templates_dir, name)).read()
    model = model_with_template(tmp_path, PUBLISHED[name], template)
    try:
        _, rendered = render(model, QUESTIONS[0], False)
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
    image_path = tmp_path / "image.png"
    noise_image(image_path, 256, seed=20261125)  # Qwen3.5's minimum size, a multiple of 32
    question = QUESTIONS[0]
    report = probe(BIN, model_dir, image_path, question)
    assert report["model"]["chat_template_variables"] == {"enable_thinking": False}
    engine = report["questions"][0]
    off = transformers_yes_no(model_dir, image_path, question, False)
    print(f"engine {engine}, transformers thinking off {off}")
    assert abs(engine["logit_yes"] - off[0]) < 1e-4 and abs(engine["logit_no"] - off[1]) < 1e-4, (engine, off)
    left_open = transformers_yes_no(model_dir, image_path, question, None)
    print(f"transformers, block left open {left_open}")
    assert max(abs(engine["logit_yes"] - left_open[0]), abs(engine["logit_no"] - left_open[1])) > 1e-3, \
        "with the block left open transformers should answer differently: the comparison above would not catch the bug"
