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
        if let Some(last) = self.samples.itl.last_mut()
            && last.0 == itl_ns
        {
            last.1 += count;
        } else if self.room(true) {
            self.samples.itl.push((itl_ns, count));
        }
    }
}
