//! The synthetic workload generator: T tenants with a shared prefix of P tokens and a variable
//! user suffix, uniform or Zipf tenant popularity, Poisson arrivals, optional RAG documents, and
//! the prompt-layout toggle. Seeded with ChaCha8; integer arithmetic only, so every architecture
//! produces the same requests.
//!
//! Token ids stand for content (only the sharing structure matters): token `o` of a segment is
//! `fmix64(seed, segment kind, segment id, o)` truncated to 32 bits. A prompt is, in order:
//!
//! ```text
//! [header: H tokens, unique per request]   only with Layout::TimestampFirst
//! [tenant prefix: P tokens]                shared by every request of the tenant
//! [k RAG documents: doc_tokens each]       shared documents, in random or doc-id order (optional)
//! [user suffix: S tokens, unique]          S uniform in [suffix_min, suffix_max]
//! ```
//!
//! Arrival times are Poisson: inter-arrival = mean * (-ln U), U from 53 random bits, computed in
//! Q32.32 fixed point; then rounded down to whole milliseconds so that a generated Mooncake trace
//! (integer ms timestamps) replays exactly like the direct run.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use super::fixmath::{exp2_neg_q32, log2_q32, neg_ln_uniform_q32};
use super::hash::fmix64;
use super::limits::{MAX_REQUESTS, quoting};
use super::{Buffer, Error, Field};

/// Most RAG documents per tenant.
pub const MAX_RAG_DOCS: usize = 256;
/// Most values in an output-length list ([`WorkloadSpec::output_choices`]).
pub const MAX_OUTPUT_CHOICES: usize = 16;
/// Most tenants.
pub const MAX_TENANTS: u32 = 1 << 20;
/// Longest prompt the generator produces, tokens.
pub const MAX_GEN_PROMPT_TOKENS: u64 = 1 << 22;
/// Most arrival-rate stages ([`WorkloadSpec::stages`]; llm-d's ladder has 17).
pub const MAX_STAGES: usize = 32;

/// One stage of a ramp: Poisson arrivals at `rate_milli_per_s` / 1000 requests per second for
/// `duration_ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Stage {
    /// Arrival rate, requests per second x 1000 (0: no arrivals during the stage).
    pub rate_milli_per_s: u64,
    /// Length, ms.
    pub duration_ms: u64,
}

/// Whose user suffix (question) a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum SuffixScope {
    /// A fresh suffix for every request (never shared).
    Request,
    /// One suffix per (tenant, user): a user's later requests repeat it, so the whole prompt can
    /// hit (inference-perf's `shared_prefix` data: each user has one question).
    User,
}

/// How tenants are picked for each request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Popularity {
    /// Every tenant equally likely.
    Uniform,
    /// P(tenant k) proportional to 1 / k^s, k = 1..T, with s = `s_milli` / 1000.
    Zipf {
        /// Exponent s in thousandths.
        s_milli: u32,
    },
    /// Every (tenant, user) pair once per T x U requests, in one fixed seeded shuffled order
    /// (inference-perf's `shared_prefix` generator: its T x U prompts shuffled once, then sent
    /// in turn). Request i takes pair perm(i mod T U): tenant = pair / U, user = pair mod U.
    Cycle,
}

/// Where the per-request header (timestamp and user id) goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Layout {
    /// Stable tenant prefix first; no per-request header (the cache-friendly layout).
    StablePrefixFirst,
    /// A per-request timestamp and user id on the first line, before the shared prefix.
    TimestampFirst,
}

/// Order of the retrieved documents of a RAG-shaped tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DocOrder {
    /// As retrieved (random).
    Random,
    /// Sorted by document id.
    Sorted,
}

