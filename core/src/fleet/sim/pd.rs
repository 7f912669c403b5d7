//! Prefill/decode disaggregation in the fleet (docs/MODEL.md, "Prefill/decode disaggregation",
//! "Fleet and time with P/D"): pods interact through KV transfers, so the fleet runs one event
//! loop in time order over all pods: link completions and joins, then deliveries, then arrivals,
//! then step starts (in pod order) at each instant. Each decode pod has one incoming link shared
//! by processor sharing, in integers (a transfer's work is bytes x 10^9).

use super::{Fleet, FleetEngine};
use crate::fleet::base::error::{Error, Invariant, Limit, Quantity, RequestField};
use crate::fleet::base::limits::{BLOCK_TOKENS, MAX_PODS};
use crate::fleet::engine::pd::{PdConfig, PdOutcome};
use crate::fleet::engine::{Completion, EngineEvents, Request, Routed};
use crate::fleet::route::{Holders, Route, RouteView, Router};

/// One transfer on a decode pod's link: its request, the request's slot on the pod, the work
/// left (bytes x 10^9 minus what it has received x 10^9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfer {
    request: u64,
    slot: u32,
    work: u128,
}

/// A prefill job finished at `at_ns`: its transfer joins its decode pod's link then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Join {
    at_ns: u64,
    job: Completion,
}

impl Default for Join {
    fn default() -> Self {
        let job = Completion {
            request: 0,
            pod: 0,
            arrival_ns: 0,
            first_token_ns: 0,
            finish_ns: 0,
            input_tokens: 0,
            output_tokens: 0,
            hit_tokens: 0,
            prefill_tokens: 0,
            preemptions: 0,
            queue_len: 0,
            offload_hit_tokens: 0,
            pd: PdOutcome::NONE,
        };
        Join { at_ns: 0, job }
    }
}

/// A transfer completed at `done_ns`, delivered at `at_ns` to `pod` (its request in `slot`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    at_ns: u64,
    done_ns: u64,
    request: u64,
    pod: u32,
    slot: u32,
}

/// Caller storage of the P/D state: `transfers` split evenly over the decode pods' links.
#[derive(Default)]
pub struct PdBuffers<'a> {
    /// Transfers in flight, per decode pod an equal share.
    pub transfers: &'a mut [Transfer],
    /// Prefill jobs finished, not joined yet.
    pub joins: &'a mut [Join],
    /// Transfers completed, not delivered yet.
    pub deliveries: &'a mut [Delivery],
}

/// The fleet's P/D state.
pub struct PdState<'a> {
    cfg: PdConfig,
    np: usize,
    transfers: &'a mut [Transfer],
    per_link: usize,
    link_len: [u32; MAX_PODS],
    link_tau: [u64; MAX_PODS],
    joins: &'a mut [Join],
    joins_len: usize,
    deliveries: &'a mut [Delivery],
    deliveries_len: usize,
    /// Disaggregated requests so far (the prefill pool's round-robin counter).
    disaggregated: u64,
}

impl<'a> PdState<'a> {
    /// The state of a fleet of `pods` pods with `cfg`, over `b`.
    pub fn new(cfg: PdConfig, pods: usize, b: PdBuffers<'a>) -> Result<Self, Error> {
        let np = cfg.prefill_pods as usize;
        let nd = pods - np;
        let per_link = b.transfers.len() / nd;
        if per_link == 0 || b.joins.is_empty() || b.deliveries.is_empty() {
            return Err(Error::BufferSize { buffer: crate::fleet::base::error::Buffer::PdLinks, expected: nd, got: 0 });
        }
        Ok(PdState {
            cfg,
            np,
            transfers: b.transfers,
            per_link,
            link_len: [0; MAX_PODS],
            link_tau: [0; MAX_PODS],
            joins: b.joins,
            joins_len: 0,
            deliveries: b.deliveries,
            deliveries_len: 0,
            disaggregated: 0,
        })
    }

    /// The prefill pool's size NP.
    pub fn prefill_pods(&self) -> usize {
        self.np
    }

    fn link(&self, d: usize) -> &[Transfer] {
        let i = d - self.np;
        &self.transfers[i * self.per_link..i * self.per_link + self.link_len[d] as usize]
    }

    /// tau + ceil(r_min x n / BW): when the link's next transfer completes.
    fn next_completion(&self, d: usize) -> Option<u64> {
        let l = self.link(d);
        let r_min = l.iter().map(|t| t.work).min()?;
        let dt = (r_min * l.len() as u128).div_ceil(self.cfg.link_bytes_per_s as u128);
        Some(u64::try_from(self.link_tau[d] as u128 + dt).unwrap_or(u64::MAX))
    }

