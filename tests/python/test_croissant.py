"""croissant.json read by MLCommons' own client (mlcroissant): it loads with no error or
warning, carries the Responsible-AI fields, its FileObjects' sha256 are the files', and every
record set yields exactly the rows pyarrow reads from the shards (every column, every row).

Reads the embedded-sample S1a, S1b and S2 releases, built once per session with the project's
binary (helpers.sample_release), and one with confident learning's columns.
"""
import hashlib
import json
import logging
import math
import os

import mlcroissant as mlc
import pyarrow.parquet as pq
import pytest

from helpers import ROOT, build_sample, sample_release


RAI_FIELDS = [
    "data_collection", "data_collection_type", "data_limitations", "data_biases", "data_use_cases",
    "data_social_impact", "personal_sensitive_information", "annotations_per_item",
    "machine_annotation_tools", "data_annotation_protocol",
]


@pytest.fixture(scope="module", params=["s1a", "s1b", "s2", "confident-learning"])
def release(request, tmp_path_factory):
    if request.param == "confident-learning":
        return confident_learning_release(tmp_path_factory)
    return sample_release(request.param, tmp_path_factory)


def confident_learning_release(tmp_path_factory):
    """S1a with the fixture scorer and `signal.confident_learning`: the columns it adds
    (`cl_confidence`, null where a finding has no probe, and `cl_label_issue`) as Croissant
    describes them. The fixture's features are a hash of each image, so its figures mean
    nothing; the build takes seconds."""
    spec = tmp_path_factory.mktemp("confident-learning") / "spec.yaml"
    base = os.path.join(ROOT, "tests", "specs", "s1a-fixture-scorer.yaml")
    spec.write_text(f"extends: {base}\nsignal:\n  confident_learning:\n    folds: 3\n    grid: [0.1, 1]\n")
    out = spec.parent / "release"
    build_sample(str(spec), out, tmp_path_factory)
    return out


@pytest.fixture(scope="module")
def loaded(release, caplog_module):
    return mlc.Dataset(jsonld=str(release / "croissant.json"))


@pytest.fixture(scope="module")
def caplog_module():
    """Every warning mlcroissant logs while loading, kept for the test that reads them."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger().addHandler(handler)
    yield records
    logging.getLogger().removeHandler(handler)


def test_mlcroissant_loads_it_without_errors_or_warnings(loaded, caplog_module):
    issues = loaded.metadata.ctx.issues
    assert not issues.errors, issues.report()
    assert not issues.warnings, issues.report()
    logged = [r.getMessage() for r in caplog_module if r.levelno >= logging.WARNING]
    assert not logged, logged


def test_it_conforms_to_croissant_1_1_and_rai_1_0_with_every_rai_field(release, loaded):
    doc = json.loads((release / "croissant.json").read_text())
    assert doc["conformsTo"] == ["http://mlcommons.org/croissant/1.1", "http://mlcommons.org/croissant/RAI/1.0"]
    for field in RAI_FIELDS:
        assert getattr(loaded.metadata, field), field
    assert doc["prov:wasDerivedFrom"]["@id"] == "https://nihcc.app.box.com/v/ChestXray-NIHCC"
    assert "@inproceedings{wang2017chestxray8" in doc["citeAs"]
    lock = json.loads((release / "build.lock").read_text())
    assert doc["version"] == lock["spec"]["release"]["version"]
    assert doc["datePublished"] == lock["spec"]["release"]["date"]
    assert lock["scorer"]["model_id"] in " ".join(loaded.metadata.machine_annotation_tools)


def test_every_file_object_is_in_the_manifest_with_its_sha256(release):
    doc = json.loads((release / "croissant.json").read_text())
    listed = {f["path"]: f for f in json.loads((release / "manifest.json").read_text())["files"]}
    objects = [d for d in doc["distribution"] if d["@type"] == "cr:FileObject"]
    shards = [p for p in listed if p.endswith(".parquet")]
    assert sorted(o["contentUrl"] for o in objects) == sorted(shards + ["images.sha256"])
    for o in objects:
        data = (release / o["contentUrl"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == o["sha256"] == listed[o["contentUrl"]]["sha256"]
    assert "croissant.json" in listed


def same(a, b):
    if isinstance(a, bytes):
        a = a.decode()
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def test_each_record_set_yields_exactly_the_rows_pyarrow_reads(release, loaded):
    doc = json.loads((release / "croissant.json").read_text())
    file_sets = {d["@id"]: d["includes"] for d in doc["distribution"] if d["@type"] == "cr:FileSet"}
    assert loaded.metadata.record_sets
    for record_set in doc["recordSet"]:
        name = record_set["@id"]
        pattern = file_sets[record_set["field"][0]["source"]["fileSet"]["@id"]]
        shards = sorted(release.glob(pattern))
        assert shards, pattern
        table = pq.ParquetFile(shards[0]).read() if len(shards) == 1 else None
        rows = [r for s in shards for r in pq.read_table(s).to_pylist()] if table is None else table.to_pylist()
        columns = [f["name"] for f in record_set["field"]]
        assert columns == list(rows[0].keys()), f"{name}: every column, in order"
        records = list(loaded.records(name))
        assert len(records) == len(rows), name
        for i, (record, row) in enumerate(zip(records, rows)):
            for column in columns:
                assert same(record[f"{name}/{column}"], row[column]), (name, i, column, record[f"{name}/{column}"], row[column])
