//! Conversation replay, as kubernetes-sigs/inference-perf 3c7c4a3 generates it
//! (`inference_perf/datagen/conversation_replay_datagen.py`, `apis/user_session.py`,
//! `utils/distribution.py`; docs/MODEL.md, "Conversation replay"). Sans-IO and allocation-free:
//! the caller keeps one [`ConvSlot`] per conversation and a token buffer.
//!
//! * `count` conversations, each planned once: its turns (a draw of `turns`), its dynamic system
//!   prompt (a draw of `dynamic_system_tokens`), and per turn an input and an output length. The
//!   system prompt is the `shared_system_tokens` shared by every conversation, then the dynamic
//!   part.
//! * Request `data_index` i is turn `(i / count) mod turns(c)` of conversation c = i mod count
//!   (`load_lazy_data`); when that turn is 0 and i >= count the conversation starts again: a
//!   fresh context holding the system prompt only, the same turn inputs (the plan is fixed), new
//!   responses. A turn's context holding more than [`RESET_CONTEXT_TOKENS`] restarts it too
//!   (the "safety reset"), at the same turn index.
//! * Turn k's prompt = the context + its own input; when it finishes, the context becomes that
//!   prompt + the response (`update_context(self.prompt + " " + self.model_response)`); a failed
//!   turn leaves the context as it was (`process_failure`).
//! * Token identity: the shared system prompt's tokens are one sequence, the dynamic part's are
//!   the conversation's, turn t's input is the conversation's turn t (the same in every round),
//!   a response is unique to (conversation, round, turn). So turn k + 1's prompt starts with
//!   turn k's prompt and its response, token for token.
//! * Lengths: `utils/distribution.py` `sample_from_distribution`: normal as given, lognormal
//!   moment-matched to mean and sd, uniform on [min, max + 1), then clipped to [min, max],
//!   rounded, clipped; fixed = int(mean), unclipped. Computed in Q32.32 fixed point from a
//!   ChaCha8 seeded per conversation (and per turn), so every architecture draws the same.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use super::fixmath::{LN2_Q32, exp2_neg_q32, log2_q32};
use super::hash::fmix64;
use super::{Buffer, Error, Field};

/// Most turns of a conversation (the included turns are a 64-bit mask).
pub const MAX_TURNS: u64 = 64;
/// Most conversations.
pub const MAX_CONVERSATIONS: u32 = 1 << 20;
/// Largest length a distribution may give, tokens.
pub const MAX_LEN_TOKENS: u64 = 1 << 22;
/// Context at which a slot starts its conversation again (`len(context) > 2_700_000` characters,
/// "225K tokens" by the source's own estimate of 12 characters per random Qwen3 token).
pub const RESET_CONTEXT_TOKENS: u64 = 225_000;

/// A length distribution's law.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DistKind {
    /// Always int(mean) (not clipped).
    Fixed,
    /// Normal(mean, sd).
    Normal,
    /// Lognormal with mean and sd (moment-matched).
    Lognormal,
    /// Uniform on [min, max + 1).
    Uniform,
}

/// A length distribution (inference-perf's `Distribution`): a draw clipped to [min, max] and
/// rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Dist {
    /// The law.
    pub kind: DistKind,
    /// Mean x 1000.
    pub mean_milli: u64,
    /// Standard deviation x 1000.
    pub sd_milli: u64,
    /// Smallest value.
    pub min: u64,
    /// Largest value.
    pub max: u64,
}

impl Dist {
    /// Always `v`.
    pub const fn fixed(v: u64) -> Self {
        Dist { kind: DistKind::Fixed, mean_milli: v * 1000, sd_milli: 0, min: v, max: v }
    }

    /// The largest value a draw can take.
    pub fn upper(&self) -> u64 {
        match self.kind {
            DistKind::Fixed => self.mean_milli / 1000,
            _ => self.max,
        }
    }

