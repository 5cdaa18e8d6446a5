#!/usr/bin/env python3
"""Reference side of benches/vlm.sh: builds the "mid" random Qwen2-VL (text 512 x 8 layers,
vision 512 x 8 blocks) once, writes a 448x448 test image, and times transformers scoring one
yes/no question (processor + forward to the last-position logits) on 2 CPU threads, best of 3.

Usage: vlm_reference.py WORKDIR   (prints JSON; needs fixtures/vlm/requirements.txt)
"""

import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from PIL import Image

HERE = Path(__file__).resolve().parent
TINY = HERE.parent / "fixtures" / "vlm" / "qwen2_vl"
QUESTION = "Is there a pleural effusion in this chest X-ray?"


def build(out: Path) -> None:
    if (out / "model.safetensors").exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    tiny = json.loads((TINY / "config.json").read_text())
    text = {k: v for k, v in tiny["text_config"].items() if k != "layer_types"}
    text = dict(text, hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2)
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 12, 12]}
    vision = dict(tiny["vision_config"], depth=8, embed_dim=512, hidden_size=512, num_heads=8, mlp_ratio=4)
    ids = {k: tiny[k] for k in ["image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id", "bos_token_id", "eos_token_id", "pad_token_id"]}
    config = transformers.Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
    torch.manual_seed(0)
    transformers.Qwen2VLForConditionalGeneration(config).eval().save_pretrained(out, safe_serialization=True)
    for name in ["tokenizer.json", "tokenizer_config.json", "chat_template.json"]:
        shutil.copy(TINY / name, out / name)
    pre = json.loads((TINY / "preprocessor_config.json").read_text())
    pre["size"] = {"shortest_edge": 56 * 56, "longest_edge": 448 * 448}
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    y, x = np.mgrid[0:448, 0:448]
    Image.fromarray(((x * 3 + y * 5) % 256).astype(np.uint8), "L").save(out / "image-448.png")


def main() -> None:
    work = Path(sys.argv[1])
    build(work)
    torch.set_num_threads(2)
    processor = transformers.AutoProcessor.from_pretrained(work)
    model = transformers.Qwen2VLForConditionalGeneration.from_pretrained(work).eval()
    image = Image.open(work / "image-448.png")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        inputs = processor(text=[prompt], images=[image], return_tensors="pt", return_mm_token_type_ids=True)
        with torch.no_grad():
            model(**inputs, logits_to_keep=1)
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"transformers_one_question_ms": best * 1000, "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