/// A workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WorkloadSpec {
    /// Seed of the ChaCha8 generator.
    pub seed: u64,
    /// Requests to generate.
    pub requests: u64,
    /// Tenants T.
    pub tenants: u32,
    /// Users per tenant (user ids appear in the timestamp-first header).
    pub users_per_tenant: u32,
    /// Shared prefix P, tokens.
    pub prefix_tokens: u32,
    /// Smallest user suffix, tokens.
    pub suffix_min_tokens: u32,
    /// Largest user suffix, tokens.
    pub suffix_max_tokens: u32,
    /// Smallest output, tokens.
    pub output_min_tokens: u32,
    /// Largest output, tokens.
    pub output_max_tokens: u32,
    /// Output lengths to draw from uniformly instead of [min, max] (the first
    /// `output_choices_len` entries; 0: use the range). One draw either way.
    pub output_choices: [u32; MAX_OUTPUT_CHOICES],
    /// Entries of `output_choices` in use.
    pub output_choices_len: u32,
    /// Tenant popularity.
    pub popularity: Popularity,
    /// Poisson arrival rate, requests per second x 1000 (0: all arrive at t = 0).
    pub rate_milli_per_s: u64,
    /// Prompt layout.
    pub layout: Layout,
    /// Header length with the timestamp-first layout, tokens.
    pub header_tokens: u32,
    /// RAG documents per tenant (0: no RAG section).
    pub rag_docs: u32,
    /// Tokens per RAG document.
    pub rag_doc_tokens: u32,
    /// Documents retrieved per request.
    pub rag_per_request: u32,
    /// Order of retrieved documents.
    pub rag_order: DocOrder,
    /// A burst: from `burst_start_ms` for `burst_ms` the arrival rate is this instead (requests
    /// per second x 1000; 0: no burst).
    pub burst_rate_milli_per_s: u64,
    /// Start of the burst, ms from the first arrival's clock origin.
    pub burst_start_ms: u64,
    /// Length of the burst, ms.
    pub burst_ms: u64,
    /// Whose suffix a request carries.
    pub suffix_scope: SuffixScope,
    /// A ramp: when `stages_len > 0`, arrivals follow these stages one after the other (from
    /// t = 0) instead of `rate_milli_per_s` and the burst, and generation ends at the end of the
    /// last stage (or after `requests`, whichever comes first).
    pub stages: [Stage; MAX_STAGES],
    /// Entries of `stages` in use (0: no ramp).
    pub stages_len: u32,
}

impl WorkloadSpec {
    /// Longest prompt this spec can produce, tokens.
    pub fn max_prompt_tokens(&self) -> u64 {
        let header = if self.layout == Layout::TimestampFirst { self.header_tokens as u64 } else { 0 };
        let rag = if self.rag_docs > 0 { self.rag_per_request as u64 * self.rag_doc_tokens as u64 } else { 0 };
        header + self.prefix_tokens as u64 + rag + self.suffix_max_tokens as u64
    }

    /// The stages in use.
    pub fn stages(&self) -> &[Stage] {
        &self.stages[..(self.stages_len as usize).min(MAX_STAGES)]
    }

    /// End of the last stage, ms from t = 0 (0 without stages).
    pub fn stages_end_ms(&self) -> u64 {
        self.stages().iter().fold(0u64, |a, st| a.saturating_add(st.duration_ms))
    }

    /// Whether arrivals are generated at a positive rate at some point.
    fn timed(&self) -> bool {
        self.rate_milli_per_s > 0 || self.stages_len > 0
    }

