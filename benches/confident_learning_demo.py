"""How well each view finds the embedded sample's planted errors, per finding: the zero-shot
answer (a release's `confidence`), confident learning's out-of-fold probability (`label-issues`'
out_of_fold.parquet), and their mean.

The sample's truth.csv says, for every (image, label), the truth and what NIH's metadata asserts;
a row is mislabelled where they differ. A release's pair table holds NIH's positives only, so the
views are compared there (NIH asserts a finding the image lacks); confident learning's omissions
(NIH's negatives that show the finding) are scored on their own.

    python benches/confident_learning_demo.py --release DIR --label-issues DIR --truth fixtures/sample/truth.csv
"""
import argparse
import glob
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from sklearn.metrics import average_precision_score, roc_auc_score


def scores(y, doubt):
    """AP and AUROC of `doubt` for the mislabelled rows `y`, or None where a class is missing."""
    if y.all() or not y.any():
        return None, None
    return average_precision_score(y, doubt), roc_auc_score(y, doubt)


def fmt(v):
    return "-" if v is None else f"{v:.2f}"


def table(release, label_issues, truth_csv):
    truth = pd.read_csv(truth_csv).rename(columns={"label": "finding"})
    truth["mislabelled"] = truth.truth != truth.nih
    oof = pq.read_table(os.path.join(label_issues, "out_of_fold.parquet")).to_pandas()
    pairs = pd.concat(pq.read_table(f).to_pandas() for f in sorted(glob.glob(os.path.join(release, "data", "*.parquet"))))
    pairs = pairs.drop_duplicates(["image_index", "label"]).rename(columns={"label": "finding"})
    both = oof.merge(truth, on=["image_index", "finding"])
    assert (both.nih_label == (both.nih == 1)).all(), "the out-of-fold table's labels are not the sample's"
    positives = pairs[["image_index", "finding", "confidence"]].merge(both, on=["image_index", "finding"])
    rows = []
    groups = [("all findings", positives)] + list(positives.groupby("finding", sort=False))
    for finding, pos in groups:
        y = pos.mislabelled.to_numpy()
        zero_shot = scores(y, 1 - pos.confidence.to_numpy())
        cl = scores(y, 1 - pos.p.to_numpy())
        mean = scores(y, 1 - (pos.confidence.to_numpy() + pos.p.to_numpy()) / 2)
        neg = both[~both.nih_label & ((both.finding == finding) | (finding == "all findings"))]
        omissions = scores(neg.mislabelled.to_numpy(), neg.p.to_numpy())
        rows.append((finding, len(pos), int(y.sum()), *zero_shot, *cl, *mean, int(neg.mislabelled.sum()), omissions[0]))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", required=True)
    parser.add_argument("--label-issues", required=True)
    parser.add_argument("--truth", required=True)
    args = parser.parse_args(argv)
    rows = table(args.release, args.label_issues, args.truth)
    print("| finding | NIH positives | wrong | zero-shot AP | AUROC | CL AP | AUROC | mean AP | AUROC | omissions | CL AP |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | " + " | ".join(fmt(v) for v in r[3:9]) + f" | {r[9]} | {fmt(r[10])} |")
    return rows


if __name__ == "__main__":
    main()
