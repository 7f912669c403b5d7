//! Hand-computed cases for every rule of docs/MODEL.md.

mod common;
use brokerlab_core::fleet::limits::MAX_PODS;
use brokerlab_core::fleet::*;
use common::*;

fn cfg(pods: usize, cap: usize, router: RouterKind) -> FleetConfig {
    FleetConfig::new(pods, cap, router)
}

#[test]
fn tail_first_keeps_the_prefix_in_order_does_not() {
    // C = 3. A = [1,2,3]; B = [1,9] evicts one block; A again.
    // tail-first: after A recency is a0,a1,a2 -> B evicts a2 -> A hits a0,a1 (2 blocks).
    // in-order:   after A recency is a2,a1,a0 -> B touches a0 then evicts a1 -> A hits a0 (1).
    let a = keys_of(&[1, 2, 3]);
    let b = keys_of(&[1, 9]);
    for (order, want) in [(TouchOrder::TailFirst, 2), (TouchOrder::InOrder, 1)] {
        let mut c = cfg(1, 3, RouterKind::RoundRobin);
        fifo(&mut c).order = order;
        let mut bufs = Bufs::new(c);
        let mut f = bufs.fleet();
        assert_eq!(f.dispatch(&req(0, &a, 0), &mut ()).unwrap().hit_blocks, 0);
        assert_eq!(f.dispatch(&req(0, &b, 0), &mut ()).unwrap().hit_blocks, 1);
        assert_eq!(f.dispatch(&req(0, &a, 0), &mut ()).unwrap().hit_blocks, want, "{order:?}");
    }
}

#[test]
fn request_longer_than_the_cache() {
    // C = 2, m = 4: tail-first keeps k0,k1 (a re-request hits 2); in-order keeps k2,k3 (hits 0).
    let a = keys_of(&[1, 2, 3, 4]);
    for (order, want, content) in [(TouchOrder::TailFirst, 2, [a[0], a[1]]), (TouchOrder::InOrder, 0, [a[3], a[2]])] {
        let mut c = cfg(1, 2, RouterKind::RoundRobin);
        fifo(&mut c).order = order;
        let mut bufs = Bufs::new(c);
        let mut f = bufs.fleet();
        f.dispatch(&req(0, &a, 0), &mut ()).unwrap();
        assert_eq!(f.pod_cache(0).unwrap().iter_mru().collect::<Vec<_>>(), content);
        assert_eq!(f.dispatch(&req(0, &a, 0), &mut ()).unwrap().hit_blocks, want, "{order:?}");
    }
}

#[test]
fn partial_trailing_block_is_never_a_hit() {
    let mut bufs = Bufs::new(cfg(1, 8, RouterKind::RoundRobin));
    let mut f = bufs.fleet();
    let a = keys_of(&[1, 2]);
    f.dispatch(&req(0, &a, 15), &mut ()).unwrap();
    let o = f.dispatch(&req(0, &a, 15), &mut ()).unwrap();
    assert_eq!((o.hit_tokens, o.prefill_tokens), (32, 15));
    let o = f.dispatch(&req(0, &[], 15), &mut ()).unwrap();
    assert_eq!((o.hit_tokens, o.prefill_tokens), (0, 15));
    // Keys must cover exactly floor(L/16) blocks.
    assert!(matches!(f.dispatch(&req(0, &a[..1], 16), &mut ()), Err(Error::InvalidRequest { .. })));
}

#[test]
fn round_robin_is_i_mod_n() {
    let mut bufs = Bufs::new(cfg(3, 8, RouterKind::RoundRobin));
    let mut f = bufs.fleet();
    let a = keys_of(&[1]);
    let pods: Vec<u32> = (0..7).map(|_| f.dispatch(&req(0, &a, 0), &mut ()).unwrap().pod).collect();
    assert_eq!(pods, [0, 1, 2, 0, 1, 2, 0]);
}

#[test]
fn least_loaded_ties_to_lowest_index() {
    // Each request needs 100 ms of prefill (2000 tokens); all arrive at t = 0 except the last.
    let mut bufs = Bufs::new(cfg(3, 200, RouterKind::LeastLoaded));
    let mut f = bufs.fleet();
    let ids: Vec<u64> = (0..125).collect();
    let a = keys_of(&ids);
    let pods: Vec<(u32, u32)> = (0..5)
        .map(|_| {
            let o = f.dispatch(&req(0, &a, 0), &mut ()).unwrap();
            (o.pod, o.queue_len)
        })
        .collect();
    assert_eq!(pods, [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1)]);
}

