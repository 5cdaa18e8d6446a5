"""Signed releases checked without our tool: OpenSSF model_signing's own CLI verifies what
`bpals-release sign` wrote (and our verify accepts what model_signing signed), and the
provenance's DSSE envelope is checked with `cryptography` alone (PAE and ECDSA), its subject
and dependencies against the release's files and build.lock.
"""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BPALS_BIN", os.path.join(ROOT, "target", "debug", "bpals-release"))
KEYS = os.path.join(ROOT, "fixtures", "keys")
MODEL_SIGNING = os.path.join(os.path.dirname(sys.executable), "model_signing")


def run(*args, check=True):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BPALS_")}
    return subprocess.run(list(args), check=check, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def unsigned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("signing")
    out = tmp / "s1a"
    run(BIN, "build", os.path.join(ROOT, "tests", "specs", "s1a-fixture-scorer.yaml"), "--out", str(out),
        "--cache-dir", str(tmp / "cache"), "--no-progress")
    return out


@pytest.fixture
def release(unsigned, tmp_path):
    """A fresh copy of the sample release, signed by our tool with the P-256 test key."""
    copy = tmp_path / "release"
    shutil.copytree(unsigned, copy)
    run(BIN, "sign", str(copy), "--key", os.path.join(KEYS, "p256.pem"))
    return copy


def model_signing_verify(directory, public="p256.pub.pem"):
    return run(MODEL_SIGNING, "verify", "key", str(directory), "--signature", str(directory / "release.sig"),
               "--public_key", os.path.join(KEYS, public), check=False)


def our_verify(directory, public="p256.pub.pem"):
    return run(BIN, "verify", str(directory), "--public-key", os.path.join(KEYS, public), "--require-signature",
               check=False)


def test_model_signing_accepts_our_signature(release):
    result = model_signing_verify(release)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Verification succeeded" in result.stdout


def test_model_signing_refuses_a_changed_added_or_removed_file(release):
    shard = release / "data" / "trial-00000-of-00001.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    for verify in (model_signing_verify, our_verify):
        assert verify(release).returncode != 0
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    assert model_signing_verify(release).returncode == 0

    (release / "added.txt").write_text("not part of the release")
    for verify in (model_signing_verify, our_verify):
        assert verify(release).returncode != 0
    (release / "added.txt").unlink()

    (release / "eval.json").unlink()
    for verify in (model_signing_verify, our_verify):
        assert verify(release).returncode != 0


def test_model_signing_refuses_another_key(release):
    assert model_signing_verify(release, "p256-sec1.pub.pem").returncode != 0


def test_our_verify_accepts_a_signature_model_signing_made(unsigned, tmp_path):
    copy = tmp_path / "release"
    shutil.copytree(unsigned, copy)
    signed = run(MODEL_SIGNING, "sign", "key", str(copy), "--private_key", os.path.join(KEYS, "p256.pem"),
                 "--signature", str(copy / "release.sig"), check=False)
    assert signed.returncode == 0, signed.stdout + signed.stderr
    result = our_verify(copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok: release.sig signs all" in result.stdout
    # ...and refuses it once a file changes.
    (copy / "LICENSE.md").write_text("edited")
    assert our_verify(copy).returncode != 0


def pae(payload_type, payload):
    return b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type.encode(), len(payload), payload)


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_provenance_holds_under_an_independent_dsse_check(release):
    lines = (release / "provenance.intoto.jsonl").read_text().splitlines()
    assert len(lines) == 1
    envelope = json.loads(lines[0])
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    payload = base64.b64decode(envelope["payload"])
    with open(os.path.join(KEYS, "p256.pub.pem"), "rb") as f:
        public = serialization.load_pem_public_key(f.read())
    signature = base64.b64decode(envelope["signatures"][0]["sig"])
    public.verify(signature, pae(envelope["payloadType"], payload), ec.ECDSA(hashes.SHA256()))
    with pytest.raises(Exception):
        public.verify(signature, pae(envelope["payloadType"], payload + b" "), ec.ECDSA(hashes.SHA256()))

    statement = json.loads(payload)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    # The subject: every release file but the two signature files, with its sha256.
    files = sorted(str(p.relative_to(release)) for p in release.rglob("*") if p.is_file())
    expected = {f: sha256(release / f) for f in files if f not in ("release.sig", "provenance.intoto.jsonl")}
    assert {s["name"]: s["digest"]["sha256"] for s in statement["subject"]} == expected

    # The dependencies: what build.lock pins, by digest.
    lock = json.loads((release / "build.lock").read_text())
    deps = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    for name, pinned in lock["inputs"].items():
        assert deps[name]["digest"]["sha256"] == pinned["sha256"]
    assert deps["images.sha256"]["digest"]["sha256"] == sha256(release / "images.sha256") == lock["images"]["sha256"]
    assert deps[lock["scorer"]["model_id"]]["annotations"]["revision"] == lock["scorer"]["revision"]
    definition = statement["predicate"]["buildDefinition"]
    assert definition["externalParameters"]["spec"]["sha256"] == lock["spec_sha256"]
    assert definition["internalParameters"]["tool"] == lock["tool"]
    assert statement["predicate"]["runDetails"]["builder"]["id"].startswith("https://")
