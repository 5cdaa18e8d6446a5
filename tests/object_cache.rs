//! The score cache on an object store (`--cache-dir s3://…`), against a local S3-compatible
//! server the test starts itself: moto's server, from the test venv. `scripts/test` runs these
//! with `--ignored` and BPALS_MOTO_SERVER set; a plain `cargo test` skips them.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const SECRET: &str = "bpals-test-secret-7c1e9d";
const BUCKET: &str = "bpals-cache";

/// A moto S3 server on a free loopback port, killed when dropped.
struct S3Server {
    child: Child,
    endpoint: String,
}

impl S3Server {
    fn start() -> Self {
        let server = std::env::var_os("BPALS_MOTO_SERVER")
            .map(PathBuf::from)
            .expect("BPALS_MOTO_SERVER: the moto_server executable (pip install 'moto[server]'); scripts/test sets it");
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let s3 = S3Server { child, endpoint: format!("http://127.0.0.1:{port}") };
        let http = reqwest::blocking::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while http.get(&s3.endpoint).send().is_err() {
            assert!(Instant::now() < deadline, "moto_server did not answer on {}", s3.endpoint);
            std::thread::sleep(Duration::from_millis(200));
        }
        http.put(format!("{}/{BUCKET}", s3.endpoint)).send().unwrap().error_for_status().expect("bucket created");
        s3
    }

    /// The binary, pointed at this server with test credentials.
    fn command(&self) -> Command {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("bpals-release"));
        cmd.env_remove("BPALS_NIH_ROOT")
            .env_remove("BPALS_CACHE_DIR")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("AWS_BATCH_JOB_ARRAY_INDEX")
            .env_remove("JOB_COMPLETION_INDEX")
            .env("AWS_ENDPOINT", &self.endpoint)
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", SECRET);
        cmd
    }

    fn build(&self, out: &Path, cache: &str) -> Output {
        let out =
            self.command().arg("build").arg(fixture_s1a()).arg("--out").arg(out).args(["--no-progress", "--cache-dir", cache]).output();
        checked(out.unwrap(), "build")
    }

    /// The keys under `prefix`, from a ListObjectsV2 call.
    fn keys(&self, prefix: &str) -> Vec<String> {
        let url = format!("{}/{BUCKET}?list-type=2&max-keys=1000&prefix={prefix}", self.endpoint);
        let xml = reqwest::blocking::get(url).unwrap().text().unwrap();
        assert!(!xml.contains("<IsTruncated>true"), "more than 1000 keys");
        xml.split("<Key>").skip(1).map(|k| k.split("</Key>").next().unwrap().to_string()).collect()
    }

    /// A signed client of the bucket (moto refuses anonymous object reads and writes).
    fn client(&self) -> (object_store::aws::AmazonS3, tokio::runtime::Runtime) {
        let store = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(BUCKET)
            .with_access_key_id("testing")
            .with_secret_access_key(SECRET)
            .build()
            .unwrap();
        (store, tokio::runtime::Runtime::new().unwrap())
    }

    fn object(&self, key: &str) -> Vec<u8> {
        use object_store::ObjectStoreExt;
        let (store, runtime) = self.client();
        runtime.block_on(async { store.get(&object_store::path::Path::from(key)).await.unwrap().bytes().await.unwrap().to_vec() })
    }

    fn put_object(&self, key: &str, bytes: &[u8]) {
        use object_store::ObjectStoreExt;
        let (store, runtime) = self.client();
        runtime.block_on(store.put(&object_store::path::Path::from(key), bytes.to_vec().into())).unwrap();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The output of a run that must succeed, and never shows the secret key.
fn checked(out: Output, what: &str) -> Output {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed: {text}");
    assert!(!text.contains(SECRET), "{what} printed the secret key");
    out
}

fn images_in_sample() -> usize {
    let s = Scratch::new();
    build(&fixture_s1a(), &s.path("count"), &s.cache(), &[]).success();
    files_under(&s.cache().join("scores-v2")).len()
}

/// Done means: four `infer --shard-count 4` tasks, indexed only by JOB_COMPLETION_INDEX, into
/// one S3 cache, then a build from it: byte-identical to a plain build with a local cache.
#[test]
#[ignore = "needs moto's S3 server: scripts/test installs it and runs these"]
fn array_job_through_s3_merges_into_the_same_bytes() {
    let s3 = S3Server::start();
    let s = Scratch::new();
    build(&fixture_s1a(), &s.path("plain"), &s.cache(), &[]).success();

    let cache = format!("s3://{BUCKET}/array");
    let task = |k: usize| {
        let mut cmd = s3.command();
        cmd.arg("infer").arg(fixture_s1a()).args(["--shard-count", "4", "--no-progress", "--jobs", "1", "--cache-dir", &cache]);
        cmd.env("JOB_COMPLETION_INDEX", k.to_string()).output().unwrap()
    };
    let task = &task;
    let outputs = std::thread::scope(|scope| {
        let tasks: Vec<_> = (0..4).map(|k| scope.spawn(move || task(k))).collect();
        tasks.into_iter().map(|t| t.join().unwrap()).collect::<Vec<_>>()
    });
    for (k, out) in outputs.into_iter().enumerate() {
        let out = checked(out, &format!("task {k}"));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("shard {k}/4 (index from JOB_COMPLETION_INDEX={k})")), "{text}");
        assert!(text.contains(&format!("(cache: {cache})")), "{text}");
    }
    assert_eq!(s3.keys("array/scores-v2/").len(), images_in_sample(), "one entry per image");

    let merged = s3.build(&s.path("merged"), &cache);
    let log = String::from_utf8_lossy(&merged.stderr);
    assert!(log.contains(", 0 scored"), "the merge build scores nothing: {log}");
    assert_eq!(tree_digest(&s.path("plain")), tree_digest(&s.path("merged")));
    for file in files_under(&s.path("merged")) {
        assert!(!std::fs::read(&file).unwrap().windows(SECRET.len()).any(|w| w == SECRET.as_bytes()), "{}", file.display());
    }
}

