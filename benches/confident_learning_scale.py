"""The probes' cost at scale: `label-issues` on random features beside scikit-learn fitting the
same probes (the same folds, strengths, standardisation and nested choice), in one run, so that
the ratio holds on a noisy machine. Prints the times, the ratio, the tool's peak memory, and what
a linear extrapolation in images x features x findings gives for the full collection (112,120
images of 4,096 features, 15 findings): an estimate, not a measurement.

    python benches/confident_learning_scale.py --bin target/release/bpals-release \
        --images 20000 --dims 512 --findings 3

At the full collection's size scikit-learn's fit would take hours on two cores: `--no-sklearn` times
the tool alone there, and the ratio comes from a smaller run.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from test_confident_learning import LABELS, write_data_entry  # noqa: E402

GRID = [0.001, 0.01, 0.1, 1.0, 10.0]


def make_problem(folder, images, dims, findings, seed=0):
    """Random features in which each finding is a noisy linear direction, patients of 3 images."""
    rng = np.random.default_rng(seed)
    features = rng.normal(0, 1, (images, dims)).astype(np.float32)
    directions = rng.normal(0, 1, (dims, findings)) / np.sqrt(dims)
    logits = features @ directions * 3 + rng.normal(0, 1, (images, findings)) - 1.5
    given = np.zeros((images, 14), bool)
    given[:, :findings] = logits > 0
    names = write_data_entry(folder / "Data_Entry_2017.csv", np.arange(images) // 3 + 1, given)
    column = pa.FixedSizeListArray.from_arrays(pa.array(features.reshape(-1)), dims)
    pq.write_table(pa.table({"image_index": names, "features": column}), folder / "features.parquet")
    return features, given[:, :findings]


def tool(binary, folder, findings):
    """Seconds, and peak resident memory in GiB (GNU time's, of the tool alone: a fork of this
    Python process would count its own memory before the exec)."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "peak_kib=%M", binary, "label-issues", "--data-entry", str(folder / "Data_Entry_2017.csv"),
                           "--features", str(folder / "features.parquet"), "--out", str(folder / "out"),
                           "--findings", ",".join(LABELS[:findings])], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    peak_kib = int(done.stderr.rsplit("peak_kib=", 1)[1].split()[0])
    return seconds, peak_kib / 2**20


def sklearn_same_probes(features, labels, folds, k):
    """The tool's scheme: for every pair of folds a path over the grid on the rest (warm-started),
    then each fold's probe at its chosen strength."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss
    from sklearn.preprocessing import StandardScaler

    start = time.perf_counter()
    x = features.astype(np.float64)
    for y in labels.T:
        inner = np.zeros((k, len(GRID)))
        for f in range(k):
            for g in range(f + 1, k):
                train = (folds != f) & (folds != g)
                scaler = StandardScaler().fit(x[train])
                model = LogisticRegression(warm_start=True, max_iter=10_000)
                for ci, c in enumerate(GRID):
                    model.set_params(C=c).fit(scaler.transform(x[train]), y[train])
                    for held, outer in [(g, f), (f, g)]:
                        rows = folds == held
                        p = model.predict_proba(scaler.transform(x[rows]))[:, 1]
                        inner[outer, ci] += log_loss(y[rows], p, labels=[0, 1]) * rows.sum()
        for f in range(k):
            train = folds != f
            scaler = StandardScaler().fit(x[train])
            c = GRID[int(np.argmin(inner[f]))]
            LogisticRegression(C=c, max_iter=10_000).fit(scaler.transform(x[train]), y[train])
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--dims", type=int, default=512)
    parser.add_argument("--findings", type=int, default=3)
    parser.add_argument("--no-sklearn", action="store_true", help="time the tool alone")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = __import__("pathlib").Path(tmp)
        features, labels = make_problem(folder, args.images, args.dims, args.findings)
        if args.no_sklearn:
            del features  # the tool's memory is measured alone, but the machine's is shared
        ours, peak_gib = tool(args.bin, folder, args.findings)
        theirs = None
        if not args.no_sklearn:
            oof = pq.read_table(folder / "out" / "out_of_fold.parquet").to_pandas()
            first = oof[oof.finding == LABELS[0]]
            folds = first.set_index("image_index").fold.loc[[f"{i // 3 + 1:08d}_{i % 3:03d}.png" for i in range(args.images)]].to_numpy()
            theirs = sklearn_same_probes(features, labels, folds, 5)
    scale = 112_120 * 4_096 * 15 / (args.images * args.dims * args.findings)
    print(f"| images | features | findings | label-issues | scikit-learn | ratio | peak memory | x{scale:.0f} to the full collection |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    sklearn = "not run" if theirs is None else f"{theirs:.1f} s"
    ratio = "" if theirs is None else f"{ours / theirs:.2f}"
    print(f"| {args.images:,} | {args.dims:,} | {args.findings} | {ours:.1f} s | {sklearn} | {ratio} | "
          f"{peak_gib:.2f} GiB | about {ours * scale / 60:.1f} min (estimate) |")
    return ours, theirs


if __name__ == "__main__":
    main()
