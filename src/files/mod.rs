//! The tool's footing on the file system, below every stage: what it reads from a path someone
//! named (regular files only, with a size cap: [`regular`]) and the folders it writes (its own
//! alone, one writer at a time: [`out_dir`], [`lock`]), and the cells of the CSV files it writes, safe to
//! open in a spreadsheet ([`spreadsheet`]).

pub mod lock;
pub mod out_dir;
pub mod regular;
pub mod spreadsheet;

pub use out_dir::{check_file, head_matches, Claim, OutDir, OutDirError, Protected};
pub use regular::Limit;
