//! Reading files whose paths come from outside: a spec's `extends`, a gold file, a manifest, an
//! image. Each is opened as a regular file only (a FIFO would block the build forever, a device
//! such as `/dev/zero` would be read until memory runs out, a folder fails late and vaguely), and
//! read under a size cap that names what it protects. Errors are `io::Error`s whose message says
//! which rule was broken, so every caller's error keeps its own context (which file, which key).

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

/// The most bytes the tool reads from one kind of file, and what to call that kind in an error.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub what: &'static str,
    pub bytes: u64,
}

const MIB: u64 = 1 << 20;

/// A release spec file: a hand-written page of YAML. 1 MiB is a hundred times the largest here.
pub const SPEC: Limit = Limit { what: "a spec file", bytes: MIB };
/// `manifest.json`, `build.lock`, `eval.json` and other JSON a release or the tool writes: a
/// full NIH build's lock lists 112,120 image digests (about 10 MB).
pub const RELEASE_JSON: Limit = Limit { what: "a release's JSON file", bytes: 256 * MIB };
/// A signature bundle or provenance: a few kilobytes each.
pub const SIGNATURE: Limit = Limit { what: "a signature file", bytes: 16 * MIB };
/// A chest X-ray PNG: NIH's are 1024x1024 8-bit, under 4 MB.
pub const IMAGE: Limit = Limit { what: "an image", bytes: 64 * MIB };
/// A table the spec names (NIH's metadata, a gold file, an image list): NIH's Data_Entry CSV is
/// 8 MB; Google's and RSNA's gold files are smaller.
pub const TABLE: Limit = Limit { what: "a table or list", bytes: 1024 * MIB };
/// One cache entry: a few kilobytes of scores or generated text.
pub const CACHE_ENTRY: Limit = Limit { what: "a cache entry", bytes: 64 * MIB };

/// What a non-regular file is, in words.
pub fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

fn not_regular(meta: &std::fs::Metadata) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("is {}, not a regular file", kind_of(meta)))
}

/// Opens `path` for reading if it is a regular file. The open itself never blocks (a FIFO with
/// no writer would), and with `follow_links` false a symbolic link as the last component is
/// refused rather than followed.
pub fn open(path: &Path, follow_links: bool) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = libc::O_NONBLOCK;
    if !follow_links {
        flags |= libc::O_NOFOLLOW;
        let meta = std::fs::symlink_metadata(path)?;
        if !meta.file_type().is_file() {
            return Err(not_regular(&meta));
        }
    }
    let file = OpenOptions::new().read(true).custom_flags(flags).open(path).map_err(|e| {
        // O_NOFOLLOW on a link that appeared since the check above.
        if e.raw_os_error() == Some(libc::ELOOP) {
            io::Error::new(io::ErrorKind::InvalidInput, "is a symbolic link, not a regular file")
        } else {
            e
        }
    })?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_regular(&meta));
    }
    Ok(file)
}

/// The whole of the regular file at `path` (links followed), refused past `limit`.
pub fn read(path: &Path, limit: Limit) -> io::Result<Vec<u8>> {
    read_file(open(path, true)?, limit)
}

/// [`read`] as UTF-8 text.
pub fn read_to_string(path: &Path, limit: Limit) -> io::Result<String> {
    String::from_utf8(read(path, limit)?).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "is not UTF-8 text"))
}

/// The whole of an opened file, refused past `limit` (checked against its size first, and
/// again while reading, for a file that grows).
pub fn read_file(file: File, limit: Limit) -> io::Result<Vec<u8>> {
    let size = file.metadata()?.len();
    if size > limit.bytes {
        return Err(too_large(size, limit));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit.bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit.bytes {
        return Err(too_large(bytes.len() as u64, limit));
    }
    Ok(bytes)
}

fn too_large(size: u64, limit: Limit) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("is {size} bytes, over the limit of {} bytes for {}", limit.bytes, limit.what))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: Limit = Limit { what: "a test file", bytes: 8 };

    #[test]
    fn regular_files_are_read_whole_up_to_their_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345678").unwrap();
        assert_eq!(read(&path, TINY).unwrap(), b"12345678");
        std::fs::write(&path, b"123456789").unwrap();
        let err = read(&path, TINY).unwrap_err().to_string();
        assert_eq!(err, "is 9 bytes, over the limit of 8 bytes for a test file");
    }

    #[test]
    fn fifos_devices_and_folders_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(read(&fifo, TINY).unwrap_err().to_string().contains("a FIFO (named pipe), not a regular file"));
        assert!(read(Path::new("/dev/zero"), TINY).unwrap_err().to_string().contains("is a device"));
        assert!(read(dir.path(), TINY).unwrap_err().to_string().contains("is a folder"));
    }

    #[test]
    fn links_are_followed_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open(&link, true).is_ok());
        assert!(open(&link, false).unwrap_err().to_string().contains("symbolic link"));
    }
}
