//! The in-repo test servers, on 127.0.0.1 only, started by the tests and by `task chaos --tools
//! http --model openai` (hidden subcommands of the CLI, documented in docs/RUNNER.md, "Test
//! servers"): an HTTP tool server that records every call in its own SQLite file, dedupes by
//! `Idempotency-Key` and refuses a stale fence ([`tools`]), and an OpenAI-compatible server that
//! answers scripted tool calls ([`model`]).

pub mod model;
pub mod tools;
