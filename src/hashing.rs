//! SHA-256 helpers shared by every stage that keys, pins or verifies something.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Streams a file through SHA-256; returns (hex digest, byte count).
pub fn sha256_file(path: &Path) -> io::Result<(String, u64)> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), total))
}

/// Hash of a value's JSON form. Struct fields serialize in declaration order and maps are
/// BTreeMaps, so the JSON (and the key) is stable for equal values.
pub fn sha256_json<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_vec(value).expect("in-memory JSON serialization cannot fail");
    sha256_hex(&json)
}

/// Hash of several named parts, each length-prefixed so that ("ab","c") != ("a","bc").
pub fn sha256_parts(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Well-mixed 64-bit value from a string key: used where a stable pseudo-random order is needed
/// (seeded selection, tie-breaks) without pulling in an RNG whose stream could change.
pub fn stable_u64(parts: &[&str]) -> u64 {
    let digest = sha256_parts(parts);
    u64::from_str_radix(&digest[..16], 16).expect("hex digest")
}
