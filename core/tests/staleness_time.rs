//! Staleness in time (docs/MODEL.md, "Staleness in time"): `--event-delay-ms` and
//! `--speculative-ttl-ms`, on hand-built sequences.

mod common;

use brokerlab_core::fleet::*;
use common::{Bufs, keys_of, view};

const MS: u64 = 1_000_000;

/// 2 pods of 4 blocks, prefix-aware (alpha 1), 64-token prompts served in 3.2 ms.
fn cfg(delay_ms: u64, ttl_ms: u64) -> FleetConfig {
    let mut c = FleetConfig::new(2, 4, RouterKind::PrefixAware);
    view(&mut c).event_delay_ns = delay_ms * MS;
    view(&mut c).speculative_ttl_ns = ttl_ms * MS;
    c
}

fn at<'k>(ms: u64, keys: &'k [u64]) -> Request<'k> {
    Request { arrival_ns: ms * MS, input_tokens: keys.len() as u64 * 16, output_tokens: 0, keys }
}

/// (pod, believed, hit) of each request.
fn run(c: FleetConfig, reqs: &[(u64, &[u64])]) -> Vec<(u32, u32, u32)> {
    let mut bufs = Bufs::new(c);
    let mut f = bufs.fleet();
    reqs.iter()
        .map(|&(ms, k)| {
            let o = f.dispatch(&at(ms, k), &mut ()).unwrap();
            (o.pod, o.believed_match_blocks, o.hit_blocks)
        })
        .collect()
}

#[test]
fn the_index_learns_of_stores_and_evictions_d_ms_late() {
    let a = keys_of(&[1, 2, 3, 4]);
    let b = keys_of(&[5, 6, 7, 8]);
    let seq: [(u64, &[u64]); 6] = [(0, &a), (5, &a), (10, &a), (20, &b), (25, &a), (26, &b)];
    let out = run(cfg(10, 0), &seq);
    assert_eq!(out[0], (0, 0, 0));
    // 5 ms: pod 0 stored A at 0 but the router hears of it at 10 ms: believed 0, hit 4.
    assert_eq!(out[1], (0, 0, 4));
    // 10 ms: the store (at 0 <= 10 - 10) has arrived.
    assert_eq!(out[2], (0, 4, 4));
    // 20 ms: B goes to pod 0 (no match anywhere, queues 0: lowest index) and evicts A.
    assert_eq!(out[3], (0, 0, 0));
    // 25 ms: the eviction at 20 ms is unheard of: the router chases A to pod 0 and misses.
    assert_eq!(out[4], (0, 4, 0));
    // 26 ms: pod 0 stored B at 20 and evicted it at 25; at 26 - 10 = 16 ms it did not hold it
    // yet, so it is not believed; pod 0 is busy until 28.2 ms: pod 1.
    assert_eq!(out[5], (1, 0, 0));
    // Without the delay: believed = held at once.
    let exact = run(cfg(0, 0), &seq);
    assert_eq!(exact[1], (0, 4, 4));
    assert_eq!(exact[4], (0, 0, 0), "the router knows pod 0 lost A: no chase (believed 0)");
}

#[test]
fn speculative_entries_cover_the_delay_and_expire() {
    let a = keys_of(&[1, 2, 3, 4]);
    let c = keys_of(&[9, 10, 11, 12]);
    // A routed to pod 0 at 0 is believed at once (speculative), though its store is heard of at 10.
    let out = run(cfg(10, 3), &[(0, &a), (2, &a)]);
    assert_eq!(out[1], (0, 4, 4));
    // At 4 ms the entry (made at 0, TTL 3 ms) has expired and the store is still unheard of.
    let out = run(cfg(10, 3), &[(0, &a), (4, &a)]);
    assert_eq!(out[1], (0, 0, 4));
    // An entry outlives its pod's eviction until it expires: C (at 4 ms, pods idle: pod 0)
    // evicts A from pod 0, yet at 5 ms A is still believed there (the entry from 0 ms lives
    // 10 ms; no delay): 4 - 1 queued > 0 on pod 1, a chase.
    let out = run(cfg(0, 10), &[(0, &a), (4, &c), (5, &a)]);
    assert_eq!(out[1].0, 0);
    assert_eq!(out[2], (0, 4, 0));
}

#[test]
fn delays_in_time_are_checked() {
    let mut c = cfg(10, 0);
    view(&mut c).stale_delay = 2;
    assert_eq!(c.validate(), Err(Error::Conflict { field: Field::EventDelay, rule: Rule::OneStaleDelay }));
    let c = cfg(10, 5);
    assert_eq!(c.pending_queues(), 3);
    // The batched engine reads its caches exactly: its configuration has no delay to set.
    let mut b = FleetConfig::batched(2, 4, RouterKind::PrefixAware, BatchedConfig::new(Profile::Seed));
    assert!(b.view_mut().is_none());
    assert_eq!(b.view(), ViewConfig::EXACT);
    // Routers that do not read the exact index keep no queues.
    let mut rr = cfg(10, 5);
    rr.router = RouterKind::RoundRobin;
    assert_eq!(rr.pending_queues(), 0);
}
