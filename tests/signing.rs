//! Signed releases: `sign`, `build --sign-key`, `verify --public-key`, with the test-only keys
//! of fixtures/keys (made by its gen_test_keys.sh). The real model_signing checks the same files
//! in tests/python/test_signing.py.

mod common;

use std::path::{Path, PathBuf};

use common::*;

const PASSWORD: &str = "test-password-not-secret";

fn key(name: &str) -> PathBuf {
    repo().join("fixtures/keys").join(name)
}

fn sample(s: &Scratch) -> PathBuf {
    let out = s.path("s1a");
    build(&fixture_s1a(), &out, &s.cache(), &[]).success();
    out
}

fn sign(dir: &Path, key_file: &str) -> assert_cmd::assert::Assert {
    bin().env_remove("BPALS_SIGN_KEY_PASSWORD").arg("sign").arg(dir).arg("--key").arg(key(key_file)).assert()
}

fn verify(dir: &Path, public: &str, extra: &[&str]) -> assert_cmd::assert::Assert {
    bin().arg("verify").arg(dir).arg("--public-key").arg(key(public)).args(extra).assert()
}

fn output(a: &assert_cmd::assert::Assert) -> String {
    stdout(a) + &stderr(a)
}

#[test]
fn a_signed_release_verifies_and_signing_changes_no_other_byte() {
    let s = Scratch::new();
    let dir = sample(&s);
    let before = tree_digest(&dir);
    let a = sign(&dir, "p256.pem").success();
    assert!(stdout(&a).contains("signed ") && stdout(&a).contains("(P-256)"), "{}", stdout(&a));
    let mut after = tree_digest(&dir);
    assert!(after.remove("release.sig").is_some() && after.remove("provenance.intoto.jsonl").is_some());
    assert_eq!(after, before, "signing adds two files and changes nothing else");

    let v = verify(&dir, "p256.pub.pem", &[]).success();
    let text = stdout(&v);
    assert!(text.starts_with("ok: release s1a"), "{text}");
    assert!(text.contains("ok: release.sig signs all 13 files; signed by key"), "{text}");
    assert!(text.contains("builder   https://o5i.github.io/bpals-release/provenance/builders/local-unattested/v1"), "{text}");
    assert!(text.contains("spec      s1a-fixture-scorer.yaml") && text.contains("model     fixture bpals/fixture-scorer@v1"), "{text}");
    assert!(text.contains("signed after the build: no run times"), "{text}");
    // Without a key, verify says there is a signature it did not check.
    let plain = bin().arg("verify").arg(&dir).assert().success();
    assert!(stdout(&plain).contains("note: the release is signed; pass --public-key"), "{}", stdout(&plain));
}

#[test]
fn every_supported_key_kind_signs_and_the_fingerprint_is_the_keys() {
    for (private, public) in [("p256-sec1.pem", "p256-sec1.pub.pem"), ("p384.pem", "p384.pub.pem")] {
        let s = Scratch::new();
        let dir = sample(&s);
        sign(&dir, private).success();
        verify(&dir, public, &["--require-signature"]).success();
    }
    let s = Scratch::new();
    let dir = sample(&s);
    let a = bin().env("BPALS_SIGN_KEY_PASSWORD", PASSWORD).arg("sign").arg(&dir).arg("--key").arg(key("p256-encrypted.pem")).assert();
    let text = output(&a.success());
    assert!(!text.contains(PASSWORD), "the password never appears: {text}");
    let v = verify(&dir, "p256-encrypted.pub.pem", &["--json"]).success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&v)).unwrap();
    // The fingerprint is sha256 of the key's DER SubjectPublicKeyInfo.
    let pem = std::fs::read_to_string(key("p256-encrypted.pub.pem")).unwrap();
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    use base64::Engine;
    let der = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
    use sha2::Digest;
    assert_eq!(report["signature"]["fingerprint"], hex::encode(sha2::Sha256::digest(der)));
    assert_eq!(report["signature"]["files_signed"], 13);
}

