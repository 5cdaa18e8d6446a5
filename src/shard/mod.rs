//! Shards: the release's tables as HF-named Parquet files with fixed, deterministic writer
//! settings. [`schema`] owns the columns of both tables.

mod columns;
pub mod images;
pub mod pairs;
pub mod schema;
mod writer;

pub use images::ImageRecord;
pub use pairs::PairRecord;
pub use schema::{
    image_columns, image_schema, pair_columns, pair_schema, ColumnDoc, ColumnSet, DIAGNOSE_COLUMNS, IMAGE_COLUMNS, PAIR_COLUMNS,
    REASON_COLUMNS, REPORT_COLUMNS, SCHEMA_VERSION,
};
pub use writer::{shard_name, write_split, ShardError, ShardFile, ShardMeta, TableLayout};
