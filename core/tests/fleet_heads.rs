//! The batched fleet's first-key index (`Fleet::attach_heads`) against the pods' own maps, its
//! oracle, on random traces: after every dispatch (and closed-loop steps, aborts, the final
//! drain) each key the index keeps must be held by exactly the pods whose map holds it, and a
//! fleet with the index must route, complete and count exactly as one without it. Small
//! indexes (8 and 16 slots: keys are replaced often), small pods (maps evict all the time),
//! chained prompts and raw keys from a small alphabet (a key first in one prompt and later in
//! others), 3 to 130 pods, logs of 1 to 64 entries a pod (1: most events overflow the log and
//! the pod is re-read).

use brokerlab_core::fleet::*;

mod common;
use common::BatchedOwned as Owned;

fn lcg(x: &mut u64) -> u64 {
    *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *x >> 33
}

#[derive(Default, PartialEq, Debug)]
struct Sink {
    events: Vec<(Option<Completion>, u64, u64)>,
}

impl EngineEvents for Sink {
    fn completed(&mut self, c: &Completion) {
        self.events.push((Some(*c), 0, 0));
    }
    fn itl(&mut self, itl_ns: u64, count: u64) {
        self.events.push((None, itl_ns, count));
    }
}

struct Req {
    at_ns: u64,
    keys: Vec<u64>,
    extra: u64,
    out: u64,
    steps_before: bool,
    abort: Option<u64>,
}

#[derive(PartialEq, Debug)]
struct Outcome {
    routes: Vec<Routed>,
    aborted: Vec<bool>,
    sink: Sink,
    stats: Vec<BatchedStats>,
    totals: FleetTotals,
}

/// Every key the index keeps, held by exactly the pods whose map holds it; the number of keys.
fn check_index(f: &BatchedFleet<'_>, what: &str) -> usize {
    let ix = f.heads().expect("the index is attached");
    let mut kept = 0;
    ix.each(|key, bits| {
        kept += 1;
        for (p, e) in f.pods().iter().enumerate() {
            let bit = bits[p / 64] >> (p % 64) & 1 == 1;
            assert_eq!(bit, e.contains(key), "{what}: key {key:#x}, pod {p}");
        }
    });
    kept
}

/// Runs `reqs`; with `heads` = Some((slots, log entries a pod)), the index attached and checked
/// after every step of the run. Also returns the most keys the index kept at once.
fn run(cfg: FleetConfig, reqs: &[Req], heads: Option<(usize, usize)>) -> (Outcome, usize) {
    let per_pod = if cfg.pods > 64 { 64 } else { 256 };
    let mut owned = Owned::new(&BatchedLayout::new(&cfg, per_pod, per_pod * 16).unwrap());
    let (slots, log) = heads.unwrap_or((8, 1));
    let words = HeadIndex::words(cfg.pods);
    let (mut k, mut s, mut b) = (vec![0u64; slots], vec![0u64; slots], vec![0u64; slots * words]);
    let mut logs = vec![0u64; cfg.pods * log];
    let mut f = BatchedFleet::new(cfg, owned.buffers(&mut [])).unwrap();
    if heads.is_some() {
        f.attach_heads(&mut k, &mut s, &mut b, &mut logs).unwrap();
    }
    let mut sink = Sink::default();
    let (mut routes, mut aborted) = (vec![], vec![]);
    let mut most = 0;
    let mut check = |f: &BatchedFleet<'_>, what: &str| {
        if heads.is_some() {
            most = most.max(check_index(f, what));
        }
    };
    for (i, q) in reqs.iter().enumerate() {
        if q.steps_before {
            while f.advance_next(q.at_ns, &mut sink).unwrap() {
                check(&f, &format!("step before request {i}"));
            }
        }
        if let Some(id) = q.abort {
            aborted.push(f.abort(id, q.at_ns, &mut sink).unwrap());
            check(&f, &format!("abort before request {i}"));
        }
        let req = Request {
            arrival_ns: q.at_ns,
            input_tokens: q.keys.len() as u64 * 16 + q.extra,
            output_tokens: q.out,
            keys: &q.keys,
        };
        routes.push(f.dispatch(&req, &mut sink).unwrap());
        check(&f, &format!("request {i}"));
    }
    f.finish(&mut sink).unwrap();
    check(&f, "finish");
    let stats = (0..cfg.pods).map(|p| *f.pod_stats(p).unwrap()).collect();
    (Outcome { routes, aborted, sink, stats, totals: *f.totals() }, most)
}

