"""Which image features serve confident learning's probes better: the mean of the vision tower's
merged tokens (the engine's `vision_tower_mean`) or the decoder's hidden state where the image
prefix ends (`decoder_prefix_end`), and a third for reference, the same position one layer
earlier.

Every vector is computed here with transformers on a model directory the engine reads, for the
images of an NIH-format folder (the embedded sample, or one `fixtures/gen_sample.py` draws). Each
definition goes into a features file (`image_index`, `features`) and through `label-issues`, and
its out-of-fold probabilities are scored against the folder's truth.csv per finding:
  * AUROC for the truth over every image (how well the probe sees the finding), and
  * AP and AUROC for the wrong rows among NIH's positives (what a release's rows can show).

    python benches/confident_learning_features.py --model fixtures/vlm/trained/qwen2_vl \
        --sample fixtures/sample --bin target/debug/bpals-release --work /tmp/features

The decoder's state is read at the token that closes the image (`<|vision_end|>`): every
question of a release comes after it, so under causal attention it is the same whatever is asked.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import transformers
from PIL import Image
from sklearn.metrics import average_precision_score, roc_auc_score

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "fixtures" / "vlm"))
from gen_tiny_models import model_class  # noqa: E402

DEFINITIONS = ["vision_tower_mean", "decoder_prefix_end", "decoder_prefix_end_minus_one"]


def vectors(model_dir: Path, sample: Path, images: list) -> dict:
    """Each definition's vector for every image, in `images` order."""
    family = json.loads((model_dir / "config.json").read_text())["model_type"]
    model = model_class(family).from_pretrained(model_dir).eval()
    processor = transformers.AutoProcessor.from_pretrained(model_dir)
    end_id = processor.tokenizer.convert_tokens_to_ids("<|vision_end|>")
    captured = {}
    model.model.visual.register_forward_hook(lambda _m, _i, out: captured.__setitem__("tokens", out.pooler_output))
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Is this chest X-ray normal?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    out = {d: [] for d in DEFINITIONS}
    for name in images:
        image = Image.open(sample / "images" / name).convert("RGB")
        inputs = processor(text=[text], images=[image], return_tensors="pt", return_mm_token_type_ids=True)
        with torch.no_grad():
            hidden = model(**inputs, output_hidden_states=True).hidden_states
        at = (inputs["input_ids"][0] == end_id).nonzero()[0, 0]
        out["vision_tower_mean"].append(captured["tokens"].float().mean(0).numpy())
        out["decoder_prefix_end"].append(hidden[-1][0, at].float().numpy())
        out["decoder_prefix_end_minus_one"].append(hidden[-2][0, at].float().numpy())
    return {d: np.stack(v) for d, v in out.items()}


def write_features(path: Path, images: list, matrix: np.ndarray) -> None:
    features = pa.array([row.astype(np.float32).tolist() for row in matrix], type=pa.list_(pa.float32()))
    pq.write_table(pa.table({"image_index": images, "features": features}), path)


def score(oof: pd.DataFrame, truth: pd.DataFrame) -> list:
    """Per finding (and pooled): AUROC for the truth over every image; AP and AUROC for the
    wrong rows among NIH's positives."""
    both = oof.merge(truth, on=["image_index", "finding"])
    rows = []
    for finding, group in [("all findings", both)] + list(both.groupby("finding", sort=False)):
        sees = roc_auc_score(group.truth, group.p) if 0 < group.truth.sum() < len(group) else None
        pos = group[group.nih == 1]
        wrong = (pos.truth == 0).to_numpy()
        if wrong.any() and not wrong.all():
            ap, auroc = average_precision_score(wrong, 1 - pos.p), roc_auc_score(wrong, 1 - pos.p)
        else:
            ap = auroc = None
        rows.append((finding, sees, int(wrong.sum()), ap, auroc))
    return rows


def fmt(v):
    return "-" if v is None else f"{v:.2f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--sample", type=Path, required=True, help="an NIH-format folder with truth.csv")
    parser.add_argument("--bin", required=True, help="the bpals-release binary")
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    entry = args.sample / "Data_Entry_2017_v2020.csv"
    images = pd.read_csv(entry)["Image Index"].tolist()
    start = time.time()
    found = vectors(args.model, args.sample, images)
    print(f"features of {len(images)} images in {time.time() - start:.0f} s", file=sys.stderr)
    truth = pd.read_csv(args.sample / "truth.csv").rename(columns={"label": "finding"})
    tables = {}
    for definition, matrix in found.items():
        path = args.work / f"{definition}.parquet"
        write_features(path, images, matrix)
        out = args.work / definition
        subprocess.run([args.bin, "label-issues", "--data-entry", str(entry), "--features", str(path), "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL)
        tables[definition] = score(pq.read_table(out / "out_of_fold.parquet").to_pandas(), truth)
    print(f"{len(images)} images, {found['vision_tower_mean'].shape[1]} numbers a vector; "
          "per definition: AUROC for the truth over every image | AP and AUROC for NIH's wrong positives")
    print("| finding | wrong | " + " | ".join(f"{d} sees | AP | AUROC" for d in DEFINITIONS) + " |")
    print("|---|---:|" + "---:|---:|---:|" * len(DEFINITIONS))
    for i, row in enumerate(tables[DEFINITIONS[0]]):
        cells = []
        for d in DEFINITIONS:
            _, sees, _, ap, auroc = tables[d][i]
            cells += [fmt(sees), fmt(ap), fmt(auroc)]
        print(f"| {row[0]} | {row[2]} | " + " | ".join(cells) + " |")
    return tables


if __name__ == "__main__":
    main()