    /// Checks the spec.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field, expected| Err(Error::InvalidConfig { field, expected });
        if self.requests > MAX_REQUESTS {
            return bad(Field::WorkloadRequests, quoting!("at most 4294967296 (MAX_REQUESTS)", MAX_REQUESTS));
        }
        if self.tenants == 0 || self.tenants > MAX_TENANTS {
            return bad(Field::WorkloadTenants, quoting!("between 1 and 1048576", MAX_TENANTS));
        }
        if self.users_per_tenant == 0 {
            return bad(Field::WorkloadUsersPerTenant, "at least 1");
        }
        if self.suffix_min_tokens > self.suffix_max_tokens {
            return bad(Field::WorkloadSuffixTokens, "[min, max] with min <= max");
        }
        if self.output_min_tokens > self.output_max_tokens {
            return bad(Field::WorkloadOutputTokens, "[min, max] with min <= max");
        }
        if self.output_choices_len as usize > MAX_OUTPUT_CHOICES {
            return bad(Field::WorkloadOutputTokensChoices, quoting!("at most 16 values", MAX_OUTPUT_CHOICES));
        }
        if self.rag_docs as usize > MAX_RAG_DOCS || self.rag_per_request > self.rag_docs {
            return bad(Field::WorkloadRag, quoting!("docs <= 256 and per_request <= docs", MAX_RAG_DOCS));
        }
        if self.burst_rate_milli_per_s > 0 && (self.rate_milli_per_s == 0 || self.burst_ms == 0) {
            return bad(Field::WorkloadBurst, "a positive base rate_per_s and a positive duration");
        }
        if self.burst_start_ms.checked_add(self.burst_ms).and_then(|e| e.checked_mul(1_000_000)).is_none() {
            return bad(Field::WorkloadBurst, "start + duration below 1.8e13 ms");
        }
        if self.max_prompt_tokens() > MAX_GEN_PROMPT_TOKENS {
            return bad(Field::Workload, quoting!("prompts of at most 4194304 tokens", MAX_GEN_PROMPT_TOKENS));
        }
        self.validate_stages()?;
        if self.popularity == Popularity::Cycle && self.tenants as u64 * self.users_per_tenant as u64 > 1 << 32 {
            return bad(Field::WorkloadPopularity, "cycle with tenants x users_per_tenant <= 4294967296");
        }
        Ok(())
    }

    fn validate_stages(&self) -> Result<(), Error> {
        let bad = |field, expected| Err(Error::InvalidConfig { field, expected });
        if self.stages_len as usize > MAX_STAGES {
            return bad(Field::WorkloadStages, "at most 32 stages");
        }
        if self.stages_len == 0 {
            return Ok(());
        }
        if self.rate_milli_per_s > 0 || self.burst_rate_milli_per_s > 0 {
            return bad(Field::WorkloadStages, "stages or rate_per_s (and burst), not both");
        }
        let st = self.stages();
        if st.iter().any(|s| s.duration_ms == 0) {
            return bad(Field::WorkloadStages, "every stage with a positive duration_s");
        }
        if st.iter().all(|s| s.rate_milli_per_s == 0) {
            return bad(Field::WorkloadStages, "at least one stage with a positive rate_per_s");
        }
        if self.stages_end_ms().checked_mul(1_000_000).is_none_or(|ns| ns == u64::MAX) {
            return bad(Field::WorkloadStages, "a total duration below 1.8e13 ms");
        }
        Ok(())
    }

    /// Blocks of the hot set: every tenant's prefix (and RAG documents), in full 16-token blocks.
    pub fn hot_set_blocks(&self) -> u64 {
        let docs = if self.rag_docs > 0 { self.rag_docs as u64 * self.rag_doc_tokens as u64 / 16 } else { 0 };
        self.tenants as u64 * (self.prefix_tokens as u64 / 16 + docs)
    }
}

/// One generated request; its tokens are in the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GenRequest {
    /// 0-based index.
    pub index: u64,
    /// Tenant.
    pub tenant: u32,
    /// Arrival, ns (a whole number of milliseconds).
    pub arrival_ns: u64,
    /// Prompt tokens L.
    pub input_tokens: u64,
    /// Output tokens O.
    pub output_tokens: u64,
}

const SEG_HEADER: u64 = 1;
const SEG_PREFIX: u64 = 2;
const SEG_DOC: u64 = 3;
const SEG_SUFFIX: u64 = 4;
const SEG_USER_SUFFIX: u64 = 5;

/// The rate of `stages` (run back to back from t = 0) at `t_ns` and the end of its stage; after
/// the last stage (0, `u64::MAX`). validate() bounds the total below `u64::MAX` ns.
fn stage_rate_at(stages: &[Stage], t_ns: u64) -> (u64, u64) {
    let mut end_ns = 0u64;
    for st in stages {
        end_ns += st.duration_ms * 1_000_000;
        if t_ns < end_ns {
            return (st.rate_milli_per_s, end_ns);
        }
    }
    (0, u64::MAX)
}

/// The suffix length of user `user_id` with [`SuffixScope::User`]: fixed per user, uniform in
/// [min, max] by a hash of (seed, user), so it is the same at every request of the user.
fn user_suffix_tokens(s: &WorkloadSpec, user_id: u64) -> u32 {
    let span = (s.suffix_max_tokens - s.suffix_min_tokens) as u64 + 1;
    s.suffix_min_tokens + ((fmix64(s.seed ^ fmix64(user_id ^ 0x5eed_0f5e)) as u128 * span as u128) >> 64) as u32
}