    /// The earliest link completion, join or delivery.
    fn next_event(&self, pods: usize) -> u64 {
        let links = (self.np..pods).filter_map(|d| self.next_completion(d)).min().unwrap_or(u64::MAX);
        let joins = self.joins[..self.joins_len].iter().map(|j| j.at_ns).min().unwrap_or(u64::MAX);
        let del = self.deliveries[..self.deliveries_len].iter().map(|d| d.at_ns).min().unwrap_or(u64::MAX);
        links.min(joins).min(del)
    }

    /// Advances link `d` to `t_ns`: transfers completing by then leave it (in request order at
    /// one instant) and are delivered `link_latency_ns` later.
    fn advance_link(&mut self, d: usize, t_ns: u64) -> Result<(), Error> {
        let bw = self.cfg.link_bytes_per_s as u128;
        let base = (d - self.np) * self.per_link;
        loop {
            let n = self.link_len[d] as usize;
            if n == 0 {
                break;
            }
            let active = &mut self.transfers[base..base + n];
            let r_min = active.iter().map(|t| t.work).min().unwrap_or(0);
            let dt = (r_min * n as u128).div_ceil(bw);
            let tau = self.link_tau[d] as u128;
            if tau + dt <= t_ns as u128 {
                let q = dt * bw / n as u128;
                for t in active.iter_mut() {
                    t.work = t.work.saturating_sub(q);
                }
                let done = tau + dt;
                let done = u64::try_from(done).map_err(|_| Error::Overflow { what: Quantity::StepEndTime })?;
                self.link_tau[d] = done;
                // completed transfers leave in request order
                let mut kept = 0;
                for i in 0..n {
                    let t = self.transfers[base + i];
                    if t.work == 0 {
                        self.push_delivery(Delivery {
                            at_ns: done
                                .checked_add(self.cfg.link_latency_ns)
                                .ok_or(Error::Overflow { what: Quantity::StepEndTime })?,
                            done_ns: done,
                            request: t.request,
                            pod: d as u32,
                            slot: t.slot,
                        })?;
                    } else {
                        self.transfers[base + kept] = t;
                        kept += 1;
                    }
                }
                self.link_len[d] = kept as u32;
            } else {
                let q = (t_ns as u128 - tau) * bw / n as u128;
                for t in active.iter_mut() {
                    t.work -= q;
                    debug_assert!(t.work > 0, "no transfer completes before its due time");
                }
                break;
            }
        }
        self.link_tau[d] = t_ns;
        Ok(())
    }

    fn push_delivery(&mut self, d: Delivery) -> Result<(), Error> {
        if self.deliveries_len == self.deliveries.len() {
            return Err(Error::CapacityExceeded { limit: Limit::PdTransfers, capacity: self.deliveries.len() });
        }
        self.deliveries[self.deliveries_len] = d;
        self.deliveries_len += 1;
        Ok(())
    }
}

/// The engines' events during a P/D run: a prefill pod's completion is its prefill job's end (a
/// join, kept), not a request's; the others go on to the caller.
struct PdEvents<'s, 'a, V: EngineEvents> {
    np: u32,
    joins: &'s mut [Join],
    joins_len: &'s mut usize,
    full: bool,
    ev: &'s mut V,
    _a: core::marker::PhantomData<&'a ()>,
}

impl<V: EngineEvents> EngineEvents for PdEvents<'_, '_, V> {
    fn completed(&mut self, c: &Completion) {
        if c.pod < self.np {
            if *self.joins_len == self.joins.len() {
                self.full = true;
                return;
            }
            self.joins[*self.joins_len] = Join { at_ns: c.finish_ns, job: *c };
            *self.joins_len += 1;
        } else {
            self.ev.completed(c);
        }
    }
    fn itl(&mut self, itl_ns: u64, count: u64) {
        self.ev.itl(itl_ns, count);
    }
}