#[test]
fn fifo_timing_and_queue_length() {
    let mut bufs = Bufs::new(cfg(1, 64, RouterKind::RoundRobin));
    let mut f = bufs.fleet();
    let r0 = Request { arrival_ns: 0, input_tokens: 100, output_tokens: 0, keys: &keys_of(&[1, 2, 3, 4, 5, 6])[..] };
    let o0 = f.dispatch(&r0, &mut ()).unwrap();
    assert_eq!((o0.start_ns, o0.finish_ns), (0, 5_000_000));
    let k1 = keys_of(&[7, 8]);
    let o1 = f.dispatch(&req(1, &k1, 0), &mut ()).unwrap();
    assert_eq!((o1.queue_len, o1.start_ns, o1.finish_ns, o1.latency_ns()), (1, 5_000_000, 6_600_000, 5_600_000));
    // At t = 5 ms request 0 has finished (finish > arrival is required to count).
    let o2 = f.dispatch(&req(5, &k1, 0), &mut ()).unwrap();
    assert_eq!((o2.queue_len, o2.hit_blocks, o2.start_ns, o2.finish_ns), (1, 2, 6_600_000, 6_600_000));
    // Decode cost per output token.
    let mut c = cfg(1, 64, RouterKind::RoundRobin);
    fifo(&mut c).t_decode_ns = 1_000;
    let mut bufs = Bufs::new(c);
    let mut f = bufs.fleet();
    let r = Request { arrival_ns: 7, input_tokens: 3, output_tokens: 10, keys: &[] };
    assert_eq!(f.dispatch(&r, &mut ()).unwrap().finish_ns, 7 + 3 * 50_000 + 10 * 1_000);
    let late = Request { arrival_ns: 6, ..r };
    assert!(matches!(f.dispatch(&late, &mut ()), Err(Error::ArrivalOutOfOrder { .. })));
}

#[test]
fn prefix_aware_ties_to_smaller_queue_then_lowest_index() {
    let mut bufs = Bufs::new(cfg(2, 16, RouterKind::PrefixAware));
    let mut f = bufs.fleet();
    // r0: nothing cached, equal scores and queues -> lowest index (pod 0), busy 0.8 ms.
    let one = keys_of(&[1]);
    assert_eq!(f.dispatch(&req(0, &one, 0), &mut ()).unwrap().pod, 0);
    // r1: pod 0 match 1 - alpha*1 = 0, pod 1 match 0 - 0 = 0: tie -> smaller queue -> pod 1.
    let one_five = keys_of(&[1, 5]);
    let o = f.dispatch(&req(0, &one_five, 0), &mut ()).unwrap();
    assert_eq!((o.pod, o.believed_match_blocks, o.hit_blocks), (1, 0, 0));
    // Later, both idle: pod 0 match 1, pod 1 match 2 -> pod 1 by score.
    let o = f.dispatch(&req(100, &one_five, 0), &mut ()).unwrap();
    assert_eq!((o.pod, o.believed_match_blocks, o.hit_blocks), (1, 2, 2));
    // alpha = 2.5: a long match loses to an idle pod when the queue is long enough.
    let mut c = cfg(2, 16, RouterKind::PrefixAware);
    c.alpha = 2.5;
    let mut bufs = Bufs::new(c);
    let mut f = bufs.fleet();
    let ab = keys_of(&[1, 2]);
    assert_eq!(f.dispatch(&req(0, &ab, 0), &mut ()).unwrap().pod, 0);
    // pod 0: 2 - 2.5*1 = -0.5 < pod 1: 0.
    assert_eq!(f.dispatch(&req(0, &ab, 0), &mut ()).unwrap().pod, 1);
}

/// r0 [1,2] -> pod 0; r1 [1] -> pod 1 (tie on score, smaller queue); r2 [3,4] -> pod 0, which
/// evicts [1,2] (C = 2); r3 [1,2]: the exact index sends it to pod 1 (match 1); a stale index
/// (k >= 1) still believes pod 0 holds [1,2] (match 2) and chases the gone prefix.
fn stale_scenario(k: u32, neutral_before_r3: bool) -> (Vec<Outcome>, FleetTotals) {
    let a = stale_scenario_with(k, neutral_before_r3, IndexKind::Global);
    let b = stale_scenario_with(k, neutral_before_r3, IndexKind::PodTables);
    assert_eq!(a, b, "the global index and the pod tables must agree");
    a
}