    fn validate(&self) -> Result<(), &'static str> {
        if self.min > self.max {
            return Err("every distribution with min <= max");
        }
        if self.upper() > MAX_LEN_TOKENS
            || self.mean_milli > MAX_LEN_TOKENS * 1000
            || self.sd_milli > MAX_LEN_TOKENS * 1000
        {
            return Err("distributions of at most 4194304 tokens (mean, sd and max)");
        }
        if self.kind == DistKind::Lognormal && self.mean_milli == 0 {
            return Err("a lognormal distribution with mean > 0");
        }
        Ok(())
    }

    /// One draw.
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> u64 {
        let x_milli: i128 = match self.kind {
            DistKind::Fixed => return self.mean_milli / 1000,
            DistKind::Normal => {
                let z = std_normal_q32(rng) as i128;
                self.mean_milli as i128 + ((self.sd_milli as i128 * z) >> 32)
            }
            DistKind::Lognormal => lognormal_milli(self.mean_milli, self.sd_milli, rng) as i128,
            DistKind::Uniform => {
                let span = (self.max - self.min + 1) as u128 * 1000;
                (self.min as u128 * 1000 + ((rng.next_u64() as u128 * span) >> 64)) as i128
            }
        };
        let lo = self.min as i128 * 1000;
        let hi = self.max as i128 * 1000;
        // clip, round half up, clip
        ((x_milli.clamp(lo, hi) + 500) / 1000).clamp(self.min as i128, self.max as i128) as u64
    }
}

/// A standard normal draw in Q32.32 (Marsaglia's polar method, one value per accepted pair).
pub fn std_normal_q32(rng: &mut ChaCha8Rng) -> i64 {
    const ONE: i128 = 1 << 32;
    loop {
        // u, v uniform in [-1, 1) with 32 fractional bits
        let u = (rng.next_u64() >> 31) as i128 - ONE;
        let v = (rng.next_u64() >> 31) as i128 - ONE;
        let s = (u * u + v * v) >> 32;
        if s == 0 || s >= ONE {
            continue;
        }
        // -ln s = (32 - log2(s_q32)) ln 2, in Q32.32
        let neg_log2 = (32u128 << 32) - log2_q32(s as u64) as u128;
        let neg_ln = (neg_log2 * LN2_Q32 as u128) >> 32;
        // f = sqrt(-2 ln s / s) in Q32.32
        let t = ((2 * neg_ln) << 32) / s as u128;
        let f = (t << 32).isqrt() as i128;
        return ((u * f) >> 32) as i64;
    }
}

/// e^x for x in Q32.32 (|x| < 40), in Q32.32.
fn exp_q32(x: i128) -> u128 {
    // 2^(x / ln 2)
    let e2 = (x << 32) / LN2_Q32 as i128;
    if e2 <= 0 {
        return (exp2_neg_q32((-e2) as u64) as u128) >> 32;
    }
    let k = ((e2 + (1 << 32) - 1) >> 32) as u32; // ceil
    let rest = ((k as i128) << 32) - e2; // in [0, 1)
    ((exp2_neg_q32(rest as u64) as u128) >> 32) << k
}

/// A lognormal draw with mean m and sd s (both x 1000): sigma^2 = ln(1 + s^2 / m^2), mu = ln m -
/// sigma^2 / 2, so the draw is m exp(sigma z - sigma^2 / 2); x 1000.
fn lognormal_milli(m: u64, s: u64, rng: &mut ChaCha8Rng) -> u64 {
    if s == 0 {
        return m;
    }
    let (m2, s2) = (m as u128 * m as u128, s as u128 * s as u128);
    // ln((m^2 + s^2) / m^2) from log2 of integers (both below 2^64 by validate)
    let l2 = |x: u128| -> u128 {
        let shift = 128 - x.leading_zeros();
        let sh = shift.saturating_sub(64);
        log2_q32((x >> sh) as u64) as u128 + ((sh as u128) << 32)
    };
    let sigma2 = ((l2(m2 + s2) - l2(m2)) * LN2_Q32 as u128) >> 32;
    let sigma = (sigma2 << 32).isqrt() as i128;
    let z = std_normal_q32(rng) as i128;
    let x = ((sigma * z) >> 32) - (sigma2 as i128) / 2;
    let e = exp_q32(x.clamp(-(40i128 << 32), 40i128 << 32));
    ((m as u128 * e) >> 32).min(u64::MAX as u128) as u64
}

