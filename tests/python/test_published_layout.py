"""A tiny Qwen2-VL in a published checkpoint's layout (fixtures/vlm/published_layout.py: Qwen2's
real BPE vocabulary from llama.cpp's pinned vocab file, the added tokens at their published ids,
transformers' Qwen2VLConfig defaults, the published processor settings), built at test time:
the engine reads it, its prompt's ids equal transformers' (with the real merges and ids), and
`probe`'s yes/no logits equal transformers' within 1e-4 at f32.
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


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    llama = os.environ.get("BPALS_LLAMA_CPP_SRC") or subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "fetch-llama-cpp-sdist.sh")], check=True, capture_output=True, text=True
    ).stdout.strip()
    out = tmp_path_factory.mktemp("published") / "qwen2_vl"
    subprocess.run([sys.executable, os.path.join(ROOT, "fixtures", "vlm", "published_layout.py"), llama, str(out)],
                   check=True, capture_output=True)
    return out


def test_the_engine_reads_the_published_layout_with_the_published_ids(model_dir):
    run = subprocess.run([BIN, "doctor", "--model", str(model_dir), "--question", QUESTION], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)["model_dir"]
    assert report["family"] == "qwen2_vl"
    prompt = report["prompts"][0]
    tok, text = render(model_dir, QUESTION, False)
    assert prompt["text"] == text
    assert prompt["input_ids"] == tok(text)["input_ids"]
    assert prompt["input_ids"][:3] == [151644, 8948, 198], "<|im_start|>system\\n with Qwen2's own ids"
    assert 151655 in prompt["input_ids"] and 151652 in prompt["input_ids"], "the vision markers at their published ids"


def test_probe_equals_transformers_on_the_published_layout(model_dir, tmp_path):
    image = tmp_path / "image.png"
    noise_image(image, 224, seed=7)  # a multiple of 28 within Qwen2-VL's pixel bounds
    engine = probe(BIN, model_dir, image, QUESTION)["questions"][0]
    reference = transformers_yes_no(model_dir, image, QUESTION, False)
    print(f"published layout: engine {engine}, transformers {reference}")
    assert abs(engine["logit_yes"] - reference[0]) < 1e-4 and abs(engine["logit_no"] - reference[1]) < 1e-4, (engine, reference)