/// Two workers scoring the same images at once: conditional puts keep one entry per image,
/// and both runs succeed. A corrupt entry is rescored and replaced in place.
#[test]
#[ignore = "needs moto's S3 server: scripts/test installs it and runs these"]
fn concurrent_writers_and_a_corrupt_entry() {
    let s3 = S3Server::start();
    let s = Scratch::new();
    build(&fixture_s1a(), &s.path("plain"), &s.cache(), &[]).success();
    let cache = format!("s3://{BUCKET}/race");
    let run = || s3.command().arg("infer").arg(fixture_s1a()).args(["--no-progress", "--cache-dir", &cache]).output().unwrap();
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(run);
        let b = scope.spawn(run);
        (a.join().unwrap(), b.join().unwrap())
    });
    checked(a, "first writer");
    checked(b, "second writer");
    let keys = s3.keys("race/scores-v2/");
    assert_eq!(keys.len(), images_in_sample(), "one entry per image, however many wrote it");

    let victim = &keys[0];
    s3.put_object(victim, b"{ not json");
    let rebuilt = s3.build(&s.path("rebuilt"), &cache);
    let log = String::from_utf8_lossy(&rebuilt.stderr);
    assert!(log.contains(", 1 scored"), "only the corrupt entry is rescored: {log}");
    assert_eq!(tree_digest(&s.path("plain")), tree_digest(&s.path("rebuilt")));
    let repaired: serde_json::Value = serde_json::from_slice(&s3.object(victim)).expect("the entry was replaced");
    assert!(repaired["content"]["scores"].as_array().is_some_and(|s| !s.is_empty()), "{repaired}");
    assert!(log.contains("failed its check"), "the corrupt entry is reported: {log}");
}

/// A bucket that does not exist is an error naming the cache, not a silent rescore.
#[test]
#[ignore = "needs moto's S3 server: scripts/test installs it and runs these"]
fn a_missing_bucket_is_a_clear_error() {
    let s3 = S3Server::start();
    let s = Scratch::new();
    let out = s3
        .command()
        .arg("build")
        .arg(fixture_s1a())
        .arg("--out")
        .arg(s.path("out"))
        .args(["--no-progress", "--cache-dir", "s3://no-such-bucket/x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("score cache s3://no-such-bucket/x/"), "{err}");
    assert!(!err.contains(SECRET));
    assert!(!s.path("out").exists(), "nothing is half-written");
}
