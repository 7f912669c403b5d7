//! What a run collects from the engines' events, per request, within the memory budget: the
//! samples its exact percentiles come from, the completions it keeps when asked, and, for a
//! closed loop, the completions not yet taken.

use brokerlab_core::fleet::slo::Slo;
use brokerlab_core::fleet::{Completion, EngineEvents};

use crate::error::CliError;
use crate::mem::Growth;

/// Which samples an engine's summary reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The FIFO engine: each request's latency (finish - arrival).
    Latency,
    /// The batched engine: TTFT and E2E per request, inter-token latencies per token.
    Tokens,
}

impl Kind {
    /// Whether a run asked to keep what it did per request keeps the completions: the token
    /// engine's carry each request's times; the FIFO engine keeps its outcomes instead, which
    /// say more.
    pub const fn keeps_completions(self) -> bool {
        matches!(self, Kind::Tokens)
    }
}

/// What a FIFO run keeps per request, as named in a memory-budget message.
pub const LATENCIES: &str = "latencies (exact percentiles, 8 B per request)";
/// What a batched run keeps per request, as named in a memory-budget message.
const TTFT: &str = "TTFT and E2E samples (exact percentiles, 16 B per request)";
/// The batched engine's inter-token latencies, as named in a memory-budget message.
const ITL: &str = "inter-token latency runs (16 B per distinct run)";
/// Kept completions, as named in a memory-budget message.
const COMPLETIONS: &str = "kept completions (--outcomes, breakdowns)";

/// Shortest full inter-token latency list that is merged before it grows.
const ITL_MERGE_MIN: usize = 1 << 12;

/// Sorts `(value, samples)` pairs by value and merges equal values, summing their samples.
fn merge_runs(v: &mut Vec<(u64, u64)>) {
    // The list is the last merge's sorted runs followed by the pairs pushed since: the stable
    // sort takes the sorted part as one run (the unstable one sorted it again: 8.7% of a 1M
    // `fleet bench --scale`). Equal pairs are indistinguishable, so the order is the same.
    v.sort();
    v.dedup_by(|b, a| {
        let same = a.0 == b.0;
        if same {
            a.1 += b.1;
        }
        same
    });
}

/// The samples of a run (the summaries' exact percentiles read them).
#[derive(Debug, Default)]
pub struct Samples {
    /// Finish - arrival of each request, ns (the FIFO engine's latency, the batched one's E2E).
    pub e2e: Vec<u64>,
    /// Time to first token of each request, ns (batched engine).
    pub ttft: Vec<u64>,
    /// (inter-token latency ns, samples) runs (batched engine).
    pub itl: Vec<(u64, u64)>,
    /// Sum of the completions' hit tokens.
    pub hit_tokens: u64,
    /// With SLOs: them and the requests meeting them so far.
    pub slo: Option<(Slo, u64)>,
    /// P/D: transfer_ns of each disaggregated request (8 B each, beside the TTFT samples).
    pub transfer_ns: Vec<u64>,
    /// The batched engine's autoscaling events, in order (a few per scaling decision).
    pub scale_events: Vec<brokerlab_core::fleet::ScaleEvent>,
    /// P/D: their transfer bytes, summed.
    pub transfer_bytes: u64,
    /// Pools: the (decode) pod of each TTFT and E2E sample, in the same order (None without
    /// pools: a fleet without them keeps what it always kept).
    pub pods: Option<Vec<u32>>,
}

/// Collects a run's completions and inter-token latencies.
pub struct Collect {
    kind: Kind,
    /// The samples.
    pub samples: Samples,
    /// Completions kept (`keep_completions`), in completion order.
    pub completions: Vec<Completion>,
    keep_completions: bool,
    /// Completions not yet taken by a closed-loop driver ([`Collect::take_fresh`]).
    fresh: Vec<Completion>,
    closed_loop: bool,
    /// The run's memory growth (None: unchecked, as in a unit test).
    growth: Option<Growth>,
    /// The first growth past the memory budget (the driver stops and reports it).
    pub(super) over: Option<CliError>,
    /// A FIFO run's decode cost per token, ns (its first token for SLO goodput; None: batched).
    pub(super) fifo_t_decode_ns: Option<u64>,
}

impl Collect {
    /// A collector of `kind` samples, keeping completions with `keep_completions`, the fresh ones
    /// for a closed loop with `closed_loop`, growing within `growth`.
    pub fn new(kind: Kind, keep_completions: bool, closed_loop: bool, growth: Option<Growth>) -> Self {
        Collect {
            kind,
            samples: Samples::default(),
            completions: Vec::new(),
            keep_completions,
            fresh: Vec::new(),
            closed_loop,
            growth,
            over: None,
            fifo_t_decode_ns: None,
        }
    }