/// One bijective round on k-bit values: multiply by an odd constant, add, xor-shift (each step is
/// a bijection of [0, 2^k), so the round is).
fn permute_round(x: u64, k: u32, mul: u64, add: u64) -> u64 {
    let mask = if k == 64 { u64::MAX } else { (1u64 << k) - 1 };
    let mut y = x.wrapping_mul(mul | 1).wrapping_add(add) & mask;
    y ^= y >> k.div_ceil(2).max(1);
    y & mask
}

/// A seeded permutation of [0, n), n >= 1, without storage: three bijective rounds on the
/// smallest power-of-two domain 2^k >= n, cycle-walked (applied again while the value is >= n)
/// until it lands in [0, n). Cycle walking on a permutation of a superset restricts it to a
/// permutation of the subset; as 2^k < 2 n, fewer than two walks are needed on average.
pub fn cycle_permute(x: u64, n: u64, seed: u64) -> u64 {
    debug_assert!(x < n, "cycle_permute: x {x} outside [0, {n})");
    let k = 64 - (n - 1).leading_zeros();
    if k == 0 {
        return 0;
    }
    let keys = [fmix64(seed ^ 0xa1), fmix64(seed ^ 0xb2), fmix64(seed ^ 0xc3)];
    let mut y = x;
    loop {
        for (r, key) in keys.iter().enumerate() {
            y = permute_round(y, k, *key, fmix64(*key ^ r as u64));
        }
        if y < n {
            return y;
        }
    }
}

/// The generator. `cdf` is caller storage for the Zipf cumulative weights (T entries; may be
/// empty with uniform popularity).
pub struct Workload<'a> {
    spec: WorkloadSpec,
    rng: ChaCha8Rng,
    cdf: &'a mut [u64],
    next: u64,
    clock_ns: u64,
    /// The last stage has ended: no more requests.
    ended: bool,
}