/// A conversation-replay workload (inference-perf's `data.conversation_replay`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConversationSpec {
    /// Seed of every draw.
    pub seed: u64,
    /// Conversations (slots).
    pub count: u32,
    /// The system prompt every conversation shares, tokens.
    pub shared_system_tokens: u64,
    /// Each conversation's own system prompt after the shared one, tokens.
    pub dynamic_system_tokens: Dist,
    /// Turns of a conversation.
    pub turns: Dist,
    /// Input tokens of a turn.
    pub input_tokens: Dist,
    /// Output tokens of a turn (generated exactly: `ignore_eos`).
    pub output_tokens: Dist,
    /// The server's `max_model_len` (0: none): a turn whose prompt + output exceeds it is refused
    /// (it fails at once and the context is kept).
    pub max_model_len: u64,
}

impl ConversationSpec {
    /// inference-perf's defaults for what the config leaves out: 10 turns, no dynamic system
    /// prompt, 512 input and 256 output tokens per turn.
    pub const fn defaults(seed: u64, count: u32) -> Self {
        ConversationSpec {
            seed,
            count,
            shared_system_tokens: 0,
            dynamic_system_tokens: Dist::fixed(0),
            turns: Dist::fixed(10),
            input_tokens: Dist::fixed(512),
            output_tokens: Dist::fixed(256),
            max_model_len: 0,
        }
    }

    /// Checks the spec.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |expected| Err(Error::InvalidConfig { field: Field::WorkloadConversations, expected });
        if self.count == 0 || self.count > MAX_CONVERSATIONS {
            return bad("count between 1 and 1048576");
        }
        if self.shared_system_tokens > MAX_LEN_TOKENS {
            return bad("shared_system_prompt_tokens of at most 4194304");
        }
        if self.shared_system_tokens + self.dynamic_system_tokens.upper().min(MAX_LEN_TOKENS + 1) > RESET_CONTEXT_TOKENS
        {
            return bad(
                "a system prompt (shared_system_prompt_tokens + the largest dynamic_system_prompt_tokens) of at most 225000 tokens, the safety reset's context",
            );
        }
        for d in [self.dynamic_system_tokens, self.turns, self.input_tokens, self.output_tokens] {
            if let Err(e) = d.validate() {
                return bad(e);
            }
        }
        let t = &self.turns;
        if t.upper() > MAX_TURNS || t.upper() == 0 || (t.kind != DistKind::Fixed && t.min == 0) {
            return bad("turns between 1 and 64");
        }
        Ok(())
    }

    /// Longest prompt + output a turn can have, tokens (the caller's token buffer).
    pub fn max_sequence_tokens(&self) -> u64 {
        let turn = self.input_tokens.upper() + self.output_tokens.upper();
        let ctx = self.shared_system_tokens + self.dynamic_system_tokens.upper() + (self.turns.upper() - 1) * turn;
        ctx.min(RESET_CONTEXT_TOKENS + turn) + turn
    }

    /// Conversation `c`'s plan: (turns, dynamic system prompt tokens).
    pub fn conversation(&self, c: u32) -> (u32, u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(fmix64(self.seed ^ fmix64(0xc0_0000_0000 | c as u64)));
        let turns = self.turns.sample(&mut rng).max(1) as u32;
        (turns, self.dynamic_system_tokens.sample(&mut rng))
    }

    /// Turn `t` of conversation `c`: (input tokens, output tokens).
    pub fn turn_lengths(&self, c: u32, t: u32) -> (u64, u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(fmix64(self.seed ^ fmix64(((c as u64) << 8) | t as u64 | 0x7 << 60)));
        let input = self.input_tokens.sample(&mut rng);
        (input, self.output_tokens.sample(&mut rng))
    }
}