fn stale_scenario_with(k: u32, neutral_before_r3: bool, index: IndexKind) -> (Vec<Outcome>, FleetTotals) {
    let mut c = cfg(2, 2, RouterKind::PrefixAware);
    view(&mut c).stale_delay = k;
    view(&mut c).index = index;
    let mut bufs = Bufs::new(c);
    let mut f = bufs.fleet();
    let (a, one, b, n) = (keys_of(&[1, 2]), keys_of(&[1]), keys_of(&[3, 4]), keys_of(&[8]));
    let mut out = vec![];
    out.push(f.dispatch(&req(0, &a, 0), &mut ()).unwrap());
    out.push(f.dispatch(&req(0, &one, 0), &mut ()).unwrap());
    out.push(f.dispatch(&req(100, &b, 0), &mut ()).unwrap());
    if neutral_before_r3 {
        out.push(f.dispatch(&req(150, &n, 0), &mut ()).unwrap());
    }
    out.push(f.dispatch(&req(200, &a, 0), &mut ()).unwrap());
    (out, *f.totals())
}

#[test]
fn stale_index_chases_an_evicted_prefix() {
    let (exact, t) = stale_scenario(0, false);
    assert_eq!(exact.iter().map(|o| o.pod).collect::<Vec<_>>(), [0, 1, 0, 1]);
    assert_eq!((exact[3].believed_match_blocks, exact[3].hit_blocks), (1, 1));
    assert_eq!(t.chased_requests, 0);

    let (stale, t) = stale_scenario(1, false);
    assert_eq!(stale.iter().map(|o| o.pod).collect::<Vec<_>>(), [0, 1, 0, 0]);
    assert_eq!((stale[3].believed_match_blocks, stale[3].hit_blocks), (2, 0));
    assert_eq!((t.chased_requests, t.phantom_blocks), (1, 2));

    // The eviction made while dispatching request 2 reaches the router before request 2+1+1 = 4.
    let (later, t) = stale_scenario(1, true);
    assert_eq!(later[4].pod, 1);
    assert_eq!((later[4].believed_match_blocks, later[4].hit_blocks), (1, 1));
    assert_eq!(t.chased_requests, 0);
    // With k = 2 it is still in flight at request 4.
    let (k2, t) = stale_scenario(2, true);
    assert_eq!((k2[4].pod, k2[4].believed_match_blocks, k2[4].hit_blocks), (0, 2, 0));
    assert_eq!(t.chased_requests, 1);
}

#[test]
fn stale_evict_is_dropped_when_the_pod_reinserted_the_key() {
    // 1 pod, C = 1, k = 5: [1] evicted by [2], then [1] re-inserted (evicting [2]).
    // The first eviction of [1] must not erase the belief created by the re-insert.
    let mut c = cfg(1, 1, RouterKind::PrefixAware);
    view(&mut c).stale_delay = 5;
    let mut bufs = Bufs::new(c);
    let mut f = bufs.fleet();
    let (one, two) = (keys_of(&[1]), keys_of(&[2]));
    for (i, k) in [&one, &two, &one].into_iter().enumerate() {
        f.dispatch(&req(i as u64 * 100, k, 0), &mut ()).unwrap();
    }
    for i in 3..12 {
        let o = f.dispatch(&req(i * 100, &one, 0), &mut ()).unwrap();
        assert_eq!((o.believed_match_blocks, o.hit_blocks), (1, 1), "request {i}");
    }
}

#[test]
fn bad_configs_are_errors() {
    for (c, field) in [
        (cfg(0, 8, RouterKind::RoundRobin), "pods"),
        (cfg(MAX_PODS + 1, 8, RouterKind::RoundRobin), "pods"),
        (cfg(2, 0, RouterKind::RoundRobin), "capacity"),
        (FleetConfig { alpha: f64::NAN, ..cfg(2, 8, RouterKind::PrefixAware) }, "alpha"),
        (FleetConfig { alpha: -1.0, ..cfg(2, 8, RouterKind::PrefixAware) }, "alpha"),
    ] {
        match c.validate() {
            Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f.name(), field),
            other => panic!("{c:?}: {other:?}"),
        }
    }
    assert!(cfg(64, 8, RouterKind::PrefixAware).validate().is_ok());
    assert!(cfg(MAX_PODS, 8, RouterKind::PrefixAware).validate().is_ok());
}

