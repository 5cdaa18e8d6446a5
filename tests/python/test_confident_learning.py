"""`label-issues` against the references: cleanlab 2.x (confident learning's own library, AGPL:
run here as an oracle only, never copied) for the rules, scikit-learn's LogisticRegression for
the probes.

The data are synthetic and made here: NIH's Data_Entry_2017.csv layout (the published header,
eleven columns, `A|B` labels, "No Finding" alone), images named as NIH names them, and for the
rules out-of-fold probabilities from a known noise process.
"""
import json
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cleanlab.count import compute_confident_joint, get_confident_thresholds
from cleanlab.filter import find_label_issues
from cleanlab.multilabel_classification.filter import find_multilabel_issues_per_class
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from helpers import BIN

LABELS = ["Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia",
          "Pneumothorax", "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia",
          "No Finding"]
HEADER = ("Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age,Patient Gender,View Position,"
          "OriginalImage[Width,Height],OriginalImagePixelSpacing[x,y],\n")


def write_data_entry(path, patients, given):
    """NIH's metadata for images of `patients`, labelled by the boolean matrix `given` (one column
    per finding of LABELS[:14]; an image with none is "No Finding"). Returns the image names."""
    names, lines, follow_up = [], [HEADER], {}
    for patient, row in zip(patients, given):
        k = follow_up.get(patient, 0)
        follow_up[patient] = k + 1
        name = f"{patient:08d}_{k:03d}.png"
        found = [LABELS[j] for j in range(14) if row[j]]
        lines.append(f"{name},{'|'.join(found) or 'No Finding'},{k},{patient:08d},050Y,F,PA,2048,2048,0.143,0.143,\n")
        names.append(name)
    path.write_text("".join(lines))
    return names


def with_no_finding(given):
    return np.concatenate([given, ~given.any(axis=1, keepdims=True)], axis=1)


def label_issues(tmp_path, data_entry, *flags):
    out = tmp_path / "out"
    done = subprocess.run([BIN, "label-issues", "--data-entry", str(data_entry), "--out", str(out), *flags],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "label_issues.json").read_text()), out, done.stdout


def noisy_set(rng, images, findings):
    """True labels at each finding's prevalence; NIH-like labels with asymmetric noise (positives
    missed at one rate, absent findings asserted at another, both per finding); and out-of-fold
    probabilities from a reader whose skill varies by finding."""
    prevalence = rng.uniform(0.02, 0.3, findings)
    truth = rng.random((images, findings)) < prevalence
    missed = rng.uniform(0.05, 0.3, findings)
    asserted = rng.uniform(0.005, 0.05, findings)
    flip = np.where(truth, rng.random(truth.shape) < missed, rng.random(truth.shape) < asserted)
    given = truth ^ flip
    skill = rng.uniform(1.0, 4.0, findings)
    logits = np.where(truth, skill, -skill) + rng.normal(0, 1.5, truth.shape) + np.log(prevalence / (1 - prevalence))
    return given, 1 / (1 + np.exp(-logits))


def test_the_rules_equal_cleanlabs_on_20000_images_of_15_findings_with_asymmetric_noise(tmp_path):
    rng = np.random.default_rng(7)
    given14, p14 = noisy_set(rng, 20_000, 14)
    patients = np.arange(20_000) // 3 + 1
    names = write_data_entry(tmp_path / "Data_Entry_2017.csv", patients, given14)
    given = with_no_finding(given14)
    p = np.concatenate([p14, rng.uniform(0, 1, (20_000, 1))], axis=1)
    rows = [(n, LABELS[k], float(p[i, k])) for i, n in enumerate(names) for k in range(15)]
    pq.write_table(pa.table({"image_index": [r[0] for r in rows], "finding": [r[1] for r in rows],
                             "p": [r[2] for r in rows]}), tmp_path / "p.parquet")

    report, _, _ = label_issues(tmp_path, tmp_path / "Data_Entry_2017.csv", "--probabilities", str(tmp_path / "p.parquet"))

    labels = [[k for k in range(15) if given[i, k]] for i in range(20_000)]
    ranked, _, _ = find_multilabel_issues_per_class(labels=labels, pred_probs=p, return_indices_ranked_by="self_confidence")
    flagged = 0
    for k, finding in enumerate(report["findings"]):
        assert finding["finding"] == LABELS[k]
        binary = np.stack([1 - p[:, k], p[:, k]], axis=1)
        y = given[:, k].astype(int)
        rules = finding["rules"]
        np.testing.assert_allclose(rules["thresholds"], get_confident_thresholds(y, binary), rtol=0, atol=1e-12)
        assert rules["confident_joint"] == compute_confident_joint(y, binary, calibrate=False).tolist(), LABELS[k]
        assert rules["calibrated_joint"] == compute_confident_joint(y, binary, calibrate=True).tolist(), LABELS[k]
        ours = [names.index(issue["image_index"]) for issue in finding["issues"]]
        assert ours == ranked[k].tolist(), LABELS[k]
        flagged += len(ours)
    # The noise was found: thousands of issues, not a handful.
    assert flagged > 2000, flagged