/// A conversation's session (caller storage, one per live session: a conversation has one per
/// round, and a new round's may start while the last one's turns are still running).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConvSlot {
    /// Round of the conversation (its restarts): the session's.
    pub round: u64,
    /// Turns whose input and response are in the context.
    pub included: u64,
    /// Context tokens (system prompt + the included turns).
    pub context_tokens: u64,
    /// The session has been primed (its system prompt is in the context).
    pub primed: bool,
}

/// One turn to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// The conversation.
    pub conversation: u32,
    /// The turn index.
    pub turn: u32,
    /// The conversation's round (restart count).
    pub round: u64,
    /// Prompt tokens L (context + own input).
    pub prompt_tokens: u64,
    /// Output tokens O.
    pub output_tokens: u64,
    /// Its input tokens.
    pub input_tokens: u64,
    /// Refused by the server: prompt + output over `max_model_len`.
    pub refused: bool,
}

const SEG_SHARED: u64 = 0x51;
const SEG_DYNAMIC: u64 = 0x52;
const SEG_INPUT: u64 = 0x53;
const SEG_OUTPUT: u64 = 0x54;

fn fill(out: &mut [u32], seed: u64, kind: u64, id: u64) {
    let base = fmix64(seed ^ kind.wrapping_mul(0x9e37_79b9_7f4a_7c15)) ^ fmix64(id);
    for (o, t) in out.iter_mut().enumerate() {
        *t = fmix64(base ^ (o as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)) as u32;
    }
}

impl ConversationSpec {
    /// The session request `data_index` belongs to: (conversation, round of the conversation).
    /// A round's first turn opens a new session (`_new_session` with a new id, so it waits for
    /// nothing); each later turn waits for the previous turn of its own session.
    pub fn session_of(&self, data_index: u64) -> (u32, u64) {
        let c = (data_index % self.count as u64) as u32;
        let (turns, _) = self.conversation(c);
        (c, data_index / self.count as u64 / turns as u64)
    }

    /// The turn request `data_index` sends, as its session (`slot`: the one of
    /// [`Self::session_of`], default when new) stands when it is sent, after the session's
    /// previous turn ended; starts the session when new, and restarts it when its context is
    /// over [`RESET_CONTEXT_TOKENS`].
    pub fn plan(&self, slot: &mut ConvSlot, data_index: u64) -> Turn {
        let c = (data_index % self.count as u64) as u32;
        let round_num = data_index / self.count as u64;
        let (turns, dynamic) = self.conversation(c);
        let turn = (round_num % turns as u64) as u32;
        let system = self.shared_system_tokens + dynamic;
        let restart =
            !slot.primed || (turn == 0 && round_num > 0) || (turn != 0 && slot.context_tokens > RESET_CONTEXT_TOKENS);
        if restart {
            *slot = ConvSlot { round: round_num / turns as u64, included: 0, context_tokens: system, primed: true };
        }
        slot.round = round_num / turns as u64;
        let (input, output) = self.turn_lengths(c, turn);
        let prompt = slot.context_tokens + input;
        let refused = self.max_model_len > 0 && prompt + output > self.max_model_len;
        Turn {
            conversation: c,
            turn,
            round: slot.round,
            prompt_tokens: prompt,
            output_tokens: output,
            input_tokens: input,
            refused,
        }
    }