#[test]
fn cpu_tier_catches_demoted_blocks() {
    // 1 pod, GPU C = 2, CPU tier 4 blocks, 5 us per CPU-loaded token.
    // r0 [1,2,3] leaves GPU {k0,k1} and demotes k2; r1 [7,8] demotes k1 and k0;
    // r2 [1,2,3] misses the GPU but finds k0,k1,k2 in the CPU tier: no prefill, 48 tokens loaded.
    let a = keys_of(&[1, 2, 3]);
    let b = keys_of(&[7, 8]);
    for (cpu, want_cpu_blocks, want_service) in [(4usize, 3u32, 48 * 5_000u64), (0, 0, 48 * 50_000)] {
        let mut c = cfg(1, 2, RouterKind::RoundRobin);
        fifo(&mut c).cpu_capacity_blocks = cpu;
        fifo(&mut c).t_cpu_ns = 5_000;
        let mut bufs = Bufs::new(c);
        let mut f = bufs.fleet();
        f.dispatch(&req(0, &a, 0), &mut ()).unwrap();
        f.dispatch(&req(10, &b, 0), &mut ()).unwrap();
        let o = f.dispatch(&req(20, &a, 0), &mut ()).unwrap();
        assert_eq!((o.hit_blocks, o.cpu_hit_blocks), (0, want_cpu_blocks), "cpu tier {cpu}");
        assert_eq!(o.prefill_tokens, 48 - 16 * want_cpu_blocks as u64);
        assert_eq!(o.latency_ns(), want_service);
        assert_eq!(f.totals().cpu_hit_tokens, 16 * want_cpu_blocks as u64);
    }
}

#[test]
fn cpu_tier_hit_starts_where_the_gpu_hit_ends() {
    // GPU C = 1 keeps k0 (tail-first); the CPU tier has k1 demoted: a re-request hits 1 + 1.
    let mut c = cfg(1, 1, RouterKind::RoundRobin);
    fifo(&mut c).cpu_capacity_blocks = 8;
    let mut bufs = Bufs::new(c);
    let mut f = bufs.fleet();
    let a = keys_of(&[1, 2]);
    f.dispatch(&req(0, &a, 0), &mut ()).unwrap();
    let o = f.dispatch(&req(10, &a, 0), &mut ()).unwrap();
    assert_eq!((o.hit_blocks, o.cpu_hit_blocks, o.prefill_tokens), (1, 1, 0));
}

/// A request at `ms` with prompt `keys` and `output` tokens (the service time in these tests
/// comes from decoding: t_decode = 1 ms per token).
fn req_out(ms: u64, keys: &[u64], output: u64) -> Request<'_> {
    Request { arrival_ns: ms * 1_000_000, input_tokens: keys.len() as u64 * 16, output_tokens: output, keys }
}

fn scaled(pods: usize, router: RouterKind, index: IndexKind) -> FleetConfig {
    let mut c = cfg(pods, 8, router);
    view(&mut c).index = index;
    fifo(&mut c).t_prefill_ns = 0;
    fifo(&mut c).t_decode_ns = 1_000_000;
    *scale(&mut c) = Some(ScalePolicy {
        min_pods: 1,
        initial_pods: 1,
        interval_ns: 1_000_000_000,
        up_milli: 1_500,
        down_milli: 500,
        startup_ns: 2_000_000_000,
    });
    c
}

