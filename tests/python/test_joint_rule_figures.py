"""A two-family release's figures are those of the confidences it ships, checked outside the tool:
pyarrow reads the shards, scikit-learn scores them against the sample's truth, and the card and
eval.json must say the same. A rule fitted on other scores is judged as shipped; the rules no fit
makes (negated, beyond any fit's size, images out of order) and a rule fitted on other scorers
are refused at build time.

The release is tests/specs/s1a-fixture-second-opinion.yaml: both families are the fixture
stand-in, so it builds without libtorch in seconds; the rule's path through the build is the one
the tiny Qwen2-VL and Gemma 4 demo takes (tests/vlm_build.rs builds that one).
"""
import glob
import json
import os
import subprocess

import pandas as pd
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from helpers import BIN, ROOT

SPEC = os.path.join(ROOT, "tests", "specs", "s1a-fixture-second-opinion.yaml")
TRUTH = os.path.join(ROOT, "fixtures", "sample", "truth.csv")


def run(*args):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)


def build(spec, out, cache):
    return run("build", spec, "--out", out, "--cache-dir", cache, "--no-progress")


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """The two-family release and the joint rule `calibrate --joint` fits on it."""
    tmp = tmp_path_factory.mktemp("joint-rule")
    done = build(SPEC, tmp / "two", tmp / "cache")
    assert done.returncode == 0, done.stderr
    done = run("calibrate", tmp / "two", "--gold", TRUTH, "--joint", "--out", tmp / "rule.json")
    assert done.returncode == 0, done.stderr
    return tmp, json.loads((tmp / "rule.json").read_text())


def with_rule(tmp, name, rule):
    (tmp / f"{name}.json").write_text(json.dumps(rule))
    spec = tmp / f"{name}.yaml"
    spec.write_text(f"extends: {SPEC}\nsignal:\n  joint_rule: {tmp / f'{name}.json'}\n")
    return build(spec, tmp / name, tmp / "cache")


def with_weights(rule, primary, second, bias):
    """The fitted rule with every weighted entry's weights replaced: a rule no fit of these reads
    made (fitted on other scores, or edited by hand)."""
    rule = json.loads(json.dumps(rule))
    for entry in [rule["pooled"], *rule["labels"].values()]:
        if entry.get("weights"):
            entry["weights"] = {"primary": primary, "second": second, "bias": bias}
    return rule


def shipped(release):
    rows = pd.concat(pq.read_table(f).to_pandas() for f in sorted(glob.glob(str(release / "data" / "trial-*.parquet"))))
    truth = pd.read_csv(TRUTH)
    return rows.merge(truth[["image_index", "label", "truth"]], on=["image_index", "label"])


def test_a_rule_fitted_on_other_scores_is_judged_by_what_the_release_ships(fitted):
    tmp, rule = fitted
    done = with_rule(tmp, "foreign", with_weights(rule, 2.0, 1.0, -0.5))
    assert done.returncode == 0, done.stderr
    rows = shipped(tmp / "foreign")
    assert len(rows) == 776
    auroc = roc_auc_score(rows.truth, rows.confidence)
    mislabel_ap = average_precision_score(rows.truth != rows.nih_label.astype(int), 1 - rows.agreement)
    report = json.loads((tmp / "foreign" / "eval.json").read_text())
    assert report["joint_rule"]["cross_fitted_rows"] == 0
    joint = report["families"]["joint"]
    assert joint["auroc"] == pytest.approx(auroc, abs=1e-12)
    assert joint["mislabel"]["ap"] == pytest.approx(mislabel_ap, abs=1e-12)
    likely = int((rows.trust_class == "likely_mislabeled").sum())
    card = (tmp / "foreign" / "README.md").read_text()
    assert f"both (the release) AUROC {auroc:.3f}, mislabel AP {mislabel_ap:.3f}" in card, card
    assert f"| `likely_mislabeled` | {likely} |" in card, card


@pytest.mark.parametrize("name,change,message", [
    ("negated", lambda r: with_weights(r, -1.0, -0.5, 0.2), "a view's weight is negative"),
    ("huge", lambda r: with_weights(r, 1e308, 1e308, -1e308), "weights beyond"),
    ("reversed", lambda r: {**r, "images": list(reversed(r["images"]))}, "images must be sorted and unique"),
    ("other-scores", lambda r: {**r, "scorers": {**r["scorers"], "primary_sha256": "0" * 64}}, "was fitted on other scores"),
])
def test_rules_no_fit_makes_are_refused_at_build_time(fitted, name, change, message):
    tmp, rule = fitted
    done = with_rule(tmp, name, change(rule))
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert not (tmp / name).exists()