    /// Writes turn `t`'s prompt and then its response into `out` (at least L + O long);
    /// returns L + O.
    pub fn fill(&self, slot: &ConvSlot, t: &Turn, out: &mut [u32]) -> Result<usize, Error> {
        let n = (t.prompt_tokens + t.output_tokens) as usize;
        if out.len() < n {
            return Err(Error::BufferSize { buffer: Buffer::Tokens, expected: n, got: out.len() });
        }
        let c = t.conversation as u64;
        let (_, dynamic) = self.conversation(t.conversation);
        let mut at = 0usize;
        let mut seg = |out: &mut [u32], len: u64, kind: u64, id: u64| {
            let len = len as usize;
            fill(&mut out[at..at + len], self.seed, kind, id);
            at += len;
        };
        seg(out, self.shared_system_tokens, SEG_SHARED, 0);
        seg(out, dynamic, SEG_DYNAMIC, c);
        let response_id = |j: u32| fmix64(c ^ fmix64(t.round ^ ((j as u64) << 40)));
        for j in 0..t.turn {
            if slot.included & (1 << j) != 0 {
                let (i, o) = self.turn_lengths(t.conversation, j);
                seg(out, i, SEG_INPUT, (c << 8) | j as u64);
                seg(out, o, SEG_OUTPUT, response_id(j));
            }
        }
        seg(out, t.input_tokens, SEG_INPUT, (c << 8) | t.turn as u64);
        seg(out, t.output_tokens, SEG_OUTPUT, response_id(t.turn));
        debug_assert_eq!(at, n, "the context's tokens add up to the planned prompt");
        Ok(at)
    }

