"""Tiny Qwen2-VL, Qwen2.5-VL, Qwen3-VL Instruct, Qwen3-VL Thinking and Qwen3-VL-MoE models in published
checkpoints' layouts (fixtures/vlm/published_layout.py: Qwen2's real BPE vocabulary from
llama.cpp's pinned vocab file, the added tokens at their published ids, transformers' config
classes, the published processor settings), built at test time. Per family the engine reads it,
its prompt's ids equal transformers' (with the real merges and ids), and `probe`'s yes/no logits
equal transformers' within 1e-4 at f32; the Thinking layout, whose template always opens a
`<think>` block, is refused by name.
"""
import json
import os
import subprocess
import sys

import pytest
from helpers import noise_image, probe, render, transformers_yes_no

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BPALS_BIN", os.path.join(ROOT, "target", "debug", "bpals-release"))
QUESTION = "Is there a pleural effusion in this chest X-ray?"


# Image sides the family's processor leaves as they are (a multiple of the merged patch, within
# its pixel bounds).
SIDE = {"qwen2_vl": 224, "qwen2_5_vl": 224, "qwen3_vl": 256, "qwen3_vl_moe": 256}


def build(family, tmp_path_factory):
    llama = os.environ.get("BPALS_LLAMA_CPP_SRC") or subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "fetch-llama-cpp-sdist.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    out = tmp_path_factory.mktemp("published") / family
    subprocess.run([sys.executable, os.path.join(ROOT, "fixtures", "vlm", "published_layout.py"), llama, family, str(out)],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="module", params=sorted(SIDE))
def model_dir(request, tmp_path_factory):
    return build(request.param, tmp_path_factory)


def test_the_engine_reads_the_published_layout_with_the_published_ids(model_dir):
    run = subprocess.run([BIN, "doctor", "--json", "--model", str(model_dir), "--question", QUESTION], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)["model_dir"]
    assert report["family"] == model_dir.name
    prompt = report["prompts"][0]
    tok, text = render(model_dir, QUESTION, False)
    assert prompt["text"] == text
    assert prompt["input_ids"] == tok(text)["input_ids"]
    first_turn = {"qwen3_vl": 872, "qwen3_vl_moe": 872}.get(model_dir.name, 8948)  # "user" (no default system turn) or "system"
    assert prompt["input_ids"][:3] == [151644, first_turn, 198], "<|im_start|>ROLE\\n with Qwen2's own ids"
    assert 151655 in prompt["input_ids"] and 151652 in prompt["input_ids"], "the vision markers at their published ids"


def test_probe_equals_transformers_on_the_published_layout(model_dir, tmp_path):
    image = tmp_path / "image.png"
    noise_image(image, SIDE[model_dir.name], seed=7)
    engine = probe(BIN, model_dir, image, QUESTION)["questions"][0]
    reference = transformers_yes_no(model_dir, image, QUESTION, False)
    print(f"published layout {model_dir.name}: engine {engine}, transformers {reference}")
    assert abs(engine["logit_yes"] - reference[0]) < 1e-4 and abs(engine["logit_no"] - reference[1]) < 1e-4, (engine, reference)


def test_the_thinking_layout_is_refused_naming_its_template(tmp_path_factory):
    model = build("qwen3_vl_thinking", tmp_path_factory)
    run = subprocess.run([BIN, "doctor", "--model", str(model)], capture_output=True, text=True)
    assert run.returncode != 0
    assert "qwen3_vl_thinking/chat_template.jinja" in run.stderr and "ends inside an open <think> block" in run.stderr, run.stderr
