//! The chaos run's task specs: payments, lookups, at least one email, plain model steps.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// The draws of a chaos run (specs, kill plans, delays): ChaCha8, seeded, the same generator the
/// core's workload uses.
#[derive(Debug, Clone)]
pub struct Draws(ChaCha8Rng);

impl Draws {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Draws(ChaCha8Rng::seed_from_u64(seed))
    }
    /// Uniform in `0..n` (`n > 0`), by the multiply-shift rule (no modulo bias worth a name).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.0.next_u64() as u128 * n.max(1) as u128) >> 64) as u64
    }
}

/// What one step of a chaos task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepKind {
    Think,
    Lookup,
    Payment,
    Email,
}

/// The spec (TOML) of chaos task `id`: `steps` steps with at least one payment, one lookup and
/// one email, the rest drawn (payment 40 %, lookup 25 %, plain model step 20 %, email 15 %).
pub fn chaos_spec(id: &str, steps: u16, rng: &mut Draws) -> String {
    let n = steps.max(3) as usize;
    let mut kinds: Vec<StepKind> = (0..n)
        .map(|_| match rng.below(100) {
            0..40 => StepKind::Payment,
            40..65 => StepKind::Lookup,
            65..85 => StepKind::Think,
            _ => StepKind::Email,
        })
        .collect();
    // three distinct positions for the kinds every task must have
    let mut pos: Vec<usize> = (0..n).collect();
    for (k, kind) in [StepKind::Email, StepKind::Payment, StepKind::Lookup].into_iter().enumerate() {
        let j = k + rng.below((n - k) as u64) as usize;
        pos.swap(k, j);
        kinds[pos[k]] = kind;
    }
    let mut s = format!("id = \"{id}\"\n");
    for (i, k) in kinds.iter().enumerate() {
        let amount = 1 + rng.below(999);
        let step = match k {
            StepKind::Think => format!("model = \"step {i}: think\"\n"),
            StepKind::Lookup => {
                format!("model = \"step {i}: look up the account\"\ntool = \"lookup\"\nargs = {{ q = \"acct-{i}\" }}\n")
            }
            StepKind::Payment => format!(
                "model = \"step {i}: pay the invoice\"\ntool = \"payment\"\nargs = {{ amount = {amount}, to = \
                 \"acct-{i}\" }}\n"
            ),
            StepKind::Email => format!(
                "model = \"step {i}: tell the customer\"\ntool = \"send_email\"\nargs = {{ to = \
                 \"c{i}@example.com\", subject = \"receipt {amount}\" }}\n"
            ),
        };
        s.push_str("\n[[step]]\n");
        s.push_str(&step);
    }
    s
}
