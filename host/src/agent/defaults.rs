//! The one home of every default and limit of the agent runner's spec keys (docs/RUNNER.md, "The
//! spec format", lists each with its key). Times in ms, sizes in bytes.

/// Steps an agent task may take when its spec sets no `max_steps` (each step is one model call and
/// at most one tool call); the model's final answer ends the task earlier.
pub const MAX_STEPS: u16 = 16;

/// The model's token limit per answer (`max_tokens`).
pub const MODEL_MAX_TOKENS: u32 = 1024;
/// Largest `max_tokens` a spec may ask for.
pub const MODEL_MAX_TOKENS_LIMIT: u32 = 1_000_000;
/// How long one model request may take, whole (`[model] timeout_ms`).
pub const MODEL_TIMEOUT_MS: u64 = 120_000;
/// How long connecting to the model's server may take (`connect_timeout_ms`).
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Re-asks of the model after a 408/409/429/5xx answer, a timeout or a broken connection, or an
/// invalid tool call (`[model] retries`), so up to this many + 1 requests per step.
pub const MODEL_RETRIES: u32 = 4;
/// How long one tool call may take (`[[tool]] timeout_ms`).
pub const TOOL_TIMEOUT_MS: u64 = 30_000;
/// Retries of one tool call where the class rule allows them (`[[tool]] retries`).
pub const TOOL_RETRIES: u32 = 3;
/// First pause before a retry (`backoff_ms`); doubled each time up to `max_backoff_ms`.
pub const BACKOFF_MS: u64 = 500;
/// Longest pause between two attempts (`max_backoff_ms`).
pub const MAX_BACKOFF_MS: u64 = 8_000;
/// Longest `Retry-After` (or `retry-after-ms`) honoured (`max_retry_after_ms`); a server that asks
/// for a longer wait is not retried (the attempt counts as failed).
pub const MAX_RETRY_AFTER_MS: u64 = 60_000;
/// Longest timeout, backoff or `Retry-After` bound a spec may set (one hour): a runner must never
/// sit on a lease for longer without a word.
pub const MAX_WAIT_MS: u64 = 3_600_000;
/// Most retries a spec may set.
pub const MAX_RETRIES: u32 = 20;
/// Longest tool or model answer body read, bytes; a longer one is cut (the log keeps at most the
/// core's `MAX_RESULT_TEXT` of it anyway).
pub const MAX_BODY_BYTES: u64 = 1 << 20;
/// Longest prompt or system message, bytes (they are sent with every request).
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;
/// Longest tool description, bytes.
pub const MAX_DESCRIPTION_BYTES: usize = 4096;
/// Longest JSON Schema of a tool's parameters (canonical JSON), bytes.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// Most tools one spec declares.
pub const MAX_TOOLS: usize = 64;
/// Most program arguments of a command tool.
pub const MAX_ARGV: usize = 64;