fn token(seed: u64, kind: u64, id: u64, offset: u64) -> u32 {
    fmix64(
        fmix64(seed ^ kind.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            ^ fmix64(id)
            ^ offset.wrapping_mul(0xd6e8_feb8_6659_fd93),
    ) as u32
}

fn fill(out: &mut [u32], seed: u64, kind: u64, id: u64) {
    for (o, t) in out.iter_mut().enumerate() {
        *t = token(seed, kind, id, o as u64);
    }
}

impl<'a> Workload<'a> {
    /// Entries `cdf` needs for `spec`.
    pub fn cdf_len(spec: &WorkloadSpec) -> usize {
        match spec.popularity {
            Popularity::Uniform | Popularity::Cycle => 0,
            Popularity::Zipf { .. } => spec.tenants as usize,
        }
    }

    /// A generator at request 0.
    pub fn new(spec: WorkloadSpec, cdf: &'a mut [u64]) -> Result<Self, Error> {
        spec.validate()?;
        if cdf.len() != Self::cdf_len(&spec) {
            return Err(Error::BufferSize { buffer: Buffer::ZipfCdf, expected: Self::cdf_len(&spec), got: cdf.len() });
        }
        if let Popularity::Zipf { s_milli } = spec.popularity {
            let mut total = 0u64;
            for (k, c) in cdf.iter_mut().enumerate() {
                // weight = k^-s = 2^(-s log2 k), in Q0.32 (>= 1 for k = 1 so every tenant appears).
                let a = ((log2_q32(k as u64 + 1) as u128 * s_milli as u128) / 1000) as u64;
                total += (exp2_neg_q32(a) >> 32).max(1);
                *c = total;
            }
        }
        Ok(Workload { spec, rng: ChaCha8Rng::seed_from_u64(spec.seed), cdf, next: 0, clock_ns: 0, ended: false })
    }

    /// The spec.
    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    /// The rate at `t_ns` and the next time the rate changes (`u64::MAX`: never).
    fn rate_at(&self, t_ns: u64) -> (u64, u64) {
        let s = &self.spec;
        if s.stages_len > 0 {
            return stage_rate_at(s.stages(), t_ns);
        }
        if s.burst_rate_milli_per_s == 0 {
            return (s.rate_milli_per_s, u64::MAX);
        }
        // validate() bounds both ends below u64::MAX ns.
        let (start, end) = (s.burst_start_ms * 1_000_000, (s.burst_start_ms + s.burst_ms) * 1_000_000);
        match t_ns {
            t if t < start => (s.rate_milli_per_s, start),
            t if t < end => (s.burst_rate_milli_per_s, end),
            _ => (s.rate_milli_per_s, u64::MAX),
        }
    }

    /// Moves the clock to the next Poisson arrival; false when the last stage has ended. With a
    /// burst or stages the rate is piecewise constant: a gap that crosses a rate change is cut
    /// there and drawn again at the new rate, which is exact for a Poisson process (memoryless);
    /// a stage of rate 0 is skipped without a draw. Without either: one draw, as always.
    fn advance_clock(&mut self) -> bool {
        loop {
            let (rate, change_ns) = self.rate_at(self.clock_ns);
            if rate == 0 {
                if change_ns == u64::MAX {
                    return false;
                }
                self.clock_ns = change_ns;
                continue;
            }
            let mean_ns = 1_000_000_000_000u128 / rate as u128;
            let e = neg_ln_uniform_q32(self.rng.next_u64()) as u128;
            let next = self.clock_ns.saturating_add(((mean_ns * e) >> 32) as u64);
            if next < change_ns {
                self.clock_ns = next;
                return true;
            }
            self.clock_ns = change_ns;
        }
    }

    fn uniform(&mut self, lo: u32, hi: u32) -> u32 {
        let span = (hi - lo) as u64 + 1;
        lo + ((self.rng.next_u64() as u128 * span as u128) >> 64) as u32
    }

    /// (tenant, user) of request `i`: Uniform and Zipf draw the tenant, then the user uniformly;
    /// Cycle takes pair perm(i mod T U) and draws nothing.
    fn pick_tenant_user(&mut self, i: u64) -> (u32, u32) {
        let s = self.spec;
        if s.popularity == Popularity::Cycle {
            let n = s.tenants as u64 * s.users_per_tenant as u64;
            let pair = cycle_permute(i % n, n, s.seed);
            return ((pair / s.users_per_tenant as u64) as u32, (pair % s.users_per_tenant as u64) as u32);
        }
        let tenant = self.pick_tenant();
        (tenant, self.uniform(0, s.users_per_tenant - 1))
    }

    fn pick_tenant(&mut self) -> u32 {
        match self.spec.popularity {
            Popularity::Uniform | Popularity::Cycle => self.uniform(0, self.spec.tenants - 1),
            Popularity::Zipf { .. } => {
                let total = *self.cdf.last().unwrap_or(&1);
                let r = ((self.rng.next_u64() as u128 * total as u128) >> 64) as u64;
                self.cdf.partition_point(|&c| c <= r) as u32
            }
        }
    }

    /// Generates the next request into `tokens` (at least [`WorkloadSpec::max_prompt_tokens`]
    /// long); `None` after the last request.
    pub fn next_request(&mut self, tokens: &mut [u32]) -> Result<Option<GenRequest>, Error> {
        self.generate(tokens, true)
    }

    /// Where the tenant's shared prefix lies in every prompt: tokens `[start, start + len)`,
    /// the same for every request of a tenant ([`Self::fill_prefix`]).
    pub fn prefix_span(&self) -> (usize, usize) {
        let s = &self.spec;
        let start = if s.layout == Layout::TimestampFirst { s.header_tokens as usize } else { 0 };
        (start, s.prefix_tokens as usize)
    }

    /// Writes tenant `tenant`'s shared prefix (`out`: [`Self::prefix_span`]'s length), the
    /// tokens [`Self::next_request`] writes there for every request of the tenant.
    pub fn fill_prefix(&self, tenant: u32, out: &mut [u32]) {
        fill(out, self.spec.seed, SEG_PREFIX, tenant as u64);
    }

    /// [`Self::next_request`] without writing the shared prefix: `tokens` at
    /// [`Self::prefix_span`] keep whatever they held (the caller writes them with
    /// [`Self::fill_prefix`] when it needs them, e.g. when it has not kept the tenant's prefix
    /// keys). The same requests, the same draws; every other token written as there.
    pub fn next_request_prefix_unwritten(&mut self, tokens: &mut [u32]) -> Result<Option<GenRequest>, Error> {
        self.generate(tokens, false)
    }

    fn generate(&mut self, tokens: &mut [u32], with_prefix: bool) -> Result<Option<GenRequest>, Error> {
        let s = self.spec;
        if self.next >= s.requests || self.ended {
            return Ok(None);
        }
        if (tokens.len() as u64) < s.max_prompt_tokens() {
            return Err(Error::BufferSize {
                buffer: Buffer::Tokens,
                expected: s.max_prompt_tokens() as usize,
                got: tokens.len(),
            });
        }
        let i = self.next;
        // Draw order is fixed: arrival, tenant, user, suffix, output, documents (Cycle draws no
        // tenant or user; a per-user suffix draws no length).
        if s.timed() && !self.advance_clock() {
            self.ended = true;
            return Ok(None);
        }
        let arrival_ns = self.clock_ns / 1_000_000 * 1_000_000;
        let (tenant, user) = self.pick_tenant_user(i);
        let user_id = tenant as u64 * s.users_per_tenant as u64 + user as u64;
        let suffix = match s.suffix_scope {
            SuffixScope::Request => self.uniform(s.suffix_min_tokens, s.suffix_max_tokens) as usize,
            SuffixScope::User => user_suffix_tokens(&s, user_id) as usize,
        };
        // One draw either way, so the list does not shift later draws.
        let output = match s.output_choices_len {
            0 => self.uniform(s.output_min_tokens, s.output_max_tokens),
            n => s.output_choices[self.uniform(0, n - 1) as usize],
        };
        let mut at = 0usize;
        if s.layout == Layout::TimestampFirst {
            let h = s.header_tokens as usize;
            // The header names the arrival time and the user: unique per request.
            fill(&mut tokens[..h], s.seed ^ fmix64(arrival_ns ^ ((user as u64) << 48)), SEG_HEADER, i);
            at = h;
        }
        let p = s.prefix_tokens as usize;
        if with_prefix {
            self.fill_prefix(tenant, &mut tokens[at..at + p]);
        }
        at += p;
        if s.rag_docs > 0 {
            let mut docs = [0u16; MAX_RAG_DOCS];
            let n = s.rag_docs as usize;
            for (d, slot) in docs[..n].iter_mut().enumerate() {
                *slot = d as u16;
            }
            let k = s.rag_per_request as usize;
            for j in 0..k {
                let pick = j + self.uniform(0, (n - j - 1) as u32) as usize;
                docs.swap(j, pick);
            }
            if s.rag_order == DocOrder::Sorted {
                docs[..k].sort_unstable();
            }
            let dt = s.rag_doc_tokens as usize;
            for &d in &docs[..k] {
                fill(&mut tokens[at..at + dt], s.seed, SEG_DOC, ((tenant as u64) << 16) | d as u64);
                at += dt;
            }
        }
        match s.suffix_scope {
            SuffixScope::Request => fill(&mut tokens[at..at + suffix], s.seed, SEG_SUFFIX, i),
            SuffixScope::User => fill(&mut tokens[at..at + suffix], s.seed, SEG_USER_SUFFIX, user_id),
        }
        at += suffix;
        self.next += 1;
        Ok(Some(GenRequest { index: i, tenant, arrival_ns, input_tokens: at as u64, output_tokens: output as u64 }))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    fn spec() -> WorkloadSpec {
        WorkloadSpec {
            seed: 7,
            requests: 1000,
            tenants: 3,
            users_per_tenant: 2,
            prefix_tokens: 32,
            suffix_min_tokens: 16,
            suffix_max_tokens: 16,
            output_min_tokens: 1,
            output_max_tokens: 1,
            output_choices: [0; MAX_OUTPUT_CHOICES],
            output_choices_len: 0,
            popularity: Popularity::Uniform,
            rate_milli_per_s: 0,
            layout: Layout::StablePrefixFirst,
            header_tokens: 0,
            rag_docs: 0,
            rag_doc_tokens: 0,
            rag_per_request: 0,
            rag_order: DocOrder::Random,
            burst_rate_milli_per_s: 0,
            burst_start_ms: 0,
            burst_ms: 0,
            suffix_scope: SuffixScope::Request,
            stages: [Stage::default(); MAX_STAGES],
            stages_len: 0,
        }
    }

    fn with_stages(mut s: WorkloadSpec, st: &[(u64, u64)]) -> WorkloadSpec {
        for (i, &(rate, ms)) in st.iter().enumerate() {
            s.stages[i] = Stage { rate_milli_per_s: rate, duration_ms: ms };
        }
        s.stages_len = st.len() as u32;
        s
    }

    /// Every request of `s`: (request, its tokens).
    fn all(s: WorkloadSpec) -> std::vec::Vec<(GenRequest, std::vec::Vec<u32>)> {
        let mut buf = std::vec![0u32; s.max_prompt_tokens() as usize];
        let mut w = Workload::new(s, &mut []).unwrap();
        let mut out = std::vec::Vec::new();
        while let Some(r) = w.next_request(&mut buf).unwrap() {
            out.push((r, buf[..r.input_tokens as usize].to_vec()));
        }
        out
    }

    /// The prefix left unwritten and filled by `fill_prefix` at `prefix_span` gives every
    /// request's tokens of `next_request`, for both layouts, RAG documents and per-user suffixes.
    #[test]
    fn prefix_unwritten_then_filled_is_next_request() {
        let mut specs = std::vec![spec()];
        let mut t = spec();
        t.layout = Layout::TimestampFirst;
        t.header_tokens = 5;
        t.prefix_tokens = 37;
        specs.push(t);
        let mut r = spec();
        r.rag_docs = 6;
        r.rag_doc_tokens = 16;
        r.rag_per_request = 3;
        r.suffix_scope = SuffixScope::User;
        r.seed = 99;
        specs.push(r);
        let mut z = spec();
        z.prefix_tokens = 0;
        specs.push(z);
        for s in specs {
            let want = all(s);
            let mut buf = std::vec![u32::MAX; s.max_prompt_tokens() as usize];
            let mut w = Workload::new(s, &mut []).unwrap();
            let (start, len) = w.prefix_span();
            let mut got = std::vec::Vec::new();
            while let Some(req) = w.next_request_prefix_unwritten(&mut buf).unwrap() {
                w.fill_prefix(req.tenant, &mut buf[start..start + len]);
                got.push((req, buf[..req.input_tokens as usize].to_vec()));
            }
            assert_eq!(got, want);
        }
    }

    #[test]
    fn stage_rate_at_is_piecewise() {
        let st = [Stage { rate_milli_per_s: 5, duration_ms: 2 }, Stage { rate_milli_per_s: 9, duration_ms: 3 }];
        assert_eq!(stage_rate_at(&st, 0), (5, 2_000_000));
        assert_eq!(stage_rate_at(&st, 1_999_999), (5, 2_000_000));
        assert_eq!(stage_rate_at(&st, 2_000_000), (9, 5_000_000));
        assert_eq!(stage_rate_at(&st, 5_000_000), (0, u64::MAX));
    }

    #[test]
    fn stages_end_generation_and_follow_each_stage_rate() {
        // 100 req/s for 20 s, a 10 s pause, then 10 req/s for 20 s: about 2,000 + 200 requests,
        // none in the pause, none after 50 s, although `requests` allows 10^6.
        let s = with_stages(
            WorkloadSpec { requests: 1_000_000, ..spec() },
            &[(100_000, 20_000), (0, 10_000), (10_000, 20_000)],
        );
        let reqs = all(s);
        let count = |a: u64, b: u64| reqs.iter().filter(|(r, _)| (a..b).contains(&(r.arrival_ns / 1_000_000))).count();
        let (first, pause, last) = (count(0, 20_000), count(20_000, 30_000), count(30_000, 50_000));
        assert_eq!(pause, 0);
        assert_eq!(first + last, reqs.len(), "nothing after the last stage");
        // Poisson counts: mean 2,000 (sd 45) and 200 (sd 14); 5 sd either way.
        assert!((1_775..=2_225).contains(&first), "{first}");
        assert!((130..=270).contains(&last), "{last}");
        assert!(reqs.windows(2).all(|w| w[0].0.arrival_ns <= w[1].0.arrival_ns));
    }

    #[test]
    fn requests_still_cap_a_ramp() {
        let s = with_stages(WorkloadSpec { requests: 10, ..spec() }, &[(100_000, 20_000)]);
        assert_eq!(all(s).len(), 10);
    }

    #[test]
    fn cycle_visits_every_pair_once_per_round_in_one_order() {
        let s = WorkloadSpec { requests: 18, popularity: Popularity::Cycle, suffix_scope: SuffixScope::User, ..spec() };
        let reqs = all(s);
        let pairs: std::vec::Vec<_> = reqs.iter().map(|(r, t)| (r.tenant, t[32])).collect();
        let mut round: std::vec::Vec<_> = pairs[..6].to_vec();
        assert_eq!(&pairs[6..12], &round[..], "same order every round");
        assert_eq!(&pairs[12..18], &round[..]);
        round.sort_unstable();
        round.dedup();
        assert_eq!(round.len(), 6, "each (tenant, user) once per round");
    }

    #[test]
    fn cycle_permute_is_a_permutation() {
        for n in [1u64, 2, 3, 5, 750, 1024, 1025] {
            let mut seen = std::vec![false; n as usize];
            for x in 0..n {
                let y = cycle_permute(x, n, 42);
                assert!(y < n && !seen[y as usize], "n {n}: {x} -> {y}");
                seen[y as usize] = true;
            }
        }
        // Not the identity for a real domain (the seed shuffles).
        assert!((0..750).any(|x| cycle_permute(x, 750, 42) != x));
        assert!((0..750).any(|x| cycle_permute(x, 750, 42) != cycle_permute(x, 750, 43)));
    }

    #[test]
    fn user_suffix_repeats_per_user_and_differs_between_users() {
        let s = WorkloadSpec {
            requests: 12,
            popularity: Popularity::Cycle,
            suffix_scope: SuffixScope::User,
            suffix_min_tokens: 16,
            suffix_max_tokens: 48,
            ..spec()
        };
        let reqs = all(s);
        // Request i and i + 6 are the same user: the whole prompt repeats.
        for i in 0..6 {
            assert_eq!(reqs[i].1, reqs[i + 6].1);
        }
        let suffixes: std::vec::Vec<_> = reqs[..6].iter().map(|(_, t)| t[32..].to_vec()).collect();
        for a in 0..6 {
            assert!((16..=48).contains(&suffixes[a].len()));
            for b in a + 1..6 {
                assert_ne!(suffixes[a], suffixes[b]);
            }
        }
        // Per-request suffixes never repeat.
        let fresh = all(WorkloadSpec { suffix_scope: SuffixScope::Request, ..s });
        assert_ne!(fresh[0].1[32..], fresh[6].1[32..]);
    }

    #[test]
    fn bad_stages_are_refused() {
        let bad =
            |s: WorkloadSpec| matches!(s.validate(), Err(Error::InvalidConfig { field: Field::WorkloadStages, .. }));
        assert!(bad(with_stages(spec(), &[(1_000, 0)])), "zero duration");
        assert!(bad(with_stages(spec(), &[(0, 1_000)])), "no positive rate");
        assert!(bad(with_stages(WorkloadSpec { rate_milli_per_s: 1_000, ..spec() }, &[(1_000, 1_000)])), "both");
        assert!(bad(with_stages(spec(), &[(1_000, u64::MAX / 2), (1_000, u64::MAX / 2)])), "too long");
        assert!(with_stages(spec(), &[(1_000, 1_000)]).validate().is_ok());
    }

    #[test]
    fn without_the_new_fields_requests_are_unchanged() {
        // The default scope and no stages draw exactly as before: the same arrivals as a spec
        // with a plain rate (a change in draw order would move them).
        let s = WorkloadSpec { rate_milli_per_s: 10_000, requests: 50, ..spec() };
        let a = all(s);
        let b = all(s);
        assert_eq!(a, b);
        assert!(a.last().unwrap().0.arrival_ns > 0);
    }
}
