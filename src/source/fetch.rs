//! `bpals-release fetch-nih DIR`: NIH ChestX-ray14's images from NIH's public Box share, as the
//! 12 gzipped tarballs NIH's own `batch_download_zips.py` lists, downloaded resumably (HTTP
//! range requests, retries with backoff) and extracted, all of them or only the images a
//! curated list names; then, optionally, every image checked against a release's
//! `images.sha256`.
//!
//! Layout of DIR: `downloads/images_NNN.tar.gz` (a `.part` file while it downloads),
//! `images/*.png`, and `images/.complete-images_NNN` once an archive is fully extracted. An
//! interrupted run leaves only whole image files and no marker; the next run resumes.
//!
//! No checksum of the tarballs is published by NIH, and none could be established here (the Box
//! share is not reachable from this machine): the per-image digests of a release's
//! `images.sha256` are the check (`--check-against`). The metadata files (`Data_Entry_2017*.csv`,
//! `BBox_List_2017.csv`, the split lists) have no stable direct links in NIH's script; they are
//! fetched from the Box folder by hand and pinned by the spec's `source.sha256`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

/// NIH's Box share, where `batch_download_zips.py` points.
pub const NIH_BOX: &str = "https://nihcc.box.com/shared/static/";

/// The archives in NIH's order, with their Box file names (from NIH's `batch_download_zips.py`).
pub const ARCHIVES: [(&str, &str); 12] = [
    ("images_001.tar.gz", "vfk49d74nhbxq3nqjg0900w5nvkorp5c.gz"),
    ("images_002.tar.gz", "i28rlmbvmfjbl8p2n3ril0pptcmcu9d1.gz"),
    ("images_003.tar.gz", "f1t00wrtdk94satdfb9olcolqx20z2jp.gz"),
    ("images_004.tar.gz", "0aowwzs5lhjrceb3qp67ahp0rd1l1etg.gz"),
    ("images_005.tar.gz", "v5e3goj22zr6h8tzualxfsqlqaygfbsn.gz"),
    ("images_006.tar.gz", "asi7ikud9jwnkrnkj99jnpfkjdes7l6l.gz"),
    ("images_007.tar.gz", "jn1b4mw4n6lnh74ovmcjb8y48h8xj07n.gz"),
    ("images_008.tar.gz", "tvpxmn7qyrgl0w8wfh9kqfjskv6nmm1j.gz"),
    ("images_009.tar.gz", "upyy3ml7qdumlgk2rfcvlb9k6gvqq2pj.gz"),
    ("images_010.tar.gz", "l6nilvfa9cg3s28tqv1qc1olm3gnz54p.gz"),
    ("images_011.tar.gz", "hhq8fkdgvcari67vfhs7ppg2w6ni4jze.gz"),
    ("images_012.tar.gz", "ioqwiy20ihqwyr8pf4c24eazhh281pbu.gz"),
];

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error("archive {}: {message}; it was removed, so the next run downloads it anew", path.display())]
    CorruptArchive { path: PathBuf, message: String },
    /// An archive that reads to its end but holds what NIH's never do: nothing of it is
    /// extracted, and it is removed like a corrupt one.
    #[error("archive {}, entry {entry}: {message}; nothing was extracted from it, and it was removed, so the next run downloads it anew", path.display())]
    BadArchive { path: PathBuf, entry: String, message: String },
    #[error("--images-from {}: {message}", path.display())]
    ImageList { path: PathBuf, message: String },
    #[error("--parts: {0}")]
    Parts(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FetchError + '_ {
    move |e| {
        let message = if e.kind() == std::io::ErrorKind::StorageFull {
            format!("{e}: the disk is full; free space and run again (a download resumes where it stopped, an extraction starts over)")
        } else {
            e.to_string()
        };
        FetchError::Io { path: path.to_path_buf(), message }
    }
}

pub struct FetchOptions {
    pub dir: PathBuf,
    /// The Box share, or a mirror with the same file names (tests use a loopback server).
    pub base_url: String,
    /// 1-based archive numbers.
    pub parts: Vec<usize>,
    /// Extract only these image file names.
    pub images: Option<BTreeSet<String>>,
    pub retries: usize,
    /// A request that connects or receives nothing for this long fails (and is retried).
    pub stall: Duration,
    /// The first wait before a retry; doubled each time.
    pub backoff: Duration,
    pub progress: bool,
}

#[derive(Debug, Default, Serialize)]
pub struct FetchReport {
    pub archives_downloaded: usize,
    pub archives_present: usize,
    pub archives_extracted: usize,
    pub images_extracted: usize,
    pub retries: usize,
}