impl<'a, E: FleetEngine<'a>, R: Router> Fleet<'a, E, R> {
    /// Runs the P/D event loop: every step starting before `t_ns`, and every link completion,
    /// join and delivery at or before it (`inclusive`) or before it. Returns whether anything ran.
    pub(super) fn pd_run(
        &mut self,
        t_ns: u64,
        inclusive: bool,
        once: bool,
        ev: &mut impl EngineEvents,
    ) -> Result<bool, Error> {
        let n = self.pods.len();
        let mut ran = false;
        loop {
            let Some(pd) = self.pd.as_mut() else { return Ok(ran) };
            let t_ext = pd.next_event(n);
            // the earliest step (lowest pod on ties) and the earliest of the other pods'
            let mut first: Option<(usize, u64)> = None;
            for (p, e) in self.pods.iter().enumerate() {
                if let Some(s) = e.next_event_ns()
                    && first.is_none_or(|(_, b)| s < b)
                {
                    first = Some((p, s));
                }
            }
            if let Some((p, s)) = first
                && s < t_ext
                && s < t_ns
            {
                let other = self
                    .pods
                    .iter()
                    .enumerate()
                    .filter(|&(q, _)| q != p)
                    .filter_map(|(_, e)| e.next_event_ns())
                    .min()
                    .unwrap_or(u64::MAX);
                let ff = t_ext.min(t_ns).min(other.saturating_add(1));
                let mut adapter = PdEvents {
                    np: pd.np as u32,
                    joins: pd.joins,
                    joins_len: &mut pd.joins_len,
                    full: false,
                    ev,
                    _a: core::marker::PhantomData,
                };
                self.pods[p].advance_once(ff, ff, &mut adapter)?;
                if adapter.full {
                    return Err(Error::CapacityExceeded { limit: Limit::PdTransfers, capacity: pd.joins.len() });
                }
                ran = true;
            } else if t_ext != u64::MAX && (t_ext < t_ns || (inclusive && t_ext == t_ns)) {
                self.pd_external(t_ext)?;
                ran = true;
            } else {
                return Ok(ran);
            }
            if once {
                return Ok(ran);
            }
        }
    }

    /// The link completions and joins at `t` (if any), else the deliveries at `t`.
    fn pd_external(&mut self, t: u64) -> Result<(), Error> {
        let n = self.pods.len();
        let Some(pd) = self.pd.as_mut() else { return Ok(()) };
        let links_due = (pd.np..n).any(|d| pd.next_completion(d) == Some(t));
        let joins_due = pd.joins[..pd.joins_len].iter().any(|j| j.at_ns == t);
        if links_due || joins_due {
            for d in pd.np..n {
                if pd.next_completion(d) == Some(t) {
                    pd.advance_link(d, t)?;
                }
            }
            // joins at t in request order: each advances its link to t, then adds its transfer
            while let Some(i) =
                (0..pd.joins_len).filter(|&i| pd.joins[i].at_ns == t).min_by_key(|&i| pd.joins[i].job.request)
            {
                let j = pd.joins[i];
                pd.joins_len -= 1;
                pd.joins[i] = pd.joins[pd.joins_len];
                let d = j.job.pd.decode_pod as usize;
                if d < pd.np || d >= n {
                    return Err(Error::Invariant { what: Invariant::ParkedRequest });
                }
                self.pods[d].note_prefill(j.job.pd.decode_slot, &j.job)?;
                pd.advance_link(d, t)?;
                // the decode pod's KV bytes per token (one value for the fleet without pools)
                let kvb = self.pods[d].kv_bytes_per_token();
                let bytes = j.job.input_tokens.div_ceil(BLOCK_TOKENS as u64) * BLOCK_TOKENS as u64 * kvb;
                let len = pd.link_len[d] as usize;
                if len == pd.per_link {
                    return Err(Error::CapacityExceeded { limit: Limit::PdTransfers, capacity: pd.per_link });
                }
                pd.transfers[(d - pd.np) * pd.per_link + len] = Transfer {
                    request: j.job.request,
                    slot: j.job.pd.decode_slot,
                    work: bytes as u128 * 1_000_000_000,
                };
                pd.link_len[d] += 1;
            }
            return Ok(());
        }
        // deliveries at t, in (completion time, request) order
        while let Some(i) = (0..pd.deliveries_len)
            .filter(|&i| pd.deliveries[i].at_ns == t)
            .min_by_key(|&i| (pd.deliveries[i].done_ns, pd.deliveries[i].request))
        {
            let dl = pd.deliveries[i];
            pd.deliveries_len -= 1;
            pd.deliveries[i] = pd.deliveries[pd.deliveries_len];
            self.pods[dl.pod as usize].deliver(dl.slot, t)?;
        }
        Ok(())
    }

    /// A dispatch with P/D at request `i`'s arrival (docs/MODEL.md, "The flow of one request").
    pub(super) fn pd_dispatch(&mut self, req: &Request<'_>, ev: &mut impl EngineEvents) -> Result<Routed, Error> {
        let i = self.next_request;
        let t = req.arrival_ns;
        let Some(pd) = self.pd.as_ref() else { return Err(Error::Invariant { what: Invariant::ParkedRequest }) };
        let cfg = pd.cfg;
        let np = pd.np;
        let n = self.pods.len();
        if req.input_tokens.div_ceil(BLOCK_TOKENS as u64) > cfg.prefill_capacity_blocks as u64 {
            return Err(Error::InvalidRequest {
                field: RequestField::InputLength,
                expected: "input_length at most one prefill pod's KV capacity (--prefill-capacity x 16 tokens)",
            });
        }
        // 1. Every event up to t (steps before t; link events and deliveries at t too).
        self.pd_run(t, true, false, ev)?;
        let mut queue_lens = [0u32; MAX_PODS];
        for (q, pod) in queue_lens.iter_mut().zip(self.pods.iter_mut()) {
            *q = pod.queue_len_at(t);
        }
        // 2. Decode pick over the decode pool.
        let d = np + self.pd_pick(i, req.keys, np, n, &queue_lens, t)?.pod;
        let routed_d = Routed {
            request: i,
            pod: d as u32,
            queue_len: queue_lens[d],
            believed_match_blocks: 0,
            active_pods: n as u32,
            served_hit_blocks: None,
        };
        // 3. The decider on d's caches.
        let matched = self.pods[d].full_match(req.keys) as u64;
        let out = if !cfg.disaggregates(req.input_tokens, matched) {
            let mut nothing = ();
            self.pods[d].serve(&mut self.shared, req, routed_d, &mut nothing, ev)?;
            routed_d
        } else {
            // 4. Prefill pick over the prefill pool (its own round-robin counter).
            let j = self.pd.as_ref().map_or(0, |s| s.disaggregated);
            let p = self.pd_pick(j, req.keys, 0, np, &queue_lens, t)?.pod;
            // the decode pod's KV bytes per token (one value for the fleet without pools)
            let kvb = self.pods[d].kv_bytes_per_token();
            let bytes = req.input_tokens.div_ceil(BLOCK_TOKENS as u64) * BLOCK_TOKENS as u64 * kvb;
            let outcome = PdOutcome {
                prefill_pod: p as u32,
                prefill_queue_len: queue_lens[p],
                transfer_bytes: bytes,
                ..PdOutcome::NONE
            };
            let slot = self.pods[d].park(req, routed_d, outcome)?;
            let job = Request { output_tokens: 1, ..*req };
            let routed_p = Routed {
                request: i,
                pod: p as u32,
                queue_len: queue_lens[p],
                believed_match_blocks: 0,
                active_pods: n as u32,
                served_hit_blocks: None,
            };
            self.pods[p].serve_job(&job, routed_p, d as u32, slot)?;
            if let Some(s) = self.pd.as_mut() {
                s.disaggregated += 1;
            }
            routed_d
        };
        let t_ = &mut self.totals;
        t_.requests += 1;
        t_.input_tokens += req.input_tokens;
        t_.output_tokens += req.output_tokens;
        t_.max_active_pods = t_.max_active_pods.max(n as u32);
        self.next_request += 1;
        self.last_arrival_ns = t;
        Ok(out)
    }

    /// The router's pick among pods `lo .. hi` (their own queue lengths and caches), as an index
    /// in that range; `request` is what round-robin counts.
    fn pd_pick(
        &mut self,
        request: u64,
        keys: &[u64],
        lo: usize,
        hi: usize,
        q: &[u32; MAX_PODS],
        t: u64,
    ) -> Result<Route, Error> {
        let exact = super::Exact {
            pods: &self.pods[lo..hi],
            shared: &self.shared,
            heads: None,
            lead: true,
            by_pod: !self.reference,
        };
        let view = RouteView {
            request,
            queue_lens: &q[lo..hi],
            held: Holders::Exact(&exact),
            pending: None,
            pending_stores: None,
            speculative: None,
            loads: None,
            now_ns: t,
        };
        let r = self.router.route(&view, keys);
        if r.pod >= hi - lo {
            return Err(Error::InvalidConfig {
                field: crate::fleet::base::error::Field::Router,
                expected: "a routable pod (index below the active pods)",
            });
        }
        Ok(r)
    }
}
