//! Named limits of the runner core. Every bound the core enforces is one of these.

/// Longest task id, in bytes.
pub const MAX_TASK_ID: usize = 48;
/// Longest tool name, in bytes.
pub const MAX_TOOL_NAME: usize = 16;
/// Idempotency key length: 128 bits as lowercase hex.
pub const KEY_LEN: usize = 32;
/// Largest tool arguments, in bytes (canonical JSON on the host). Issue 29 raised it from 256 for
/// a real model's calls; a larger call is refused before anything is recorded.
pub const MAX_ARGS_BYTES: usize = 512;
/// Longest model response text, in bytes (the text beside a tool call, or the final answer).
/// Issue 29 raised it from 256; the host cuts a longer text at a character boundary and says so.
pub const MAX_MODEL_TEXT: usize = 512;
/// Longest tool result text, in bytes: what the model is shown of a tool's answer on the next
/// step. Issue 29 raised it from 128; the host cuts a longer answer and says so.
pub const MAX_RESULT_TEXT: usize = 1024;
/// Longest lease owner string, in bytes.
pub const MAX_OWNER: usize = 64;
/// Longest failure reason, in bytes.
pub const MAX_REASON: usize = 64;
/// Most steps in one task.
pub const MAX_STEPS: u16 = 60_000;
/// Largest postcard-encoded record (a test checks that the largest possible record fits).
pub const MAX_RECORD_BYTES: usize = 1152;
/// Shortest lease, ms: below it a runner cannot commit a step before its lease runs out.
pub const MIN_LEASE_MS: u64 = 10;
/// Longest lease, ms (one day): a longer one would keep a dead runner's task waiting that long.
pub const MAX_LEASE_MS: u64 = 86_400_000;
/// Clock skew between the hosts of one deployment that a lease row may show (one hour): an
/// expiry further ahead than [`MAX_LEASE_MS`] plus this is not a lease a runner wrote.
pub const MAX_CLOCK_SKEW_MS: u64 = 3_600_000;