impl std::fmt::Display for FetchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "fetch-nih: {} archives downloaded ({} already there), {} extracted ({} images), {} retries",
            self.archives_downloaded, self.archives_present, self.archives_extracted, self.images_extracted, self.retries
        )
    }
}

/// Parses `1-3,7` into archive numbers 1..=12.
pub fn parse_parts(text: &str) -> Result<Vec<usize>, FetchError> {
    let mut out = BTreeSet::new();
    for piece in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = piece.split_once('-').unwrap_or((piece, piece));
        let num = |s: &str| s.trim().parse::<usize>().ok().filter(|n| (1..=ARCHIVES.len()).contains(n));
        match (num(a), num(b)) {
            (Some(a), Some(b)) if a <= b => out.extend(a..=b),
            _ => return Err(FetchError::Parts(format!("{piece:?}: expected archive numbers 1 to 12, like 1-3,7"))),
        }
    }
    Ok(out.into_iter().collect())
}

/// The image names of a curated list (one per line; `#` comments and blank lines aside).
pub fn read_image_list(path: &Path) -> Result<BTreeSet<String>, FetchError> {
    let text = std::fs::read_to_string(path).map_err(|e| FetchError::ImageList { path: path.to_path_buf(), message: e.to_string() })?;
    let names: BTreeSet<String> =
        text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect();
    if let Some(bad) = names.iter().find(|n| !n.ends_with(".png") || n.contains('/')) {
        return Err(FetchError::ImageList { path: path.to_path_buf(), message: format!("{bad:?} is not an image file name") });
    }
    Ok(names)
}

