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
    /// Announce this Content-Length (more than the archive cap), send the real bytes, then
    /// hold the connection open as if the rest were coming.
    Announce(u64),
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
    if let Some(Fault::Announce(length)) = fault {
        let stream = futures::StreamExt::chain(futures::stream::iter(vec![Ok::<_, std::io::Error>(bytes)]), futures::stream::pending());
        return Response::builder().header("content-length", length).body(axum::body::Body::from_stream(stream)).unwrap();
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
    let entries: Vec<(String, Vec<u8>)> = images.iter().map(|(n, b)| (format!("images/{n}"), b.clone())).collect();
    tarball_at(&entries)
}

/// A gzipped tarball of entries at the given paths.
fn tarball_at(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (path, bytes) in entries {
        append(&mut builder, path, bytes.len() as u64, bytes.as_slice());
    }
    builder.into_inner().unwrap().finish().unwrap()
}

fn append(builder: &mut tar::Builder<impl std::io::Write>, path: &str, size: u64, data: impl std::io::Read) {
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    builder.append_data(&mut header, path, data).unwrap();
}

/// A decompression bomb: NIH-like entries with, among them, `images/00000999_000.png` of 1 GiB
/// (a PNG head, then zeros), about a megabyte of gzip, streamed so the test never holds it.
fn bomb_tarball(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (i, (path, bytes)) in entries.iter().enumerate() {
        append(&mut builder, path, bytes.len() as u64, bytes.as_slice());
        if i == 1 {
            let zeros = std::io::Read::take(std::io::repeat(0), (1 << 30) - PNG_HEAD.len() as u64);
            append(&mut builder, "images/00000999_000.png", 1 << 30, std::io::Read::chain(&PNG_HEAD[..], zeros));
        }
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// The head `fetch-nih` checks: the PNG signature, then an IHDR chunk's length and type.
const PNG_HEAD: [u8; 16] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n', 0, 0, 0, 13, b'I', b'H', b'D', b'R'];

/// Image bytes: a PNG's head, then pseudo-random bytes (incompressible, so archives are big
/// enough to drop mid-way). `fetch-nih` checks the head only; decoding is the build's.
fn image(seed: u32) -> Vec<u8> {
    let mut bytes = PNG_HEAD.to_vec();
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
    // A server announcing more than any archive holds is refused before a byte is written.
    giving_up.fault(6, Fault::Announce(9 << 30));
    let err = stderr(&fetch(&giving_up, &s.path("nih6"), &["--parts", "6"]).failure());
    assert!(err.contains("refused: the archive announces 9663676416 bytes, above the cap of 8589934592 bytes"), "{err}");
    assert!(!err.contains("retrying"), "{err}");
    assert!(!s.path("nih6/downloads/images_006.tar.gz.part").exists(), "nothing of it is kept");
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

/// Archives that read to their end but hold what NIH's never do: a decompression bomb (an entry
/// of 1 GiB of zeros in about a megabyte of gzip: before, it was read whole into memory and
/// written out), two images of one name in different folders (before, the second overwrote the
/// first and the run failed half moved, on every rerun), an entry that is not a PNG. Each is
/// refused before any image moves, the archive is removed, the images of a good archive fetched
/// in the same run stay, memory stays far below the bomb's size, and the rerun with NIH's real
/// archive succeeds.
#[test]
fn a_bomb_a_duplicate_name_or_a_non_png_is_refused_before_anything_moves() {
    let fake = FakeBox::start();
    serve_parts(&fake, &[8]);
    let s = Scratch::new();
    let good: Vec<(String, Vec<u8>)> = names(9).into_iter().map(|(n, b)| (format!("images/{n}"), b)).collect();
    let with = |extra: (String, Vec<u8>)| {
        let mut entries = good.clone();
        entries.insert(2, extra);
        tarball_at(&entries)
    };
    let cases = [
        ("bomb", bomb_tarball(&good), "00000999_000.png", "more than an NIH image can be"),
        ("duplicate", with(("other/00000900_000.png".into(), image(1))), "other/00000900_000.png", "a second image named 00000900_000.png"),
        ("not a png", with(("images/00000998_000.png".into(), b"GIF89a and then some".to_vec())), "00000998_000.png", "not a PNG"),
    ];
    for (name, archive, entry, why) in cases {
        fake.put(9, archive);
        let dir = s.path(&format!("nih-{}", name.replace(' ', "-")));
        let mut command = std::process::Command::new(assert_cmd::cargo::cargo_bin("bpals-release"));
        command.env("BPALS_FETCH_BACKOFF_MS", "50").arg("fetch-nih").arg(&dir);
        command.args(["--base-url", &fake.url, "--no-progress", "--retries", "0", "--parts", "8-9"]);
        // The engine's build of the binary starts at about 300 MB resident (libtorch).
        let run = limits::run_limited(command, std::time::Duration::from_secs(60), 900 << 20);
        assert!(run.failed_cleanly(), "{name}: {run:?}");
        assert!(
            run.stderr.contains("images_009.tar.gz") && run.stderr.contains(entry) && run.stderr.contains(why),
            "{name}: {}",
            run.stderr
        );
        assert!(run.peak_rss < 600 << 20, "{name}: {} MiB resident", run.peak_rss >> 20);
        assert!(!dir.join("downloads/images_009.tar.gz").exists(), "{name}: the bad archive is removed");
        assert!(!dir.join("images/.complete-images_009").exists(), "{name}: nothing is marked complete");
        let left: Vec<String> =
            std::fs::read_dir(dir.join("images")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(left.iter().all(|n| n.starts_with("000008") || n == ".complete-images_008"), "{name}: only archive 8's images: {left:?}");
        assert_eq!(left.len(), 6, "{name}: archive 8's five images and its marker: {left:?}");
    }
    fake.put(9, tarball_at(&good));
    let dir = s.path("nih-bomb");
    fetch(&fake, &dir, &["--parts", "8-9"]).success();
    assert!(dir.join("images/.complete-images_009").is_file() && dir.join("images/00000900_000.png").is_file());
}