    /// The completions since the last call (closed loop only; empty otherwise), into `out`.
    pub fn take_fresh(&mut self, out: &mut Vec<Completion>) {
        out.clear();
        out.append(&mut self.fresh);
    }

    /// True when completions wait to be taken.
    pub fn has_fresh(&self) -> bool {
        !self.fresh.is_empty()
    }

    /// The run's memory growth, when checked.
    pub fn growth(&self) -> Option<&Growth> {
        self.growth.as_ref()
    }

    /// Makes room for one more element of each vector `completed` (or `itl`) pushes to, within
    /// the memory budget; false (and the error kept) when there is none.
    fn room(&mut self, itl: bool) -> bool {
        if self.over.is_some() {
            return false;
        }
        let Some(g) = &self.growth else { return true };
        let s = &mut self.samples;
        let r = match (itl, self.kind) {
            (true, _) => g.reserve_one(&mut s.itl, ITL),
            (false, Kind::Latency) => g.reserve_one(&mut s.e2e, LATENCIES),
            (false, Kind::Tokens) => g.reserve_one(&mut s.ttft, TTFT).and_then(|()| g.reserve_one(&mut s.e2e, TTFT)),
        }
        .and_then(|()| match self.keep_completions && !itl {
            true => g.reserve_one(&mut self.completions, COMPLETIONS),
            false => Ok(()),
        });
        match r {
            Ok(()) => true,
            Err(e) => {
                self.over = Some(e);
                false
            }
        }
    }
}

impl EngineEvents for Collect {
    fn completed(&mut self, c: &Completion) {
        self.samples.hit_tokens += c.hit_tokens;
        if let Some((slo, good)) = self.samples.slo.as_mut() {
            *good += u64::from(slo.good_completion(c, self.fifo_t_decode_ns));
        }
        if c.pd.disaggregated() {
            self.samples.transfer_ns.push(c.pd.transfer_ns);
            self.samples.transfer_bytes += c.pd.transfer_bytes;
        }
        if self.closed_loop {
            // taken at once by the driver: a handful at a time
            self.fresh.push(*c);
        }
        if !self.room(false) {
            return;
        }
        if self.kind == Kind::Tokens {
            self.samples.ttft.push(c.ttft_ns());
            if let Some(p) = self.samples.pods.as_mut() {
                p.push(c.pod);
            }
        }
        self.samples.e2e.push(c.e2e_ns());
        if self.keep_completions {
            self.completions.push(*c);
        }
    }

    fn itl(&mut self, itl_ns: u64, count: u64) {
        // Requests decoding in one step mostly share a value: merge runs to keep the list short.
        let itl = &mut self.samples.itl;
        if let Some(last) = itl.last_mut()
            && last.0 == itl_ns
        {
            last.1 += count;
            return;
        }
        // Full: merge equal values first (the percentiles read the multiset, in value order, so
        // they are the same), and grow only when that frees less than half. The list is then as
        // long as the distinct inter-token latencies, not the run: memory flat in trace length.
        if itl.len() == itl.capacity() && itl.len() >= ITL_MERGE_MIN {
            merge_runs(itl);
            if itl.len() <= itl.capacity() / 2 {
                itl.push((itl_ns, count));
                return;
            }
        }
        if self.room(true) {
            self.samples.itl.push((itl_ns, count));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The (value, samples) multiset of `v`, in value order.
    fn multiset(v: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut m: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        for &(x, n) in v {
            *m.entry(x).or_default() += n;
        }
        m.into_iter().collect()
    }

    #[test]
    fn merged_inter_token_latencies_keep_the_multiset_and_stay_short() {
        // 200,000 runs over 300 distinct values, as a long run's steps give them
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            state >> 33
        };
        let mut c = Collect::new(Kind::Tokens, false, false, None);
        let mut naive = Vec::new();
        for _ in 0..200_000 {
            let (x, n) = (1_000 + next() % 300, 1 + next() % 4);
            c.itl(x, n);
            naive.push((x, n));
        }
        assert_eq!(multiset(&c.samples.itl), multiset(&naive));
        assert!(c.samples.itl.capacity() <= 2 * ITL_MERGE_MIN, "{}", c.samples.itl.capacity());
        let mut v = vec![(5, 1), (3, 2), (5, 4), (3, 1), (9, 1)];
        merge_runs(&mut v);
        assert_eq!(v, [(3, 3), (5, 5), (9, 1)]);
    }
}
