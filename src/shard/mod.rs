//! Shards: the pair table as HF-named Parquet files with fixed, deterministic writer settings.

pub mod schema;
mod writer;

pub use schema::{pair_schema, PAIR_COLUMNS, SCHEMA_VERSION};
pub use writer::{shard_name, write_split, PairRecord, ShardError, ShardFile, ShardMeta};
