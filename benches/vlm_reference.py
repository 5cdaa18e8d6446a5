#!/usr/bin/env python3
"""Reference side of benches/vlm.sh: builds a "mid" random model of a family once (Qwen2-VL,
Qwen3-VL or Qwen3.5: text 512 x 8 layers, vision 512 x 8 blocks; Qwen3-VL with DeepStack at
three blocks; Qwen3.5 with three linear-attention layers to each full one; their mixtures of
experts, Qwen3-VL-MoE and Qwen3.5-MoE, with as many active MLP parameters as the dense mids:
16 experts, top 4, of 344 (Qwen3.5-MoE: of 256, beside a shared expert of 352), 4 x 344 = 256 x 4
+ 352 = 1376, the dense intermediate size),
writes a 448x448 test image, and times transformers on 2 CPU threads, best of 3: scoring one
yes/no question (processor + forward to the last-position logits), and 45 questions about the
image as one padded batch (how transformers scores many prompts).

Gemma 4's mid (`gemma4`) has the same widths: 8 layers, three sliding to one full (keys as values
on the full ones), a 512-wide tower of 8 blocks pooling 3 x 3, at most 140 image tokens (a
448 x 448 image is 528 x 528, 1,089 patches, 121 tokens), the trained tiny Gemma 4's tokenizer
and template.

Usage: vlm_reference.py WORKDIR FAMILY   (qwen2_vl, qwen3_vl, qwen3_5, qwen3_vl_moe, qwen3_5_moe or gemma4;
prints JSON; needs
fixtures/vlm/requirements.txt)
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
FIXTURES = HERE.parent / "fixtures" / "vlm"
QUESTION = "Is there a pleural effusion in this chest X-ray?"
# The same 45 questions benches/vlm.sh asks the engine.
QUESTIONS = [f"Question number {i}: is there a finding of kind {i} in this chest X-ray?" for i in range(1, 46)]


def image(out: Path) -> None:
    y, x = np.mgrid[0:448, 0:448]
    Image.fromarray(((x * 3 + y * 5) % 256).astype(np.uint8), "L").save(out / "image-448.png")


def copy_tokenizer_and_processor(tiny: Path, out: Path) -> None:
    """A Qwen3-line fixture's tokenizer and template, its processor bounded to 448 x 448."""
    for name in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"]:
        shutil.copy(tiny / name, out / name)
    pre = json.loads((tiny / "preprocessor_config.json").read_text())
    pre["size"] = {"shortest_edge": 64 * 64, "longest_edge": 448 * 448}
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))


def build_qwen3_vl(out: Path, moe: bool = False) -> None:
    """Qwen3-VL with the tiny fixture's tokenizer: head_dim 64, interleaved M-RoPE, the real 48 x 48
    position grid, DeepStack after blocks 1, 3 and 5; with `moe`, Qwen3-VL-MoE."""
    tiny = FIXTURES / "qwen3_vl"
    config = json.loads((tiny / "config.json").read_text())
    text = dict(config["text_config"], hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2, head_dim=64)
    text["rope_parameters"] = dict(text["rope_parameters"], mrope_section=[12, 10, 10])
    vision = dict(config["vision_config"], depth=8, hidden_size=512, intermediate_size=2048, num_heads=8, out_hidden_size=512, num_position_embeddings=2304, deepstack_visual_indexes=[1, 3, 5])
    ids = {k: config[k] for k in ["image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"]}
    if moe:
        text.update(num_experts=16, num_experts_per_tok=4, moe_intermediate_size=344, decoder_sparse_step=1, mlp_only_layers=[])
        mid = transformers.Qwen3VLMoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)
    else:
        mid = transformers.Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)
    torch.manual_seed(0)
    cls = transformers.Qwen3VLMoeForConditionalGeneration if moe else transformers.Qwen3VLForConditionalGeneration
    cls(mid).eval().save_pretrained(out, safe_serialization=True)
    copy_tokenizer_and_processor(tiny, out)