def test_the_rules_equal_cleanlabs_on_small_and_lopsided_classes(tmp_path):
    """Classes of one or two examples, a class the probabilities all deny, calibrated diagonals
    of zero: the edges where counting, calibration and pruning each have a rule of their own."""
    rng = np.random.default_rng(11)
    for case in range(40):
        n = int(rng.integers(3, 25))
        given = rng.random(n) < rng.uniform(0.05, 0.95)
        given[:2] = [True, False]  # both classes present
        p = rng.random(n) if case % 2 else np.where(given, rng.uniform(0, 0.6, n), rng.uniform(0.4, 1, n))
        folder = tmp_path / str(case)
        folder.mkdir()
        names = write_data_entry(folder / "Data_Entry_2017.csv", np.arange(n) + 1, np.pad(given[:, None], ((0, 0), (0, 13))))
        pq.write_table(pa.table({"image_index": names, "finding": ["Atelectasis"] * n, "p": p}), folder / "p.parquet")
        report, _, _ = label_issues(folder, folder / "Data_Entry_2017.csv", "--probabilities", str(folder / "p.parquet"),
                                    "--findings", "Atelectasis")
        finding = report["findings"][0]
        binary = np.stack([1 - p, p], axis=1)
        y = given.astype(int)
        assert finding["rules"]["calibrated_joint"] == compute_confident_joint(y, binary).tolist(), (case, list(y), list(p))
        ours = [names.index(issue["image_index"]) for issue in finding["issues"]]
        assert ours == find_label_issues(y, binary, return_indices_ranked_by="self_confidence").tolist(), (case, list(y), list(p))


def test_the_probes_equal_scikit_learns_on_the_same_folds_and_no_patient_straddles_them(tmp_path):
    rng = np.random.default_rng(3)
    images, dims = 240, 6
    patients = rng.integers(1, 90, images)
    truth = rng.random((images, 3)) < [0.3, 0.2, 0.4]
    directions = rng.normal(0, 1, (3, dims))
    features = (rng.normal(0, 1, (images, dims)) + truth.astype(float) @ directions) * rng.uniform(0.1, 50, dims)
    features = features.astype(np.float32)
    given14 = np.zeros((images, 14), bool)
    given14[:, [1, 2, 4]] = truth
    names = write_data_entry(tmp_path / "Data_Entry_2017.csv", patients, given14)
    pq.write_table(pa.table({"image_index": names, "features": [list(map(float, f)) for f in features]}).cast(
        pa.schema([("image_index", pa.string()), ("features", pa.list_(pa.float32()))])), tmp_path / "f.parquet")

    findings = "Cardiomegaly,Effusion,Mass"
    report, out, stdout = label_issues(tmp_path, tmp_path / "Data_Entry_2017.csv", "--features", str(tmp_path / "f.parquet"),
                                       "--findings", findings, "--folds", "4", "--grid", "0.01,0.1,1")
    oof = pq.read_table(out / "out_of_fold.parquet").to_pandas()
    assert len(oof) == 3 * images
    assert (oof.groupby("patient_id")["fold"].nunique() == 1).all(), "a patient's images fall in two folds"
    for k, finding in enumerate(findings.split(",")):
        rows = oof[oof.finding == finding].set_index("image_index").loc[names]
        probes = report["findings"][k]["probes"]
        y = rows.nih_label.to_numpy()
        folds = rows.fold.to_numpy()
        for fold in range(4):
            train, held = folds != fold, folds == fold
            scaler = StandardScaler().fit(features[train].astype(np.float64))
            model = LogisticRegression(C=probes["chosen_c"][fold], tol=1e-12, max_iter=100_000)
            model.fit(scaler.transform(features[train].astype(np.float64)), y[train])
            theirs = model.predict_proba(scaler.transform(features[held].astype(np.float64)))[:, 1]
            np.testing.assert_allclose(rows.p.to_numpy()[held], theirs, rtol=0, atol=1e-5, err_msg=f"{finding} fold {fold}")
            # The strength chosen is the grid's best on the training folds alone.
            assert probes["chosen_c"][fold] == [0.01, 0.1, 1][int(np.argmin(probes["inner_log_loss"][fold]))]
    assert "Cardiomegaly" in stdout


def test_bad_inputs_are_named(tmp_path):
    names = write_data_entry(tmp_path / "Data_Entry_2017.csv", [1, 1, 2], np.zeros((3, 14), bool))
    pq.write_table(pa.table({"image_index": names, "features": [[1.0, 2.0], [1.0], [3.0, 4.0]]}), tmp_path / "ragged.parquet")
    pq.write_table(pa.table({"image_index": names, "vector": [[1.0]] * 3}), tmp_path / "unnamed.parquet")
    pq.write_table(pa.table({"image_index": ["00000009_000.png"], "features": [[1.0]]}), tmp_path / "stranger.parquet")
    (tmp_path / "not.parquet").write_text("image_index,features\n")
    for file, message in [
        ("ragged.parquet", "row 1 (00000001_001.png): 1 features where the first row has 2"),
        ("unnamed.parquet", 'no column "features"'),
        ("stranger.parquet", "image 00000009_000.png is not in NIH's metadata"),
        ("not.parquet", "not a readable Parquet file"),
    ]:
        done = subprocess.run([BIN, "label-issues", "--data-entry", str(tmp_path / "Data_Entry_2017.csv"),
                               "--features", str(tmp_path / file), "--out", str(tmp_path / "out")],
                              capture_output=True, text=True)
        assert done.returncode != 0 and message in done.stderr, (file, done.stderr)
        assert not (tmp_path / "out").exists()