#[test]
fn a_changed_added_or_removed_file_fails_the_signature() {
    let s = Scratch::new();
    let dir = sample(&s);
    sign(&dir, "p256.pem").success();
    let shard = dir.join("data/trial-00000-of-00001.parquet");
    let original = std::fs::read(&shard).unwrap();
    let mut changed = original.clone();
    let middle = changed.len() / 2;
    changed[middle] ^= 1;
    std::fs::write(&shard, &changed).unwrap();
    let text = stdout(&verify(&dir, "p256.pub.pem", &[]).failure());
    assert!(text.contains("release.sig: changed since signing: data/trial-00000-of-00001.parquet"), "{text}");
    std::fs::write(&shard, &original).unwrap();
    verify(&dir, "p256.pub.pem", &[]).success();

    std::fs::write(dir.join("extra.txt"), "not part of the release").unwrap();
    let text = stdout(&verify(&dir, "p256.pub.pem", &[]).failure());
    assert!(text.contains("release.sig: not signed: extra.txt is in the release but not in the signature"), "{text}");
    std::fs::remove_file(dir.join("extra.txt")).unwrap();

    std::fs::remove_file(dir.join("eval.json")).unwrap();
    let text = stdout(&verify(&dir, "p256.pub.pem", &[]).failure());
    assert!(text.contains("release.sig: missing: eval.json is signed but not in the release"), "{text}");
}

#[test]
fn the_wrong_key_a_damaged_signature_or_a_foreign_provenance_is_refused() {
    let s = Scratch::new();
    let dir = sample(&s);
    sign(&dir, "p256.pem").success();
    let text = stdout(&verify(&dir, "p256-sec1.pub.pem", &[]).failure());
    assert!(text.contains("release.sig was signed by another key"), "{text}");
    assert!(text.contains("provenance.intoto.jsonl no signature in it was made by the key"), "{text}");

    let sig = dir.join("release.sig");
    let good = std::fs::read_to_string(&sig).unwrap();
    std::fs::write(&sig, &good[..good.len() / 2]).unwrap();
    let text = stdout(&verify(&dir, "p256.pub.pem", &[]).failure());
    assert!(text.contains("release.sig is not a Sigstore bundle"), "{text}");

    // An edited statement: the payload no longer matches its signature.
    let mut bundle: serde_json::Value = serde_json::from_str(&good).unwrap();
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = String::from_utf8(b64.decode(bundle["dsseEnvelope"]["payload"].as_str().unwrap()).unwrap()).unwrap();
    let edited = payload.replacen("\"name\": \"eval.json\"", "\"name\": \"eval.jsom\"", 1);
    assert_ne!(edited, payload);
    bundle["dsseEnvelope"]["payload"] = b64.encode(edited).into();
    std::fs::write(&sig, serde_json::to_string(&bundle).unwrap()).unwrap();
    let text = stdout(&verify(&dir, "p256.pub.pem", &[]).failure());
    assert!(text.contains("release.sig no signature in it was made by the key"), "{text}");
    std::fs::write(&sig, &good).unwrap();

    // A provenance from another release, signed by the same key: its subject does not match
    // (and the signature sees the file changed).
    let other = s.path("other");
    build(&fixture_s1b(), &other, &s.cache(), &[]).success();
    sign(&other, "p256.pem").success();
    std::fs::copy(other.join("provenance.intoto.jsonl"), dir.join("provenance.intoto.jsonl")).unwrap();
    let text = stdout(&verify(&dir, "p256.pub.pem", &[]).failure());
    assert!(text.contains("release.sig: changed since signing: provenance.intoto.jsonl"), "{text}");
    assert!(text.contains("provenance.intoto.jsonl names LICENSE.md with another sha256 than the file has"), "{text}");
}

#[test]
fn an_unsigned_release_passes_unless_a_signature_is_required() {
    let s = Scratch::new();
    let dir = sample(&s);
    let text = stdout(&verify(&dir, "p256.pub.pem", &[]).success());
    assert!(text.contains("UNSIGNED: the release has no release.sig"), "{text}");
    verify(&dir, "p256.pub.pem", &["--require-signature"]).failure();
    let a = bin().arg("verify").arg(&dir).arg("--require-signature").assert().failure();
    assert!(stderr(&a).contains("--public-key"), "{}", stderr(&a));
}