pub fn fetch(options: &FetchOptions, log: &dyn Fn(&str)) -> Result<FetchReport, FetchError> {
    let downloads = options.dir.join("downloads");
    let images = options.dir.join("images");
    std::fs::create_dir_all(&downloads).map_err(io(&downloads))?;
    std::fs::create_dir_all(&images).map_err(io(&images))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(io(&options.dir))?;
    let client = reqwest::Client::builder()
        .user_agent(format!("{}/{}", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
        .connect_timeout(options.stall)
        .read_timeout(options.stall)
        .build()
        .map_err(|e| FetchError::Http { url: options.base_url.clone(), message: e.to_string() })?;
    let mut report = FetchReport::default();
    for &part in &options.parts {
        let (name, box_file) = ARCHIVES[part - 1];
        let archive = downloads.join(name);
        let marker = images.join(format!(".complete-{}", name.trim_end_matches(".tar.gz")));
        if marker.is_file() && options.images.is_none() {
            log(&format!("{name}: already extracted"));
            report.archives_present += 1;
            continue;
        }
        if archive.is_file() {
            report.archives_present += 1;
        } else {
            let url = format!("{}{box_file}", options.base_url);
            report.retries += runtime.block_on(download(&client, &url, &archive, options, log))?;
            report.archives_downloaded += 1;
        }
        let extracted = extract(&archive, &images, options.images.as_ref()).inspect_err(|e| {
            if matches!(e, FetchError::CorruptArchive { .. } | FetchError::BadArchive { .. }) {
                let _ = std::fs::remove_file(&archive);
            }
        })?;
        log(&format!("{name}: {extracted} images extracted"));
        report.images_extracted += extracted;
        report.archives_extracted += 1;
        if options.images.is_none() {
            std::fs::write(&marker, b"").map_err(io(&marker))?;
        }
    }
    Ok(report)
}

/// Downloads `url` into `dest`, through `dest.part`, resuming with a range request after a
/// dropped connection and retrying 5xx and 429 answers with a doubling wait. Returns the retries.
async fn download(
    client: &reqwest::Client,
    url: &str,
    dest: &Path,
    options: &FetchOptions,
    log: &dyn Fn(&str),
) -> Result<usize, FetchError> {
    let part = dest.with_extension("gz.part");
    let bar = progress_bar(options.progress, dest);
    let mut attempt = 0;
    loop {
        match download_once(client, url, &part, &bar).await {
            Ok(()) => break,
            Err(Attempt::Fatal(e)) => return Err(e),
            Err(Attempt::Retry(why)) if attempt < options.retries => {
                let wait = options.backoff * 2u32.saturating_pow(attempt as u32);
                log(&format!("{}: {why}; retrying in {:.1} s", dest.display(), wait.as_secs_f64()));
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            Err(Attempt::Retry(why)) => {
                return Err(FetchError::Http { url: url.into(), message: format!("{why}; gave up after {attempt} retries") })
            }
        }
    }
    bar.finish_and_clear();
    std::fs::rename(&part, dest).map_err(io(dest))?;
    Ok(attempt)
}

enum Attempt {
    Retry(String),
    Fatal(FetchError),
}

async fn download_once(client: &reqwest::Client, url: &str, part: &Path, bar: &indicatif::ProgressBar) -> Result<(), Attempt> {
    let have = std::fs::metadata(part).map(|m| m.len()).unwrap_or(0);
    let mut request = client.get(url);
    if have > 0 {
        request = request.header(reqwest::header::RANGE, format!("bytes={have}-"));
    }
    let mut response = request.send().await.map_err(|e| Attempt::Retry(format!("request failed ({e})")))?;
    let status = response.status();
    let append = match status.as_u16() {
        206 => true,
        200 => false,
        // Everything asked for is already here.
        416 if have > 0 => return Ok(()),
        429 | 500..=599 => return Err(Attempt::Retry(format!("HTTP {status}"))),
        _ => return Err(Attempt::Fatal(FetchError::Http { url: url.into(), message: format!("HTTP {status}") })),
    };
    let expected = response.content_length().map(|n| if append { n + have } else { n });
    let too_large = |what: String| {
        let _ = std::fs::remove_file(part);
        Attempt::Fatal(FetchError::Http {
            url: url.into(),
            message: format!("refused: {what}, above the cap of {MAX_ARCHIVE_BYTES} bytes for one archive; nothing of it is kept"),
        })
    };
    if let Some(n) = expected.filter(|&n| n > MAX_ARCHIVE_BYTES) {
        return Err(too_large(format!("the archive announces {n} bytes")));
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(part)
        .map_err(|e| Attempt::Fatal(io(part)(e)))?;
    let mut written = if append { have } else { 0 };
    bar.set_length(expected.unwrap_or(0));
    bar.set_position(written);
    loop {
        match response.chunk().await {
            Ok(Some(bytes)) => {
                written += bytes.len() as u64;
                if written > MAX_ARCHIVE_BYTES {
                    return Err(too_large("the server sent more than that".into()));
                }
                file.write_all(&bytes).map_err(|e| Attempt::Fatal(io(part)(e)))?;
                bar.set_position(written);
            }
            Ok(None) => break,
            Err(e) => return Err(Attempt::Retry(format!("connection lost after {written} bytes ({e})"))),
        }
    }
    file.sync_all().map_err(|e| Attempt::Fatal(io(part)(e)))?;
    match expected {
        Some(n) if n != written => Err(Attempt::Retry(format!("got {written} of {n} bytes"))),
        _ => Ok(()),
    }
}

fn progress_bar(enabled: bool, dest: &Path) -> indicatif::ProgressBar {
    if !enabled {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    bar
}

/// The most bytes one archive may hold: NIH's twelve hold about 45 GB together, none of them
/// more than a few GB. A server sending more would fill the disk, so it is refused.
pub const MAX_ARCHIVE_BYTES: u64 = 8 << 30;

/// The most bytes one image of an archive may hold. NIH's PNGs are 1024 x 1024, mostly 8-bit
/// greyscale and 0.2 to 1 MB; even stored uncompressed as 16-bit RGBA such an image is 8 MiB.
/// Twice that stops a decompression bomb (a gigabyte of zeros in a few megabytes of gzip) after
/// 16 MiB, streamed to disk, never held in memory.
pub const MAX_IMAGE_BYTES: u64 = 16 << 20;

/// The eight bytes every PNG starts with, then the first chunk's length and type (IHDR).
const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// Extracts the PNGs of `archive` (all, or those `wanted` names) into `images`. Everything goes
/// into a staging folder first and moves into `images` only once the whole archive has been read,
/// its gzip checksum holds and every entry passed its checks (a PNG, at most
/// [`MAX_IMAGE_BYTES`], no two with one name), so a bad archive leaves no image behind. Should a
/// move fail half way, the images it had moved are taken back out.
fn extract(archive: &Path, images: &Path, wanted: Option<&BTreeSet<String>>) -> Result<usize, FetchError> {
    let stem = archive.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let staging = images.join(format!(".extracting-{stem}"));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let result = extract_into(archive, &staging, wanted).and_then(|names| move_all(&names, &staging, images));
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// Moves the staged images into `images`; on a failure, removes those it moved that were not
/// there before.
fn move_all(names: &[String], staging: &Path, images: &Path) -> Result<usize, FetchError> {
    let mut moved = Vec::new();
    for name in names {
        let target = images.join(name);
        let existed = target.exists();
        if let Err(e) = std::fs::rename(staging.join(name), &target) {
            for undo in moved {
                let _ = std::fs::remove_file(images.join(undo));
            }
            return Err(io(&target)(e));
        }
        if !existed {
            moved.push(name);
        }
    }
    Ok(names.len())
}

fn extract_into(archive: &Path, staging: &Path, wanted: Option<&BTreeSet<String>>) -> Result<Vec<String>, FetchError> {
    let corrupt = |e: std::io::Error| FetchError::CorruptArchive { path: archive.to_path_buf(), message: e.to_string() };
    let bad =
        |entry: &Path, message: String| FetchError::BadArchive { path: archive.to_path_buf(), entry: entry.display().to_string(), message };
    let file = std::fs::File::open(archive).map_err(io(archive))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
    // Image name -> the entry it came from: two entries of one name would overwrite each other.
    let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
    for entry in tar.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let path = entry.path().map_err(corrupt)?.into_owned();
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
        if !entry.header().entry_type().is_file() || !name.ends_with(".png") || wanted.is_some_and(|w| !w.contains(&name)) {
            continue;
        }
        if let Some(first) = names.get(&name) {
            return Err(bad(&path, format!("a second image named {name} (the first is {})", first.display())));
        }
        let size = entry.size();
        if size > MAX_IMAGE_BYTES {
            return Err(bad(&path, format!("{size} bytes, more than an NIH image can be ({MAX_IMAGE_BYTES} bytes at most)")));
        }
        let target = staging.join(&name);
        let mut head = [0u8; 16];
        let got = read_up_to(&mut entry, &mut head).map_err(corrupt)?;
        if got < head.len() || head[..8] != PNG_SIGNATURE || &head[12..16] != b"IHDR" {
            return Err(bad(&path, "not a PNG (no PNG signature and header at its start)".into()));
        }
        let mut out = std::fs::File::create(&target).map_err(io(&target))?;
        out.write_all(&head).map_err(io(&target))?;
        // The header's size bounds what the tar reader yields; the cap holds regardless.
        let rest = std::io::copy(&mut (&mut entry).take(MAX_IMAGE_BYTES), &mut out).map_err(corrupt)?;
        if rest + head.len() as u64 != size {
            return Err(corrupt(std::io::Error::other(format!(
                "entry {} ends after {} of {size} bytes",
                path.display(),
                rest + head.len() as u64
            ))));
        }
        names.insert(name, path);
    }
    // Read to the end of the gzip stream: its CRC is checked only there.
    std::io::copy(&mut tar.into_inner(), &mut std::io::sink()).map_err(corrupt)?;
    Ok(names.into_keys().collect())
}

/// Fills `buf` from `reader` as far as it goes; returns how many bytes came.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// What `--check-against` found: every image `images.sha256` lists, against the extracted files.
#[derive(Debug, Default, Serialize)]
pub struct ImageCheck {
    pub listed: usize,
    pub matching: usize,
    pub missing: Vec<String>,
    pub different: Vec<String>,
}

impl ImageCheck {
    pub fn ok(&self) -> bool {
        self.missing.is_empty() && self.different.is_empty()
    }
}

impl std::fmt::Display for ImageCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.ok() {
            return writeln!(f, "ok: all {} images the release lists match its images.sha256", self.listed);
        }
        writeln!(
            f,
            "FAILED: {} of {} images match; {} missing, {} different",
            self.matching,
            self.listed,
            self.missing.len(),
            self.different.len()
        )?;
        for name in self.missing.iter().take(20) {
            writeln!(f, "  missing: {name}")?;
        }
        for name in self.different.iter().take(20) {
            writeln!(f, "  different sha256: {name}")?;
        }
        Ok(())
    }
}

/// Checks the images in `images` against the `images.sha256` of the release in `release`.
pub fn check_against(images: &Path, release: &Path) -> Result<ImageCheck, FetchError> {
    let list = release.join(crate::manifest::IMAGE_HASHES_FILE);
    let text = std::fs::read_to_string(&list).map_err(io(&list))?;
    let mut expected = BTreeMap::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let Some((sha256, name)) = line.split_once("  ") else {
            return Err(FetchError::Io { path: list.clone(), message: format!("line {}: expected `<sha256>  <file>`", n + 1) });
        };
        expected.insert(name.to_string(), sha256.to_string());
    }
    let mut check = ImageCheck { listed: expected.len(), ..ImageCheck::default() };
    for (name, sha256) in expected {
        let path = images.join(&name);
        match crate::hashing::sha256_file(&path) {
            Ok((actual, _)) if actual == sha256 => check.matching += 1,
            Ok(_) => check.different.push(name),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => check.missing.push(name),
            Err(e) => return Err(io(&path)(e)),
        }
    }
    Ok(check)
}
