//! One safetensors file read tensor by tensor: the header parsed alone, then each tensor's bytes
//! read from the file straight into that tensor's own memory.
//!
//! `Tensor::read_safetensors` (tch, over the `safetensors` crate, which parses only a whole
//! in-memory buffer) holds the file's bytes and a copy of every tensor at once: twice the
//! checkpoint while loading. Read this way, resident memory while loading stays about the size of
//! the weights, which is what lets a 30B mixture of experts load on a node that holds it once.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tch::{Device, Kind, Tensor};

use super::error::VlmError;

/// The largest header accepted: safetensors' own limit (100 MB).
const MAX_HEADER: u64 = 100_000_000;

#[derive(Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<i64>,
    data_offsets: (u64, u64),
}

/// A tensor's place in the file.
struct Stored {
    kind: Kind,
    shape: Vec<i64>,
    start: u64,
    len: u64,
}

pub struct SafetensorsFile {
    path: PathBuf,
    file: File,
    tensors: BTreeMap<String, Stored>,
}

fn kind_of(dtype: &str) -> Option<(Kind, u64)> {
    Some(match dtype {
        "F64" => (Kind::Double, 8),
        "F32" => (Kind::Float, 4),
        "F16" => (Kind::Half, 2),
        "BF16" => (Kind::BFloat16, 2),
        "I64" => (Kind::Int64, 8),
        "I32" => (Kind::Int, 4),
        "I16" => (Kind::Int16, 2),
        "I8" => (Kind::Int8, 1),
        "U8" => (Kind::Uint8, 1),
        "BOOL" => (Kind::Bool, 1),
        _ => return None,
    })
}

impl SafetensorsFile {
    /// Opens `path` and reads its header: every tensor's dtype and shape, and where its bytes are,
    /// checked against the file's length.
    pub fn open(path: &Path) -> Result<SafetensorsFile, VlmError> {
        let bad = |message: String| VlmError::File { path: path.to_path_buf(), message: format!("not readable safetensors: {message}") };
        let file = File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
        let file_len = file.metadata().map_err(|e| bad(format!("cannot read its size: {e}")))?.len();
        let mut prefix = [0u8; 8];
        file.read_exact_at(&mut prefix, 0).map_err(|_| bad("shorter than its 8-byte header length".into()))?;
        let header_len = u64::from_le_bytes(prefix);
        if header_len > MAX_HEADER || 8 + header_len > file_len {
            return Err(bad(format!("a header of {header_len} bytes in a file of {file_len}")));
        }
        let mut header = vec![0u8; header_len as usize];
        file.read_exact_at(&mut header, 8).map_err(|e| bad(format!("cannot read the header: {e}")))?;
        let mut entries: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| bad(format!("the header is not a JSON object: {e}")))?;
        entries.remove("__metadata__");
        let data_start = 8 + header_len;
        let mut tensors = BTreeMap::new();
        for (name, value) in entries {
            let entry: Entry = serde_json::from_value(value).map_err(|e| bad(format!("tensor {name}: {e}")))?;
            let (kind, width) = kind_of(&entry.dtype)
                .ok_or_else(|| bad(format!("tensor {name} has dtype {}, which the engine cannot read", entry.dtype)))?;
            let elements = entry.shape.iter().try_fold(1u64, |n, &d| u64::try_from(d).ok().and_then(|d| n.checked_mul(d)));
            let (begin, end) = entry.data_offsets;
            let len = elements.and_then(|n| n.checked_mul(width));
            if len != end.checked_sub(begin) || data_start.checked_add(end).is_none_or(|e| e > file_len) {
                return Err(bad(format!(
                    "tensor {name}: shape {:?} of {} does not fit its bytes {begin}..{end} (the file holds {} after its header)",
                    entry.shape,
                    entry.dtype,
                    file_len - data_start
                )));
            }
            tensors.insert(name, Stored { kind, shape: entry.shape, start: data_start + begin, len: end - begin });
        }
        Ok(SafetensorsFile { path: path.to_path_buf(), file, tensors })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Reads one tensor into a new CPU tensor of its stored dtype.
    pub fn read(&self, name: &str) -> Result<Tensor, VlmError> {
        let stored = &self.tensors[name];
        let tensor = Tensor::empty(stored.shape.as_slice(), (stored.kind, Device::Cpu));
        if stored.len > 0 {
            // SAFETY: `tensor` was just made contiguous on the CPU with exactly `len` bytes
            // (the header's shape times the dtype's width, checked in `open`), and nothing else
            // refers to it until this function returns it.
            let bytes = unsafe { std::slice::from_raw_parts_mut(tensor.data_ptr() as *mut u8, stored.len as usize) };
            self.file
                .read_exact_at(bytes, stored.start)
                .map_err(|e| VlmError::File { path: self.path.clone(), message: format!("cannot read tensor {name}: {e}") })?;
        }
        Ok(tensor)
    }
}
