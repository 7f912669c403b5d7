//! What a run reads: trace files (plain, gzip or zstd: `file`), Mooncake JSONL lines (`trace`),
//! the other trace formats (`formats`) and Dynamo's session traces (`dynamo`).

pub mod dynamo;
pub mod file;
pub mod formats;
pub mod trace;
