//! `fetch-nih` against a loopback fake of NIH's Box share serving generated tarballs, with
//! faults: a connection dropped mid-file (resumed by a range request), a 5xx (retried), a
//! corrupted or truncated archive (refused and removed), a missing file, a full disk; then the extracted
//! images checked against a release's images.sha256.

mod common;

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use common::*;
use sha2::{Digest, Sha256};

#[derive(Clone, Copy)]
enum Fault {
    /// Send this many bytes of the body, then drop the connection.
    DropAfter(usize),
    Status(u16),
}

#[derive(Default)]
struct BoxState {
    files: BTreeMap<String, Vec<u8>>,
    faults: BTreeMap<String, VecDeque<Fault>>,
    ranged: usize,
}

type Shared = Arc<Mutex<BoxState>>;

struct FakeBox {
    url: String,
    state: Shared,
    _runtime: tokio::runtime::Runtime,
}

impl FakeBox {
    fn start() -> FakeBox {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let state: Shared = Arc::default();
        let app = Router::new().route("/static/{file}", get(serve)).with_state(state.clone());
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}/static/", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeBox { url, state, _runtime: runtime }
    }

    /// Serves `bytes` as NIH's archive number `part` (1-based).
    fn put(&self, part: usize, bytes: Vec<u8>) {
        let box_file = bpals_release::source::fetch::ARCHIVES[part - 1].1;
        self.state.lock().unwrap().files.insert(box_file.to_string(), bytes);
    }

    fn fault(&self, part: usize, fault: Fault) {
        let box_file = bpals_release::source::fetch::ARCHIVES[part - 1].1;
        self.state.lock().unwrap().faults.entry(box_file.to_string()).or_default().push_back(fault);
    }
}

async fn serve(State(state): State<Shared>, UrlPath(file): UrlPath<String>, headers: HeaderMap) -> Response {
    let (bytes, fault) = {
        let mut s = state.lock().unwrap();
        let Some(bytes) = s.files.get(&file).cloned() else { return StatusCode::NOT_FOUND.into_response() };
        let fault = s.faults.get_mut(&file).and_then(VecDeque::pop_front);
        (bytes, fault)
    };
    if let Some(Fault::Status(code)) = fault {
        return StatusCode::from_u16(code).unwrap().into_response();
    }
    let start = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
        .and_then(|v| v.trim_end_matches('-').parse::<usize>().ok());
    let (status, body) = match start {
        Some(start) => {
            state.lock().unwrap().ranged += 1;
            (StatusCode::PARTIAL_CONTENT, bytes[start.min(bytes.len())..].to_vec())
        }
        None => (StatusCode::OK, bytes),
    };
    let length = body.len();
    let stream: futures::stream::BoxStream<'static, Result<Vec<u8>, std::io::Error>> = match fault {
        Some(Fault::DropAfter(n)) => {
            // The head and the first bytes go out, then the connection breaks.
            let first = body[..n.min(length)].to_vec();
            Box::pin(futures::stream::unfold(Some(first), |state| async move {
                match state {
                    Some(first) => Some((Ok(first), None)),
                    None => {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        Some((Err(std::io::Error::other("connection dropped by the fake")), None))
                    }
                }
            }))
        }
        _ => Box::pin(futures::stream::iter(vec![Ok(body)])),
    };
    Response::builder().status(status).header("content-length", length).body(axum::body::Body::from_stream(stream)).unwrap()
}

/// A gzipped tarball like NIH's: `images/NAME.png` entries with the given bytes.
fn tarball(images: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (name, bytes) in images {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, format!("images/{name}"), bytes.as_slice()).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// Pseudo-random image bytes (incompressible, so archives are big enough to drop mid-way).
fn image(seed: u32) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(40_000);
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    for _ in 0..40_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes.push(x as u8);
    }
    bytes
}

fn names(part: usize) -> Vec<(String, Vec<u8>)> {
    (0..5).map(|i| (format!("{:08}_000.png", part * 100 + i), image((part * 100 + i) as u32))).collect()
}

fn serve_parts(fake: &FakeBox, parts: &[usize]) {
    for &part in parts {
        let images = names(part);
        let refs: Vec<(&str, Vec<u8>)> = images.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
        fake.put(part, tarball(&refs));
    }
}

fn fetch(fake: &FakeBox, dir: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    bin()
        .env("BPALS_FETCH_BACKOFF_MS", "50")
        .arg("fetch-nih")
        .arg(dir)
        .args(["--base-url", &fake.url, "--no-progress", "--retries", "3"])
        .args(extra)
        .assert()
}

#[test]
fn archives_download_resume_after_a_dropped_connection_retry_a_5xx_and_extract() {
    let fake = FakeBox::start();
    serve_parts(&fake, &[1, 2]);
    fake.fault(1, Fault::DropAfter(70_000));
    fake.fault(2, Fault::Status(503));
    let s = Scratch::new();
    let dir = s.path("nih");
    let a = fetch(&fake, &dir, &["--parts", "1-2", "--json"]).success();
    let report: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
    assert_eq!(report["archives_downloaded"], 2);
    assert_eq!(report["images_extracted"], 10);
    assert_eq!(report["retries"], 2, "{}", stderr(&a));
    assert!(stderr(&a).contains("connection lost after 70000 bytes") && stderr(&a).contains("HTTP 503"), "{}", stderr(&a));
    assert_eq!(fake.state.lock().unwrap().ranged, 1, "the dropped download resumed with a range request");
    for part in [1, 2] {
        for (name, bytes) in names(part) {
            assert_eq!(std::fs::read(dir.join("images").join(&name)).unwrap(), bytes, "{name}");
        }
    }
    assert!(dir.join("images/.complete-images_001").is_file());
    // A second run finds everything done.
    let a = fetch(&fake, &dir, &["--parts", "1-2"]).success();
    assert!(stderr(&a).contains("images_001.tar.gz: already extracted"), "{}", stderr(&a));
}