#[test]
fn autoscaler_boots_a_cold_pod_after_the_startup_and_drops_it_when_idle() {
    // Service 640 ms per request. Three requests at t = 0 queue on pod 0 (finishes 0.64, 1.28,
    // 1.92 s). At 1.0 s two are in the system: 2 > 1.5 -> boot pod 1, ready at 3.0 s. At 2.0 s
    // it is still booting. At 3.0 s it comes up; pod 0 holds one request (finish 3.2 s), the
    // mean is 0.5: neither > 1.5 nor < 0.5 -> hold; round-robin sends request 5 to pod 1, cold.
    // At 10 s both are idle: 0 < 0.5 -> drop pod 1 (its cache is emptied), route to pod 0.
    let a = keys_of(&[1, 2, 3, 4]);
    let mut bufs = Bufs::new(scaled(2, RouterKind::RoundRobin, IndexKind::PodTables));
    let mut f = bufs.fleet();
    let mut outs = Vec::new();
    for ms in [0, 0, 0, 1_000, 2_000, 3_000] {
        outs.push(f.dispatch(&req_out(ms, &a, 640), &mut ()).unwrap());
    }
    let pods: Vec<u32> = outs.iter().map(|o| o.pod).collect();
    let active: Vec<u32> = outs.iter().map(|o| o.active_pods).collect();
    assert_eq!(pods, [0, 0, 0, 0, 0, 1]);
    assert_eq!(active, [1, 1, 1, 1, 1, 2]);
    assert_eq!(outs[4].hit_blocks, 4, "pod 0 is warm");
    assert_eq!((outs[5].hit_blocks, outs[5].queue_len, outs[5].start_ns), (0, 0, 3_000_000_000), "pod 1 starts cold");
    assert_eq!(f.totals().scale_outs, 1);
    assert_eq!(f.pod_cache(1).unwrap().len(), 4);
    let o = f.dispatch(&req_out(10_000, &a, 640), &mut ()).unwrap();
    assert_eq!((o.pod, o.active_pods), (0, 1));
    assert_eq!(f.totals().scale_ins, 1);
    assert_eq!(f.pod_cache(1).unwrap().len(), 0, "a dropped pod loses its cache");
    // Pod 0 from 0 to the end (10.64 s); pod 1 from its boot decision (1 s) to its drop (10 s).
    assert_eq!(f.totals().makespan_ns, 10_640_000_000);
    assert_eq!(f.pod_ns(10_640_000_000), 10_640_000_000 + 9_000_000_000);
    assert_eq!(f.totals().max_active_pods, 2);
    // One request routed while scaled out, and it went to the added pod (fair share 1/2).
    let t = f.totals();
    assert_eq!((t.scaled_out_requests, t.new_pod_requests, t.fair_new_pod_milli), (1, 1, 500));
}

/// Round-robin over at most 2 pods, scaling in below a mean queue of 1.2 (so a busy pod can be
/// dropped), with boot time `startup_ns`.
fn two_pods_busy_drop(startup_ns: u64) -> FleetConfig {
    let mut c = scaled(2, RouterKind::RoundRobin, IndexKind::PodTables);
    *scale(&mut c) = c.scale().map(|p| ScalePolicy { startup_ns, down_milli: 1_200, ..p });
    c
}

#[test]
fn a_dropped_pod_is_charged_its_drain() {
    // Scale in below a mean of 1.2 (so a busy pod can be dropped) and boot instantly. Pod 1 gets
    // a 10 s request at 1 s; at 5 s the mean is 0.5 -> pod 1 is dropped but still serves that
    // request until 11 s, so it is charged from 1 s to 11 s.
    let a = keys_of(&[1]);
    let mut bufs = Bufs::new(two_pods_busy_drop(0));
    let mut f = bufs.fleet();
    for ms in [0, 0, 0] {
        f.dispatch(&req_out(ms, &a, 640), &mut ()).unwrap();
    }
    // 1.0 s: 2 in the system > 1.5 -> boot pod 1, routable at once; request 3 (odd) -> pod 1.
    let o = f.dispatch(&req_out(1_000, &a, 10_000), &mut ()).unwrap();
    assert_eq!((o.pod, o.active_pods, o.finish_ns), (1, 2, 11_000_000_000));
    let o = f.dispatch(&req_out(5_000, &a, 1), &mut ()).unwrap();
    assert_eq!((o.pod, o.active_pods), (0, 1));
    assert_eq!(f.totals().scale_ins, 1);
    let end = f.totals().makespan_ns;
    assert_eq!(end, 11_000_000_000);
    assert_eq!(f.pod_ns(end), end + 10_000_000_000);
}