/// `n` random requests: chained prompts over `tenants` shared prefixes with unique suffixes,
/// or (`raw`) keys drawn from an alphabet of 24 (a key leads one prompt and sits deeper in
/// others).
fn trace(x: &mut u64, n: usize, tenants: u64, cap: usize, gap: u64, raw: bool, interleave: bool) -> Vec<Req> {
    let mut at = 0u64;
    let mut out = vec![];
    for i in 0..n {
        at += lcg(x) % (2 * gap + 1);
        let keys = if raw {
            let len = (lcg(x) % 7) as usize;
            (0..len).map(|_| lcg(x) % 24).collect()
        } else {
            let t = lcg(x) % tenants;
            let prefix = (lcg(x) % 5) as usize;
            let suffix = (lcg(x) % 4) as usize;
            let mut ids: Vec<u64> = (0..prefix).map(|j| t * 1000 + j as u64).collect();
            ids.extend((0..suffix).map(|_| 1 << 40 | lcg(x)));
            let mut keys = vec![0; ids.len()];
            keys::trace_keys(&ids, ids.len() as u64 * 16, 16, &mut keys).unwrap();
            keys
        };
        let extra = lcg(x) % 16;
        let o = lcg(x) % 40;
        let len = keys.len() as u64 * 16 + extra;
        if len == 0 || len + o.max(1) - 1 > cap as u64 * 16 {
            continue;
        }
        let steps_before = interleave && lcg(x).is_multiple_of(4);
        let abort = (interleave && i > 0 && lcg(x).is_multiple_of(9)).then(|| lcg(x) % out.len().max(1) as u64);
        out.push(Req { at_ns: at, keys, extra, out: o, steps_before, abort });
    }
    out
}

fn engine(x: &mut u64) -> BatchedConfig {
    let mut e = BatchedConfig::new(Profile::Seed);
    e.max_num_seqs = 1 + (lcg(x) % 6) as u32;
    e.max_num_batched_tokens = e.max_num_seqs + (lcg(x) % 120) as u32;
    if let Some(l) = e.cost.linear_mut() {
        l.t_kv_token_ns = lcg(x) % 3;
        l.t_decode_seq_ns = lcg(x) % 200;
    }
    e
}

const ROUTERS: [RouterKind; 2] = [RouterKind::LlmDPrecise, RouterKind::PrefixAware];

fn check(pods: usize, cases: usize, n: usize, seed: u64) {
    let mut x = seed;
    let mut most_kept = 0;
    for case in 0..cases {
        let cap = 4 + (lcg(&mut x) % 40) as usize;
        let router = ROUTERS[case % ROUTERS.len()];
        let e = engine(&mut x);
        let gap = 50 + lcg(&mut x) % 3000;
        let raw = case % 4 >= 2;
        let interleave = case % 3 == 1;
        let tenants = 1 + lcg(&mut x) % 40;
        let reqs = trace(&mut x, n, tenants, cap, gap, raw, interleave);
        let mut cfg = FleetConfig::new(pods, cap, router);
        cfg.engine = EngineConfig::Batched(e);
        let slots = [8, 16][case % 2];
        let log = [1, 4, 64][case % 3];
        let (with, most) = run(cfg, &reqs, Some((slots, log)));
        let (without, _) = run(cfg, &reqs, None);
        let what = format!("{pods} pods, case {case} ({router:?}, raw {raw}, {slots} slots, log {log})");
        assert_eq!(with.routes, without.routes, "{what}: routes");
        assert_eq!(with.aborted, without.aborted, "{what}: aborts");
        assert_eq!(with.sink, without.sink, "{what}: completions and ITLs in order");
        assert_eq!(with.stats, without.stats, "{what}: per-pod counters");
        assert_eq!(with.totals, without.totals, "{what}: totals");
        most_kept = most_kept.max(most);
    }
    assert!(most_kept >= 8, "{pods} pods: the index must fill (kept at most {most_kept})");
}

#[test]
fn first_key_index_matches_the_pods_maps() {
    for (pods, seed) in [(3, 1), (65, 2), (130, 3)] {
        check(pods, 24, 120, seed);
    }
}

#[test]
fn first_key_index_refuses_what_it_cannot_serve() {
    let cfg = FleetConfig::new(4, 8, RouterKind::LlmDPrecise);
    let mut e = BatchedConfig::new(Profile::Seed);
    e.max_num_seqs = 2;
    let mut cfg_b = cfg;
    cfg_b.engine = EngineConfig::Batched(e);
    let (mut k, mut s, mut b, mut logs) = (vec![0u64; 8], vec![0u64; 8], vec![0u64; 8], vec![0u64; 3]);
    let mut owned = Owned::new(&BatchedLayout::new(&cfg_b, 8, 64).unwrap());
    let mut f = BatchedFleet::new(cfg_b, owned.buffers(&mut [])).unwrap();
    // a log shorter than one entry a pod
    let err = f.attach_heads(&mut k, &mut s, &mut b, &mut logs).unwrap_err();
    assert!(matches!(err, Error::BufferSize { .. }), "{err:?}");
    // a router that does not read the caches
    let mut cfg_r = cfg_b;
    cfg_r.router = RouterKind::RoundRobin;
    let (mut k, mut s, mut b, mut logs) = (vec![0u64; 8], vec![0u64; 8], vec![0u64; 8], vec![0u64; 4]);
    let mut owned = Owned::new(&BatchedLayout::new(&cfg_r, 8, 64).unwrap());
    let mut f = BatchedFleet::new(cfg_r, owned.buffers(&mut [])).unwrap();
    let err = f.attach_heads(&mut k, &mut s, &mut b, &mut logs).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { field: Field::Router, .. }), "{err:?}");
}
