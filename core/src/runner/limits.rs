//! Named limits of the runner core. Every bound the core enforces is one of these.

/// Longest task id, in bytes.
pub const MAX_TASK_ID: usize = 48;
/// Longest tool name, in bytes.
pub const MAX_TOOL_NAME: usize = 16;
/// Idempotency key length: 128 bits as lowercase hex.
pub const KEY_LEN: usize = 32;
/// Largest tool arguments, in bytes.
pub const MAX_ARGS_BYTES: usize = 256;
/// Longest model response text, in bytes.
pub const MAX_MODEL_TEXT: usize = 256;
/// Longest tool result text, in bytes.
pub const MAX_RESULT_TEXT: usize = 128;
/// Longest lease owner string, in bytes.
pub const MAX_OWNER: usize = 64;
/// Longest failure reason, in bytes.
pub const MAX_REASON: usize = 64;
/// Most steps in one task.
pub const MAX_STEPS: u16 = 60_000;
/// Largest postcard-encoded record (a test checks that the largest possible record fits).
pub const MAX_RECORD_BYTES: usize = 608;
/// Shortest lease, ms: below it a runner cannot commit a step before its lease runs out.
pub const MIN_LEASE_MS: u64 = 10;
/// Longest lease, ms (one day): a longer one would keep a dead runner's task waiting that long.
pub const MAX_LEASE_MS: u64 = 86_400_000;
/// Clock skew between the hosts of one deployment that a lease row may show (one hour): an
/// expiry further ahead than [`MAX_LEASE_MS`] plus this is not a lease a runner wrote.
pub const MAX_CLOCK_SKEW_MS: u64 = 3_600_000;
