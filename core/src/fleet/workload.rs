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
use super::{Error, Field};

/// Most RAG documents per tenant.
pub const MAX_RAG_DOCS: usize = 256;
/// Most values in an output-length list ([`WorkloadSpec::output_choices`]).
pub const MAX_OUTPUT_CHOICES: usize = 16;
/// Most tenants.
pub const MAX_TENANTS: u32 = 1 << 20;
/// Longest prompt the generator produces, tokens.
pub const MAX_GEN_PROMPT_TOKENS: u64 = 1 << 22;

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
}

impl WorkloadSpec {
    /// Longest prompt this spec can produce, tokens.
    pub fn max_prompt_tokens(&self) -> u64 {
        let header = if self.layout == Layout::TimestampFirst { self.header_tokens as u64 } else { 0 };
        let rag = if self.rag_docs > 0 { self.rag_per_request as u64 * self.rag_doc_tokens as u64 } else { 0 };
        header + self.prefix_tokens as u64 + rag + self.suffix_max_tokens as u64
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

/// The generator. `cdf` is caller storage for the Zipf cumulative weights (T entries; may be
/// empty with uniform popularity).
pub struct Workload<'a> {
    spec: WorkloadSpec,
    rng: ChaCha8Rng,
    cdf: &'a mut [u64],
    next: u64,
    clock_ns: u64,
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
            Popularity::Uniform => 0,
            Popularity::Zipf { .. } => spec.tenants as usize,
        }
    }

    /// A generator at request 0.
    pub fn new(spec: WorkloadSpec, cdf: &'a mut [u64]) -> Result<Self, Error> {
        spec.validate()?;
        if cdf.len() != Self::cdf_len(&spec) {
            return Err(Error::BufferSize { buffer: "zipf cdf", expected: Self::cdf_len(&spec), got: cdf.len() });
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
        Ok(Workload { spec, rng: ChaCha8Rng::seed_from_u64(spec.seed), cdf, next: 0, clock_ns: 0 })
    }

    /// The spec.
    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    /// The rate at `t_ns` and the next time the rate changes (`u64::MAX`: never).
    fn rate_at(&self, t_ns: u64) -> (u64, u64) {
        let s = &self.spec;
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

    /// Moves the clock to the next Poisson arrival. With a burst the rate is piecewise constant:
    /// a gap that crosses a rate change is cut there and drawn again at the new rate, which is
    /// exact for a Poisson process (memoryless). Without a burst: one draw, as always.
    fn advance_clock(&mut self) {
        loop {
            let (rate, change_ns) = self.rate_at(self.clock_ns);
            let mean_ns = 1_000_000_000_000u128 / rate as u128;
            let e = neg_ln_uniform_q32(self.rng.next_u64()) as u128;
            let next = self.clock_ns.saturating_add(((mean_ns * e) >> 32) as u64);
            if next < change_ns {
                self.clock_ns = next;
                return;
            }
            self.clock_ns = change_ns;
        }
    }

    fn uniform(&mut self, lo: u32, hi: u32) -> u32 {
        let span = (hi - lo) as u64 + 1;
        lo + ((self.rng.next_u64() as u128 * span as u128) >> 64) as u32
    }

    fn pick_tenant(&mut self) -> u32 {
        match self.spec.popularity {
            Popularity::Uniform => self.uniform(0, self.spec.tenants - 1),
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
        let s = self.spec;
        if self.next >= s.requests {
            return Ok(None);
        }
        if (tokens.len() as u64) < s.max_prompt_tokens() {
            return Err(Error::BufferSize {
                buffer: "tokens",
                expected: s.max_prompt_tokens() as usize,
                got: tokens.len(),
            });
        }
        let i = self.next;
        // Draw order is fixed: arrival, tenant, user, suffix, output, documents.
        if s.rate_milli_per_s > 0 {
            self.advance_clock();
        }
        let arrival_ns = self.clock_ns / 1_000_000 * 1_000_000;
        let tenant = self.pick_tenant();
        let user = self.uniform(0, s.users_per_tenant - 1);
        let suffix = self.uniform(s.suffix_min_tokens, s.suffix_max_tokens) as usize;
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
        fill(&mut tokens[at..at + p], s.seed, SEG_PREFIX, tenant as u64);
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
        fill(&mut tokens[at..at + suffix], s.seed, SEG_SUFFIX, i);
        at += suffix;
        self.next += 1;
        Ok(Some(GenRequest { index: i, tenant, arrival_ns, input_tokens: at as u64, output_tokens: output as u64 }))
    }
}
