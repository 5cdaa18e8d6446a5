//! The official split lists, `train_val_list.txt` and `test_list.txt`: one image name per line.

use std::collections::HashMap;
use std::path::Path;

use super::SourceError;

/// Which official list an image is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OfficialSplit {
    TrainVal,
    Test,
}

impl OfficialSplit {
    pub fn name(self) -> &'static str {
        match self {
            OfficialSplit::TrainVal => "train_val",
            OfficialSplit::Test => "test",
        }
    }
}

/// Reads both lists; every name must be a known image, and no image may be on both.
pub fn read(train_val: &Path, test: &Path, known_images: &HashMap<&str, usize>) -> Result<HashMap<usize, OfficialSplit>, SourceError> {
    let mut assigned: HashMap<usize, OfficialSplit> = HashMap::new();
    for (path, split) in [(train_val, OfficialSplit::TrainVal), (test, OfficialSplit::Test)] {
        let text = std::fs::read_to_string(path).map_err(|source| SourceError::Io { path: path.into(), source })?;
        for (i, raw) in text.lines().enumerate() {
            let name = raw.trim();
            if name.is_empty() {
                continue;
            }
            let bad = |message: String| SourceError::Row { path: path.into(), line: i as u64 + 1, message };
            let &row = known_images.get(name).ok_or_else(|| bad(format!("image {name:?} is not in the data entry file")))?;
            if let Some(previous) = assigned.insert(row, split) {
                return Err(bad(format!("image {name:?} is already on the {} list", previous.name())));
            }
        }
    }
    Ok(assigned)
}