#[test]
fn autoscaling_gives_the_same_results_with_either_index_and_a_stale_index_never_routes_to_a_dropped_pod() {
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        rng = hash::fmix64(rng.wrapping_add(0x9e37_79b9_7f4a_7c15));
        rng
    };
    let mut ms = 0;
    let reqs: Vec<(u64, Vec<u64>, u64)> = (0..600)
        .map(|i| {
            let tenant = next() % 5;
            let len = 2 + next() % 5;
            let ids: Vec<u64> = (0..len).map(|j| if j < 2 { tenant * 100 + j } else { next() }).collect();
            // Bursty arrivals: 150 requests 25 ms apart, then 150 requests 400 ms apart, twice.
            ms += if (i / 150) % 2 == 0 { 25 } else { 400 };
            (ms, keys_of(&ids), 10 + next() % 90)
        })
        .collect();
    let run = |index: IndexKind, stale: u32| {
        let mut c = scaled(4, RouterKind::PrefixAware, index);
        view(&mut c).stale_delay = stale;
        *scale(&mut c) = c.scale().map(|p| ScalePolicy { startup_ns: 500_000_000, ..p });
        let mut bufs = Bufs::new(c);
        let mut f = bufs.fleet();
        let outs: Vec<Outcome> =
            reqs.iter().map(|(ms, k, o)| f.dispatch(&req_out(*ms, k, *o), &mut ()).unwrap()).collect();
        (outs, *f.totals())
    };
    let (a, ta) = run(IndexKind::PodTables, 0);
    let (b, tb) = run(IndexKind::Global, 0);
    assert_eq!(a, b);
    assert_eq!(ta, tb);
    assert!(ta.scale_outs >= 2 && ta.scale_ins >= 2, "the workload must exercise both: {ta:?}");
    for stale in [3, 40] {
        let (s, ts) = run(IndexKind::PodTables, stale);
        assert!(s.iter().all(|o| o.pod < o.active_pods), "stale {stale}: routed to a pod that is not routable");
        assert!(ts.scale_ins >= 1);
        assert_eq!(run(IndexKind::Global, stale).0, s, "stale {stale}");
    }
}

#[test]
fn autoscale_policy_errors_name_the_field() {
    let base = scaled(4, RouterKind::RoundRobin, IndexKind::PodTables).scale().unwrap();
    for (policy, field) in [
        (ScalePolicy { min_pods: 0, ..base }, "scale-min"),
        (ScalePolicy { min_pods: 5, initial_pods: 5, ..base }, "scale-min"),
        (ScalePolicy { initial_pods: 5, ..base }, "scale-initial"),
        (ScalePolicy { min_pods: 2, initial_pods: 1, ..base }, "scale-initial"),
        (ScalePolicy { interval_ns: 0, ..base }, "scale-interval"),
        (ScalePolicy { down_milli: 1_500, ..base }, "scale-down-queue"),
    ] {
        let mut c = cfg(4, 8, RouterKind::RoundRobin);
        *scale(&mut c) = Some(policy);
        match c.validate() {
            Err(Error::InvalidConfig { field: f, .. }) => assert_eq!(f.name(), field, "{policy:?}"),
            other => panic!("{policy:?}: {other:?}"),
        }
    }
}

#[test]
fn a_rebooted_pod_counts_as_empty_when_the_rule_reads_the_queues() {
    // Pod 1 is dropped at 3 s while still serving a request until 11.5 s, then booted again at
    // 4 s (ready 4.5 s). At 5 s it comes up as a new machine: the rule must read its queue as 0
    // (its previous life's request runs elsewhere), so sum = 2 (pod 0) < 1.2 x 2 -> drop again.
    // Counting the old request (sum 3) would hold instead.
    let a = keys_of(&[1]);
    let mut bufs = Bufs::new(two_pods_busy_drop(500_000_000));
    let mut f = bufs.fleet();
    let mut send = |ms: u64, out: u64| f.dispatch(&req_out(ms, &a, out), &mut ()).unwrap();
    for _ in 0..3 {
        send(0, 640);
    }
    assert_eq!(send(1_000, 640).active_pods, 1); // boots pod 1, ready at 1.5 s
    assert_eq!(send(1_500, 1).pod, 0);
    let long = send(1_500, 10_000);
    assert_eq!((long.pod, long.finish_ns), (1, 11_500_000_000));
    assert_eq!(send(3_000, 1).active_pods, 1); // dropped, still busy
    for _ in 0..3 {
        send(3_500, 640);
    }
    assert_eq!(send(4_000, 1).active_pods, 1); // 3 queued on pod 0 -> boots pod 1 again
    let o = send(5_000, 1);
    assert_eq!(o.active_pods, 1, "the new pod 1 was empty, so the mean was 1.0 < 1.2: dropped");
    assert_eq!((f.totals().scale_outs, f.totals().scale_ins), (2, 2));
}

/// The core words a conflict between settings its own way (the host words it with its flags and
/// keys: host/src/fleet/run/fields.rs `rule`): no rule names a CLI flag.
#[test]
fn conflict_rules_name_no_flag() {
    for r in Rule::ALL {
        assert!(!r.name().contains("--"), "{r:?}: {}", r.name());
        let e = Error::Conflict { field: Field::Cache, rule: *r };
        assert!(!e.to_string().contains("--"), "{e}");
    }
}