    /// Turn `t` ended: answered (`ok`: the context becomes its prompt + response) or failed
    /// (refused or timed out: the context is kept).
    pub fn finished(&self, slot: &mut ConvSlot, t: &Turn, ok: bool) {
        if ok {
            slot.included |= 1 << t.turn;
            slot.context_tokens = t.prompt_tokens + t.output_tokens;
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    fn moments(d: Dist, n: usize) -> (f64, f64, u64, u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let xs: std::vec::Vec<f64> = (0..n).map(|_| d.sample(&mut rng) as f64).collect();
        let m = xs.iter().sum::<f64>() / n as f64;
        let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
        let lo = xs.iter().cloned().fold(f64::MAX, f64::min) as u64;
        let hi = xs.iter().cloned().fold(0.0, f64::max) as u64;
        (m, v.sqrt(), lo, hi)
    }

    #[test]
    fn distributions_have_their_moments_and_bounds() {
        // unclipped in practice: mean 1000, sd 300, bounds far away
        let n = Dist { kind: DistKind::Normal, mean_milli: 1_000_000, sd_milli: 300_000, min: 0, max: 100_000 };
        let (m, s, _, _) = moments(n, 40_000);
        assert!((m - 1000.0).abs() < 6.0 && (s - 300.0).abs() < 6.0, "normal {m} {s}");
        let l = Dist { kind: DistKind::Lognormal, mean_milli: 1_500_000, sd_milli: 1_200_000, min: 0, max: 1_000_000 };
        let (m, s, _, _) = moments(l, 100_000);
        assert!((m - 1500.0).abs() < 25.0 && (s - 1200.0).abs() < 60.0, "lognormal {m} {s}");
        // clipped to [100, 10000]
        let c = Dist { min: 100, max: 10_000, ..l };
        let (_, _, lo, hi) = moments(c, 100_000);
        assert!(lo >= 100 && hi <= 10_000 && lo == 100, "{lo} {hi}");
        let u = Dist { kind: DistKind::Uniform, mean_milli: 0, sd_milli: 0, min: 15_000, max: 100_000 };
        let (m, _, lo, hi) = moments(u, 40_000);
        assert!((m - 57_500.0).abs() < 400.0 && lo >= 15_000 && hi <= 100_000, "uniform {m}");
        assert_eq!(Dist::fixed(7).sample(&mut ChaCha8Rng::seed_from_u64(1)), 7);
        // normal turns clamped to [2, 20] (code-generation): never outside, the lower clip hit
        let t = Dist { kind: DistKind::Normal, mean_milli: 6_000, sd_milli: 3_500, min: 2, max: 20 };
        let (_, _, lo, hi) = moments(t, 20_000);
        assert!(lo == 2 && (16..=20).contains(&hi), "{lo} {hi}");
    }

    fn spec() -> ConversationSpec {
        ConversationSpec {
            seed: 3,
            count: 4,
            shared_system_tokens: 40,
            dynamic_system_tokens: Dist { kind: DistKind::Uniform, mean_milli: 0, sd_milli: 0, min: 10, max: 30 },
            turns: Dist { kind: DistKind::Uniform, mean_milli: 0, sd_milli: 0, min: 2, max: 4 },
            input_tokens: Dist { kind: DistKind::Uniform, mean_milli: 0, sd_milli: 0, min: 5, max: 40 },
            output_tokens: Dist { kind: DistKind::Uniform, mean_milli: 0, sd_milli: 0, min: 5, max: 40 },
            max_model_len: 0,
        }
    }

    #[test]
    fn each_turn_starts_with_the_previous_prompt_and_response_and_restarts_fresh() {
        let s = spec();
        s.validate().unwrap();
        let mut slots = [ConvSlot::default(); 4];
        let mut prev: [Option<std::vec::Vec<u32>>; 4] = Default::default();
        let mut buf = std::vec![0u32; s.max_sequence_tokens() as usize];
        let mut first_round: [Option<std::vec::Vec<u32>>; 4] = Default::default();
        for i in 0..60u64 {
            let c = (i % 4) as usize;
            let t = s.plan(&mut slots[c], i);
            let n = s.fill(&slots[c], &t, &mut buf).unwrap();
            let seq = buf[..n].to_vec();
            let prompt = &seq[..t.prompt_tokens as usize];
            assert_eq!(&prompt[..40], &buf[..40], "shared system prompt");
            if t.turn > 0 {
                let p = prev[c].as_ref().unwrap();
                assert!(prompt.starts_with(p), "turn {} of {c} extends the previous prompt + response", t.turn);
            } else {
                // a restart: the same system prompt and first input as the conversation's first
                // round, a new response
                match &first_round[c] {
                    None => first_round[c] = Some(seq.clone()),
                    Some(f) => {
                        assert_eq!(&f[..t.prompt_tokens as usize], prompt);
                        assert_ne!(&f[t.prompt_tokens as usize..], &seq[t.prompt_tokens as usize..]);
                    }
                }
            }
            s.finished(&mut slots[c], &t, true);
            prev[c] = Some(seq);
        }
    }

    #[test]
    fn a_system_prompt_over_the_reset_is_refused_and_one_at_it_fits_the_buffer() {
        // spec()'s dynamic system prompt is at most 30 tokens
        let at = ConversationSpec { shared_system_tokens: RESET_CONTEXT_TOKENS - 30, ..spec() };
        at.validate().unwrap();
        let over = ConversationSpec { shared_system_tokens: RESET_CONTEXT_TOKENS - 29, ..spec() };
        assert!(over.validate().is_err());
        // at the limit every turn (each one restarting at the reset) fits the planned buffer
        let mut slots = [ConvSlot::default(); 4];
        let mut buf = std::vec![0u32; at.max_sequence_tokens() as usize];
        for i in 0..200u64 {
            let c = (i % 4) as usize;
            let t = at.plan(&mut slots[c], i);
            at.fill(&slots[c], &t, &mut buf).unwrap();
            at.finished(&mut slots[c], &t, true);
        }
    }

    #[test]
    fn a_refused_turn_keeps_the_context() {
        let s = ConversationSpec { max_model_len: 120, ..spec() };
        let mut slot = ConvSlot::default();
        let mut refused = 0;
        for i in (0..400u64).step_by(4) {
            let before = slot.context_tokens;
            let t = s.plan(&mut slot, i);
            assert_eq!(t.refused, t.prompt_tokens + t.output_tokens > 120);
            s.finished(&mut slot, &t, !t.refused);
            if t.refused {
                refused += 1;
                assert!(t.turn == 0 || slot.context_tokens == before);
            }
        }
        assert!(refused > 0);
    }
}