def build_qwen3_5(out: Path, moe: bool = False) -> None:
    """Qwen3.5 with the tiny fixture's tokenizer: layers linear, linear, linear, full (twice);
    Gated DeltaNet with 4 key and 8 value heads of 64; attention heads of 64, a quarter turning;
    with `moe`, Qwen3.5-MoE."""
    tiny = FIXTURES / "qwen3_5"
    config = json.loads((tiny / "config.json").read_text())
    layers = ["linear_attention"] * 3 + ["full_attention"]
    text = dict(
        config["text_config"], hidden_size=512, intermediate_size=1376, num_hidden_layers=8, layer_types=layers * 2,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, linear_num_key_heads=4, linear_num_value_heads=8,
        linear_key_head_dim=64, linear_value_head_dim=64,
    )
    text["rope_parameters"] = dict(text["rope_parameters"], mrope_section=[3, 3, 2])
    vision = dict(config["vision_config"], depth=8, hidden_size=512, intermediate_size=2048, num_heads=8, out_hidden_size=512, num_position_embeddings=2304)
    ids = {k: config[k] for k in ["image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"]}
    if moe:
        del text["intermediate_size"]
        text.update(num_experts=16, num_experts_per_tok=4, moe_intermediate_size=256, shared_expert_intermediate_size=352)
        mid = transformers.Qwen3_5MoeConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)
    else:
        mid = transformers.Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True, **ids)
    torch.manual_seed(0)
    cls = transformers.Qwen3_5MoeForConditionalGeneration if moe else transformers.Qwen3_5ForConditionalGeneration
    cls(mid).eval().save_pretrained(out, safe_serialization=True)
    copy_tokenizer_and_processor(tiny, out)


def build_gemma4(out: Path) -> None:
    tiny = FIXTURES / "trained" / "gemma4"
    config = json.loads((tiny / "config.json").read_text())
    text = dict(
        config["text_config"], hidden_size=512, intermediate_size=1376, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=2, head_dim=64, global_head_dim=128, num_global_key_value_heads=1, attention_k_eq_v=True,
        layer_types=["sliding_attention"] * 3 + ["full_attention"] + ["sliding_attention"] * 3 + ["full_attention"], sliding_window=512,
    )
    text.pop("per_layer_config", None)
    vision = dict(config["vision_config"], hidden_size=512, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=8, head_dim=64, pooling_kernel_size=3, position_embedding_size=128)
    ids = {k: config[k] for k in ["image_token_id", "boi_token_id", "eoi_token_id", "audio_token_id", "boa_token_id", "eoa_token_index", "video_token_id"]}
    mid = transformers.Gemma4Config(text_config=text, vision_config=vision, audio_config=None, tie_word_embeddings=True, **ids)
    torch.manual_seed(0)
    transformers.Gemma4ForConditionalGeneration(mid).eval().save_pretrained(out, safe_serialization=True)
    for name in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"]:
        shutil.copy(tiny / name, out / name)
    processor = json.loads((tiny / "processor_config.json").read_text())
    processor["image_processor"].update(max_soft_tokens=140, pooling_kernel_size=3)
    processor["image_seq_length"] = 140
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2))


MODEL_CLASSES = {
    "gemma4": "Gemma4ForConditionalGeneration",
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
}


def build(out: Path, family: str) -> None:
    if (out / "image-448.png").exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    if family == "gemma4":
        build_gemma4(out)
        image(out)
        return
    if family.startswith(("qwen3_vl", "qwen3_5")):
        moe = family.endswith("_moe")
        build_qwen3_vl(out, moe) if family.startswith("qwen3_vl") else build_qwen3_5(out, moe)
        image(out)
        return
    TINY = FIXTURES / "qwen2_vl"
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
    image(out)


def best_ms(processor, model, picture, questions, nested: bool = False) -> float:
    """Best of 3: the processor and one forward to the last-position logits, all prompts batched."""
    prompts = [
        processor.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": q}]}], add_generation_prompt=True,
                                      tokenize=False, enable_thinking=False)
        for q in questions
    ]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        # Gemma 4's processor takes one list of images per prompt.
        images = [[picture] for _ in prompts] if nested else [picture] * len(prompts)
        inputs = processor(text=prompts, images=images, return_tensors="pt", padding=True, return_mm_token_type_ids=True)
        with torch.no_grad():
            model(**inputs, logits_to_keep=1)
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    work, family = Path(sys.argv[1]), sys.argv[2]
    build(work, family)
    torch.set_num_threads(2)
    processor = transformers.AutoProcessor.from_pretrained(work)
    cls = getattr(transformers, MODEL_CLASSES[family])
    model = cls.from_pretrained(work).eval()
    picture = Image.open(work / "image-448.png")
    print(
        json.dumps(
            {
                "transformers_one_question_ms": best_ms(processor, model, picture, [QUESTION], family == "gemma4"),
                "transformers_45_questions_ms": best_ms(processor, model, picture, QUESTIONS, family == "gemma4"),
                "parameters": sum(p.numel() for p in model.parameters()),
            }
        )
    )


if __name__ == "__main__":
    main()