#[test]
fn only_the_listed_images_are_extracted_and_checked_against_a_release() {
    let fake = FakeBox::start();
    serve_parts(&fake, &[3]);
    let s = Scratch::new();
    let wanted = &names(3)[1..3];
    let list = s.write("curated.txt", &format!("# two images\n{}\n{}\n", wanted[0].0, wanted[1].0));
    let release = s.path("release");
    std::fs::create_dir_all(&release).unwrap();
    let sums: String = wanted.iter().map(|(n, b)| format!("{}  {n}\n", hex::encode(Sha256::digest(b)))).collect();
    std::fs::write(release.join("images.sha256"), &sums).unwrap();
    let dir = s.path("nih");
    let a = fetch(&fake, &dir, &["--parts", "3", "--images-from", list.to_str().unwrap(), "--check-against", release.to_str().unwrap()])
        .success();
    assert!(stdout(&a).contains("ok: all 2 images the release lists match its images.sha256"), "{}", stdout(&a));
    let extracted: Vec<String> =
        std::fs::read_dir(dir.join("images")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(extracted.len(), 2, "{extracted:?}");

    // An archive that no longer holds one image, and that image damaged on disk: the check names it.
    std::fs::write(dir.join("images").join(&wanted[0].0), b"not the image").unwrap();
    std::fs::remove_file(dir.join("downloads/images_003.tar.gz")).unwrap();
    fake.put(3, tarball(&[(wanted[1].0.as_str(), wanted[1].1.clone())]));
    let a = fetch(&fake, &dir, &["--parts", "3", "--images-from", list.to_str().unwrap(), "--check-against", release.to_str().unwrap()])
        .failure();
    assert!(stdout(&a).contains(&format!("different sha256: {}", wanted[0].0)), "{}", stdout(&a));
}

#[test]
fn a_corrupted_or_truncated_archive_is_refused_and_removed() {
    let fake = FakeBox::start();
    let s = Scratch::new();
    let images = names(4);
    let refs: Vec<(&str, Vec<u8>)> = images.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    let good = tarball(&refs);
    for damaged in [good[..good.len() / 2].to_vec(), {
        let mut b = good.clone();
        let i = b.len() / 2;
        b[i] ^= 0xff;
        b
    }] {
        fake.put(4, damaged);
        let dir = s.path("nih");
        let a = fetch(&fake, &dir, &["--parts", "4"]).failure();
        let err = stderr(&a);
        assert!(err.contains("archive") && err.contains("images_004.tar.gz") && err.contains("the next run downloads it anew"), "{err}");
        assert!(!dir.join("downloads/images_004.tar.gz").exists(), "a bad archive is never kept");
        assert!(!dir.join("images/.complete-images_004").exists(), "nothing is marked complete");
        let leftovers: Vec<String> =
            std::fs::read_dir(dir.join("images")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(leftovers.is_empty(), "no image of a damaged archive is left: {leftovers:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // Served whole again, the rerun succeeds.
    fake.put(4, good);
    fetch(&fake, &s.path("nih"), &["--parts", "4"]).success();
}

#[test]
fn bad_arguments_and_a_missing_archive_give_clear_errors() {
    let fake = FakeBox::start();
    let s = Scratch::new();
    let err = stderr(&fetch(&fake, &s.path("nih"), &["--parts", "0-13"]).failure());
    assert!(err.contains("--parts") && err.contains("expected archive numbers 1 to 12"), "{err}");
    let list = s.write("bad.txt", "images/00000001_000.png\n");
    let err = stderr(&fetch(&fake, &s.path("nih"), &["--parts", "1", "--images-from", list.to_str().unwrap()]).failure());
    assert!(err.contains("bad.txt") && err.contains("is not an image file name"), "{err}");
    let err = stderr(&fetch(&fake, &s.path("nih"), &["--parts", "5"]).failure());
    assert!(err.contains("HTTP 404"), "{err}");
    let giving_up = FakeBox::start();
    serve_parts(&giving_up, &[6]);
    for _ in 0..4 {
        giving_up.fault(6, Fault::Status(500));
    }
    let err = stderr(&fetch(&giving_up, &s.path("nih6"), &["--parts", "6"]).failure());
    assert!(err.contains("gave up after 3 retries"), "{err}");
}

#[test]
fn a_full_disk_is_a_clear_error_and_leaves_nothing_marked_complete() {
    let fake = FakeBox::start();
    serve_parts(&fake, &[7]);
    let s = Scratch::new();
    let dir = s.path("nih");
    // The archive's download file is /dev/full: every write fails with ENOSPC, as on a full disk.
    std::fs::create_dir_all(dir.join("downloads")).unwrap();
    std::os::unix::fs::symlink("/dev/full", dir.join("downloads/images_007.tar.gz.part")).unwrap();
    let err = stderr(&fetch(&fake, &dir, &["--parts", "7"]).failure());
    assert!(err.contains("images_007.tar.gz.part") && err.contains("the disk is full"), "{err}");
    assert!(!dir.join("downloads/images_007.tar.gz").exists(), "no archive is taken as downloaded");
    assert!(!dir.join("images/.complete-images_007").exists(), "nothing is marked complete");
    assert_eq!(std::fs::read_dir(dir.join("images")).unwrap().count(), 0, "no image is extracted");
    // With space again, the next run downloads and extracts it.
    std::fs::remove_file(dir.join("downloads/images_007.tar.gz.part")).unwrap();
    fetch(&fake, &dir, &["--parts", "7"]).success();
    assert!(dir.join("images/.complete-images_007").is_file());
}
