"""A built release, read the way buyers read it: pyarrow, polars, DuckDB, and the Hub's YAML.

Reads the embedded-sample S1b, S2 and S4 releases (full + trial splits), built once per session
with the project's binary (helpers.sample_release); every reader test runs on each.
"""
import fnmatch
import hashlib
import json
import math
import os
import re

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from helpers import build_sample, sample_release

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module", params=["s1b", "s2", "s4"])
def release(request, tmp_path_factory):
    return sample_release(request.param, tmp_path_factory)


def manifest(release):
    with open(release / "manifest.json") as f:
        return json.load(f)


def card_parts(release):
    text = (release / "README.md").read_text()
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(front), body


def documented_columns(body, heading="## Schema"):
    section = body.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.M)


def test_sha256sum_agrees_with_the_manifest(release):
    for f in manifest(release)["files"]:
        data = (release / f["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == f["sha256"], f["path"]
        assert len(data) == f["bytes"]


def test_readers_agree_on_schema_and_rows(release):
    _, body = card_parts(release)
    pair_columns = documented_columns(body)
    image_columns = documented_columns(body, "## Error trace")
    assert pair_columns[:2] == image_columns[:2] == ["image_index", "patient_id"]
    for f in manifest(release)["files"]:
        if not f["path"].endswith(".parquet"):
            continue
        columns = image_columns if f["path"].startswith("data/images/") else pair_columns
        path = str(release / f["path"])
        table = pq.read_table(path)
        assert table.column_names == columns
        assert table.num_rows == f["rows"]
        meta = pq.read_metadata(path).metadata
        assert meta[b"bpals.release_id"] == release.name.encode()
        assert meta[b"bpals.schema_version"] == b"1"
        df = pl.read_parquet(path)
        assert df.columns == columns and df.height == f["rows"]
        ((n,),) = duckdb.sql(f"select count(*) from read_parquet('{path}')").fetchall()
        assert n == f["rows"]


def test_signal_columns_are_consistent(release):
    df = pl.read_parquet(str(release / "data" / "full-*.parquet"))
    assert set(df["trust_class"].unique()) <= {"trusted", "review", "suspect", "likely_mislabeled"}
    # confidence is the mean p_yes of the row's raw logits, exactly re-derivable.
    p = df.select(
        pl.struct(["question_logit_yes", "question_logit_no"]).map_elements(
            lambda r: sum(1 / (1 + math.exp(n - y)) for y, n in
                          zip(r["question_logit_yes"], r["question_logit_no"])) / len(r["question_logit_yes"]),
            return_dtype=pl.Float64,
        ).alias("p")
    )["p"]
    assert ((p - df["confidence"]).abs() < 1e-12).all()
    agreement = pl.when(df["nih_label"]).then(df["confidence"]).otherwise(1 - df["confidence"])
    assert ((df.select(agreement.alias("a"))["a"] - df["agreement"]).abs() < 1e-15).all()


def test_front_matter_matches_the_shards(release):
    front, _ = card_parts(release)
    assert front["pretty_name"].lower().startswith(f"cxr14-bpals {release.name}")
    files = {f["path"]: f for f in manifest(release)["files"]}
    parquet = {p for p in files if p.endswith(".parquet")}
    matched = set()
    for config in front["configs"]:
        info = next(i for i in front["dataset_info"] if i["config_name"] == config["config_name"])
        for entry in config["data_files"]:
            paths = [p for p in parquet if fnmatch.fnmatch(p, entry["path"]) and "/" not in p[len(entry["path"].rsplit("/", 1)[0]) + 1:]]
            assert paths, entry
            matched.update(paths)
            split = next(s for s in info["splits"] if s["name"] == entry["split"])
            assert split["num_examples"] == sum(files[p]["rows"] for p in paths)
            names = [f["name"] for f in info["features"]]
            assert names == pq.read_schema(str(release / paths[0])).names
    assert matched == parquet


def test_error_traces_match_the_pair_table(release):
    images = pl.read_parquet(str(release / "data" / "images" / "full-*.parquet"))
    pairs = pl.read_parquet(str(release / "data" / "full-*.parquet"))
    assert images.height == pairs["image_index"].n_unique()
    assert ((images["error_score"] - (-images["k_total"].cast(pl.Float64) / 3.0).exp()).abs() < 1e-12).all()
    assert (images["error_category"].list.len() == images["k_total"]).all()
    # Every NIH-asserted finding the model rejects is a false prediction (category 1).
    rejected = pairs.filter(pl.col("nih_label") & (pl.col("confidence") < 0.5) & (pl.col("label") != "No Finding"))
    false_predictions = images["error_category"].list.eval(pl.element() == 1).list.sum().sum()
    assert false_predictions == rejected.height


def test_trial_rows_are_a_subset_of_full(release):
    full = pl.read_parquet(str(release / "data" / "full-*.parquet"))
    trial = pl.read_parquet(str(release / "data" / "trial-*.parquet"))
    joined = trial.join(full, on=["image_index", "label"], how="inner", suffix="_full")
    assert joined.height == trial.height
    assert (joined["confidence"] == joined["confidence_full"]).all()


def test_trial_covers_cells_round_robin(tmp_path, tmp_path_factory):
    """With a trial smaller than the selection, each trust class spreads its quota over
    (label, view position, devices present) cells: as many distinct cells as it can."""
    spec = tmp_path / "small_trial.yaml"
    spec.write_text(f"extends: {ROOT}/specs/s1b.yaml\nselection:\n  trial:\n    rows: 120\n")
    out = tmp_path / "out"
    build_sample(spec, out, tmp_path_factory)
    cell = [pl.col("label"), pl.col("view_position"), pl.col("support_devices").list.len() > 0]
    full = pl.read_parquet(str(out / "data" / "full-*.parquet"))
    trial = pl.read_parquet(str(out / "data" / "trial-*.parquet"))
    assert trial.height == 120
    for (klass,), rows in trial.group_by(["trust_class"]):
        available = full.filter(pl.col("trust_class") == klass).select(cell).unique().height
        covered = rows.select(cell).unique().height
        assert covered == min(rows.height, available), (klass, covered, rows.height, available)
    assert trial["label"].n_unique() >= 10


S2_COLUMNS = ["location_side", "side_p_right", "side_p_left", "location_zone", "zone_p_upper", "zone_p_middle",
              "zone_p_lower", "box_status", "box_x1", "box_y1", "box_x2", "box_y2", "box_answer", "box_truncated",
              "signs", "sign_logit_yes", "sign_logit_no", "signs_seen", "no_sign_seen"]


def test_s2_adds_columns_and_keeps_every_s1_column(tmp_path_factory):
    s1b, s2 = sample_release("s1b", tmp_path_factory), sample_release("s2", tmp_path_factory)
    a = pl.read_parquet(str(s1b / "data" / "full-*.parquet"))
    b = pl.read_parquet(str(s2 / "data" / "full-*.parquet"))
    assert b.columns == a.columns + S2_COLUMNS
    # An S1 reader reads S2 unchanged: same names, types and values.
    assert b.select(a.columns).equals(a)
    assert b.schema["box_x1"] == pl.Float64 and b.schema["signs"] == pl.List(pl.String)
    # Boxes where NIH asserts a boxed finding, nowhere else; every status is one of four.
    asserted = b.filter(pl.col("nih_label") & (pl.col("label") != "No Finding"))
    assert asserted["box_status"].null_count() == 0
    assert b.filter(pl.col("label") == "No Finding")["box_status"].null_count() == b.filter(pl.col("label") == "No Finding").height
    assert set(b["box_status"].drop_nulls().unique()) <= {"ok", "no_box", "unparseable", "outside_image"}
    ok = b.filter(pl.col("box_status") == "ok")
    assert ok.height > 0 and (ok["box_x1"] < ok["box_x2"]).all() and (ok["box_x2"] <= 128).all()
    # A stated side is the one side answered yes.
    sided = b.filter(pl.col("location_side").is_not_null())
    for row in sided.iter_rows(named=True):
        yes = [s for s in ("right", "left") if row[f"side_p_{s}"] >= 0.5]
        assert yes == [row["location_side"]]
    # The same answers through DuckDB.
    path = str(s2 / "data" / "full-*.parquet")
    ((n,),) = duckdb.sql(f"select count(*) from read_parquet('{path}') where box_status = 'ok'").fetchall()
    assert n == ok.height
    ((m,),) = duckdb.sql(f"select count(*) from read_parquet('{path}') where len(signs) > 0").fetchall()
    assert m == b.filter(pl.col("signs").list.len() > 0).height


def test_s2_card_documents_its_columns_and_location(tmp_path_factory):
    s2 = sample_release("s2", tmp_path_factory)
    front, body = card_parts(s2)
    assert documented_columns(body)[-len(S2_COLUMNS):] == S2_COLUMNS
    features = [f["name"] for f in front["dataset_info"][0]["features"]]
    assert features[-len(S2_COLUMNS):] == S2_COLUMNS
    assert "## Diagnose (S2)" in body and "### Location evaluation" in body
    assert (s2 / "location_eval.json").is_file() and (s2 / "plots" / "full-sample-boxes.png").is_file()


S3_COLUMNS = ["reasoning_text", "reasoning_answer", "reasoning_parsed", "reasoning_says", "reasoning_agrees",
              "reasoning_disagrees", "reasoning_tokens", "reasoning_truncated"]


def test_s4_adds_reasoning_and_reports_and_keeps_every_earlier_column(tmp_path_factory):
    s2, s4 = sample_release("s2", tmp_path_factory), sample_release("s4", tmp_path_factory)
    a = pl.read_parquet(str(s2 / "data" / "full-*.parquet"))
    b = pl.read_parquet(str(s4 / "data" / "full-*.parquet"))
    assert b.columns == a.columns + S3_COLUMNS
    assert b.select(a.columns).equals(a), "an S2 reader reads S4 unchanged"
    assert b.schema["reasoning_says"] == pl.Boolean and b.schema["reasoning_tokens"] == pl.UInt32
    # The flag is exactly the rows whose verdict contradicts the score.
    assert b["reasoning_disagrees"].sum() == b.filter(pl.col("reasoning_agrees") == False).height  # noqa: E712
    images = pq.read_table(str(s4 / "data" / "images" / "full-00000-of-00001.parquet"))
    assert images.schema.field("report_text").type == pa.string()
    assert images.schema.field("report_nih_category").type == pa.list_(pa.int32())
    texts = images.column("report_text").to_pylist()
    assert len(texts) == 640 and all(isinstance(t, str) for t in texts)
    # Scores follow the tuple counts: exp(-K / tau), 1.0 with no tuple.
    rows = images.select(["report_nih_score", "report_nih_k"]).to_pylist()
    assert all((r["report_nih_k"] == 0) == (r["report_nih_score"] == 1.0) for r in rows)
    path = str(s4 / "data" / "images" / "full-*.parquet")
    ((n,),) = duckdb.sql(f"select count(*) from read_parquet('{path}') where len(report_findings) > 0").fetchall()
    assert n == sum(1 for f in images.column("report_findings").to_pylist() if f)