#[test]
fn bad_keys_are_refused_with_the_file_named_and_nothing_is_written() {
    let s = Scratch::new();
    let dir = sample(&s);
    let before = tree_digest(&dir);
    let cases = [
        ("missing.pem", "cannot read the key file"),
        ("rsa.pem", "is an RSA key; release signing takes elliptic-curve keys on P-256 or P-384"),
        ("ed25519.pem", "is an Ed25519 key"),
        ("p521.pem", "is a P-521 key"),
        ("p256.pub.pem", "is a public key; signing needs the private key"),
        ("p256-legacy-encrypted.pem", "legacy PEM encryption"),
        ("p256-encrypted.pem", "is password-protected: set BPALS_SIGN_KEY_PASSWORD"),
        ("gen_test_keys.sh", "is not a PEM key"),
    ];
    for (file, message) in cases {
        let a = sign(&dir, file).failure();
        let err = stderr(&a);
        assert!(err.contains(&key(file).display().to_string()) && err.contains(message), "{file}: {err}");
    }
    let a = bin()
        .env("BPALS_SIGN_KEY_PASSWORD", "wrong-password-value")
        .arg("sign")
        .arg(&dir)
        .arg("--key")
        .arg(key("p256-encrypted.pem"))
        .assert()
        .failure();
    let err = stderr(&a);
    assert!(err.contains("wrong password") && !err.contains("wrong-password-value"), "{err}");
    for (public, message) in [("rsa.pub.pem", "is an RSA key"), ("p256.pem", "expected a PUBLIC KEY")] {
        let err = stderr(&verify(&dir, public, &[]).failure());
        assert!(err.contains(message) && err.contains(&key(public).display().to_string()), "{err}");
    }
    assert_eq!(tree_digest(&dir), before, "no refused key wrote anything");

    // A build with a bad key stops before any work: no release directory appears.
    let out = s.path("never");
    let a = build(&fixture_s1a(), &out, &s.cache(), &["--sign-key", key("rsa.pem").to_str().unwrap()]).failure();
    assert!(stderr(&a).contains("is an RSA key"), "{}", stderr(&a));
    assert!(!out.exists());
}

#[test]
fn sign_refuses_a_release_that_does_not_match_its_manifest() {
    let s = Scratch::new();
    let dir = sample(&s);
    std::fs::write(dir.join("notes.txt"), "added after the build").unwrap();
    let err = stderr(&sign(&dir, "p256.pem").failure());
    assert!(err.contains("refusing to sign") && err.contains("extra (not in the manifest): notes.txt"), "{err}");
    assert!(!dir.join("release.sig").exists() && !dir.join("provenance.intoto.jsonl").exists());
}

#[test]
fn signed_and_unsigned_builds_differ_only_by_the_two_signature_files() {
    let s = Scratch::new();
    let plain = s.path("plain");
    build(&fixture_s1a(), &plain, &s.cache(), &[]).success();
    let signed = s.path("signed");
    let a = build(
        &fixture_s1a(),
        &signed,
        &s.cache(),
        &["--sign-key", key("p384.pem").to_str().unwrap(), "--builder-id", "https://ci.example/workflows/release@refs/tags/v1"],
    )
    .success();
    assert!(stderr(&a).contains("sign: 13 files signed by key"), "{}", stderr(&a));
    let mut files = tree_digest(&signed);
    let provenance = std::fs::read_to_string(signed.join("provenance.intoto.jsonl")).unwrap();
    assert!(files.remove("release.sig").is_some() && files.remove("provenance.intoto.jsonl").is_some());
    assert_eq!(files, tree_digest(&plain), "every data file, the card and the manifest are identical");

    let text = stdout(&verify(&signed, "p384.pub.pem", &["--require-signature"]).success());
    assert!(text.contains("builder   https://ci.example/workflows/release@refs/tags/v1"), "{text}");
    assert!(text.contains("  built     20"), "a build states its run times: {text}");
    let envelope: serde_json::Value = serde_json::from_str(provenance.trim()).unwrap();
    use base64::Engine;
    let statement: serde_json::Value =
        serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(envelope["payload"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(statement["predicateType"], "https://slsa.dev/provenance/v1");
    let arguments = &statement["predicate"]["buildDefinition"]["externalParameters"]["arguments"];
    assert!(arguments["spec_as_written"].as_str().unwrap().contains("extends:"), "{arguments}");
    let runtime = &statement["predicate"]["runDetails"]["byproducts"][0]["annotations"];
    assert_eq!(runtime["signed_after_build"], false);
}

#[test]
fn the_private_key_never_appears_in_output_or_the_release() {
    let s = Scratch::new();
    let dir = sample(&s);
    let pem = std::fs::read_to_string(key("p256-encrypted.pem")).unwrap();
    let body: Vec<&str> = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let a = bin()
        .env("BPALS_SIGN_KEY_PASSWORD", PASSWORD)
        .arg("sign")
        .arg(&dir)
        .arg("--key")
        .arg(key("p256-encrypted.pem"))
        .arg("--json")
        .assert()
        .success();
    let mut seen = output(&a);
    for file in files_under(&dir) {
        seen.push_str(&String::from_utf8_lossy(&std::fs::read(file).unwrap()));
    }
    assert!(!seen.contains(PASSWORD));
    for line in body {
        assert!(!seen.contains(line), "a line of the private key appears");
    }
}

#[path = "fake_hub/mod.rs"]
mod fake_hub;

const TOKEN: &str = "hf_fakeTOKENvalue0123456789";
const REPO: &str = "bpals-test/cxr14-bpals-signed";

fn publish(hub: &fake_hub::FakeHub, dir: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    publish_to(&hub.url, TOKEN, REPO, dir, extra)
}

fn verify_remote(hub: &fake_hub::FakeHub, public: &str) -> assert_cmd::assert::Assert {
    bin()
        .env("HF_TOKEN", TOKEN)
        .args(["verify", "--remote", REPO, "--endpoint", &hub.url, "--require-signature", "--public-key"])
        .arg(key(public))
        .assert()
}

#[test]
fn a_signed_release_is_published_in_one_commit_and_verifies_on_the_hub() {
    let s = Scratch::new();
    let dir = sample(&s);
    sign(&dir, "p256.pem").success();
    let hub = fake_hub::FakeHub::start(Some(TOKEN));
    // A signed release is checked before anything goes out: without the key, or with another, no.
    let err = stderr(&publish(&hub, &dir, &[]).failure());
    assert!(err.contains("is signed: pass --public-key"), "{err}");
    let err = stderr(&publish(&hub, &dir, &["--public-key", key("p384.pub.pem").to_str().unwrap()]).failure());
    assert!(err.contains("its signature does not hold"), "{err}");
    assert!(hub.repo(REPO).is_none(), "nothing was created or uploaded");

    let a = publish(&hub, &dir, &["--public-key", key("p256.pub.pem").to_str().unwrap()]).success();
    assert!(stderr(&a).contains("signature: 13 files signed by key"), "{}", stderr(&a));
    assert_eq!(hub.release_commits(REPO), 1, "one commit");
    let head = hub.repo(REPO).unwrap().head().clone();
    assert!(head.files.contains_key("release.sig") && head.files.contains_key("provenance.intoto.jsonl"), "both files in the commit");

    let text = stdout(&verify_remote(&hub, "p256.pub.pem").success());
    assert!(text.contains("ok: release.sig signs all 13 files"), "{text}");
    let text = stdout(&verify_remote(&hub, "p256-sec1.pub.pem").failure());
    assert!(text.contains("release.sig was signed by another key"), "{text}");

    // A file changed on the Hub behind the publisher's back fails the manifest and the signature.
    hub.tamper(REPO, "eval.json", Some(b"{}"));
    let text = stdout(&verify_remote(&hub, "p256.pub.pem").failure());
    assert!(text.contains("release.sig: changed since signing: eval.json"), "{text}");
}

#[test]
fn publish_refuses_a_release_whose_signature_no_longer_holds() {
    let s = Scratch::new();
    let dir = sample(&s);
    sign(&dir, "p256.pem").success();
    // Re-signed provenance from a different key: release.sig no longer matches it.
    let other = s.path("other");
    copy_tree(&dir, &other);
    sign(&other, "p256-sec1.pem").success();
    std::fs::copy(other.join("provenance.intoto.jsonl"), dir.join("provenance.intoto.jsonl")).unwrap();
    let hub = fake_hub::FakeHub::start(Some(TOKEN));
    let err = stderr(&publish(&hub, &dir, &["--public-key", key("p256.pub.pem").to_str().unwrap()]).failure());
    assert!(err.contains("changed since signing: provenance.intoto.jsonl"), "{err}");
    assert!(hub.repo(REPO).is_none());
}

#[test]
fn a_spec_that_names_the_publisher_key_carries_it_and_takes_only_its_signature() {
    let s = Scratch::new();
    std::fs::copy(key("p256.pub.pem"), s.path("publisher.pub.pem")).unwrap();
    let spec = derived_spec(&s, "keyed.yaml", "publish:\n  public_key: publisher.pub.pem\n");
    // Another key is refused before any work.
    let out = s.path("keyed");
    let a = build(&spec, &out, &s.cache(), &["--sign-key", key("p384.pem").to_str().unwrap()]).failure();
    assert!(stderr(&a).contains("is not the publisher key the spec names in publish.public_key"), "{}", stderr(&a));
    assert!(!out.exists());

    build(&spec, &out, &s.cache(), &["--sign-key", key("p256.pem").to_str().unwrap()]).success();
    let copy = std::fs::read_to_string(out.join("publisher-key.pub.pem")).unwrap();
    assert_eq!(copy, std::fs::read_to_string(key("p256.pub.pem")).unwrap(), "the release carries the key as OpenSSL writes it");
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    let v = verify(&out, "p256.pub.pem", &["--json"]).success();
    let fingerprint =
        serde_json::from_str::<serde_json::Value>(&stdout(&v)).unwrap()["signature"]["fingerprint"].as_str().unwrap().to_string();
    assert!(card.contains("### Checking the signature") && card.contains(&format!("`{fingerprint}` (P-256)")), "{card}");
    assert!(card.contains("model_signing verify key path/to/release"), "{card}");
    // Signing again afterwards with another key is refused too.
    let err = stderr(&sign(&out, "p256-sec1.pem").failure());
    assert!(err.contains("is not the publisher key"), "{err}");

    // publish checks the signature with the release's own copy of the key when none is given.
    let hub = fake_hub::FakeHub::start(Some(TOKEN));
    let a = publish(&hub, &out, &[]).success();
    assert!(stderr(&a).contains(&format!("signature: 14 files signed by key {fingerprint}")), "{}", stderr(&a));

    // Unsigned, the same release is refused.
    let unsigned = s.path("unsigned");
    build(&spec, &unsigned, &s.cache(), &[]).success();
    let err = stderr(&publish(&hub, &unsigned, &[]).failure());
    assert!(err.contains("names a publisher key (publish.public_key) but") && err.contains("is not signed"), "{err}");
}

#[test]
fn a_bad_publisher_key_in_the_spec_names_the_key_and_the_file() {
    let s = Scratch::new();
    std::fs::copy(key("rsa.pub.pem"), s.path("rsa.pub.pem")).unwrap();
    let spec = derived_spec(&s, "rsa.yaml", "publish:\n  public_key: rsa.pub.pem\n");
    let err = stderr(&build(&spec, &s.path("out"), &s.cache(), &[]).failure());
    assert!(err.contains("publish.public_key") && err.contains("rsa.pub.pem") && err.contains("is an RSA key"), "{err}");
    let spec = derived_spec(&s, "missing.yaml", "publish:\n  public_key: nowhere.pem\n");
    let err = stderr(&build(&spec, &s.path("out"), &s.cache(), &[]).failure());
    assert!(err.contains("publish.public_key") && err.contains("nowhere.pem"), "{err}");
}

#[test]
fn rebuild_audit_checks_the_signature_first_and_ignores_the_signature_files() {
    let s = Scratch::new();
    let dir = sample(&s);
    sign(&dir, "p256.pem").success();
    let audit = |public: &str| {
        bin()
            .args(["rebuild", "--audit", "--reuse-cache"])
            .arg(s.cache())
            .arg("--spec")
            .arg(fixture_s1a())
            .arg(&dir)
            .arg("--public-key")
            .arg(key(public))
            .assert()
    };
    let a = audit("p256.pub.pem").success();
    assert!(stdout(&a).contains("PASS"), "{}", output(&a));
    let a = audit("p384.pub.pem").failure();
    assert!(stderr(&a).contains("the signature does not hold") && !stdout(&a).contains("PASS"), "{}", output(&a));
}
