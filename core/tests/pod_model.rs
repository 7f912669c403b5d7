//! The LRU pod against a naive model (a Vec in recency order), plus hand-computed cases.

use brokerlab_core::fleet::{CacheEvents, LruPod, Slot};
use proptest::prelude::*;

#[derive(Default)]
struct Log(Vec<(bool, u64)>);
impl CacheEvents for Log {
    fn inserted(&mut self, k: u64) {
        self.0.push((true, k));
    }
    fn evicted(&mut self, k: u64) {
        self.0.push((false, k));
    }
}

/// Naive LRU: most recent first.
struct Model {
    cap: usize,
    keys: Vec<u64>,
}
impl Model {
    fn touch(&mut self, k: u64, log: &mut Log) -> bool {
        if let Some(i) = self.keys.iter().position(|&x| x == k) {
            self.keys.remove(i);
            self.keys.insert(0, k);
            return true;
        }
        if self.keys.len() == self.cap {
            log.0.push((false, self.keys.pop().unwrap()));
        }
        self.keys.insert(0, k);
        log.0.push((true, k));
        false
    }
}

/// A pod's buffers: the recommended table, or the shortest one accepted (`short`).
fn pod_with(cap: usize, short: bool) -> (Vec<Slot>, Vec<u32>) {
    let len = if short { LruPod::min_table_len(cap) } else { LruPod::table_len(cap) };
    (vec![Slot::default(); cap], vec![0; len])
}

proptest! {
    #[test]
    fn pod_matches_naive_lru(cap in 1usize..24, short: bool, ops in proptest::collection::vec(0u64..40, 0..400)) {
        let (mut s, mut t) = pod_with(cap, short);
        let mut pod = LruPod::new(&mut s, &mut t).unwrap();
        let mut model = Model { cap, keys: vec![] };
        let (mut la, mut lb) = (Log::default(), Log::default());
        for &k in &ops {
            // Spread keys over the table: small integers would all hash near each other anyway.
            let key = k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (k << 7);
            prop_assert_eq!(pod.contains(key), model.keys.contains(&key));
            prop_assert_eq!(pod.touch(key, &mut la), model.touch(key, &mut lb));
            prop_assert_eq!(pod.iter_mru().collect::<Vec<_>>(), model.keys.clone());
        }
        prop_assert_eq!(la.0, lb.0);
        prop_assert_eq!(pod.len(), model.keys.len());
    }

    #[test]
    fn colliding_keys_survive_deletion(
        cap in 2usize..16,
        short: bool,
        ops in proptest::collection::vec(0u64..64, 0..300),
    ) {
        // Keys that differ only in high bits collide in the table home slot: this stresses the
        // backward-shift deletion.
        let (mut s, mut t) = pod_with(cap, short);
        let mut pod = LruPod::new(&mut s, &mut t).unwrap();
        let mut model = Model { cap, keys: vec![] };
        let mut log = Log::default();
        for &k in &ops {
            let key = k << 58;
            pod.touch(key, &mut ());
            model.touch(key, &mut log);
            for &m in &model.keys {
                prop_assert!(pod.contains(m));
            }
            prop_assert_eq!(pod.len(), model.keys.len());
        }
    }
}

#[test]
fn zero_capacity_and_wrong_table_are_errors() {
    let mut t = vec![0u32; 4];
    assert!(LruPod::new(&mut [], &mut t).is_err());
    let mut s = vec![Slot::default(); 10];
    // Shorter than 2 C, or not a power of two.
    for len in [8usize, 16, 24, 48] {
        let mut t = vec![0u32; len];
        assert!(LruPod::new(&mut s, &mut t).is_err(), "table of {len} for 10 blocks");
    }
    // The shortest accepted, the recommended and a longer one.
    assert_eq!((LruPod::min_table_len(10), LruPod::table_len(10)), (32, 32));
    assert_eq!((LruPod::min_table_len(16), LruPod::table_len(16)), (32, 64));
    for len in [32usize, 64, 128] {
        let mut t = vec![0u32; len];
        assert!(LruPod::new(&mut s, &mut t).is_ok(), "table of {len} for 10 blocks");
    }
}

#[test]
fn recommended_table_is_a_quarter_to_a_half_full() {
    for cap in [1usize, 2, 3, 5, 100, 4096, 4097, 6144, 16384, 1 << 20, 3_000_000] {
        let len = LruPod::table_len(cap);
        assert!(len.is_power_of_two() && len > 2 * cap && len <= 4 * cap, "capacity {cap}: table {len}");
        assert!(LruPod::min_table_len(cap) <= len);
    }
}

#[test]
fn bytes_per_block_within_target() {
    for cap in [1usize, 3, 100, 4096, 4097, 6144, 1 << 20, 3_000_000] {
        let b = LruPod::bytes_per_block(cap);
        assert!(b <= 32.0, "capacity {cap}: {b} bytes per block");
    }
}

proptest! {
    #[test]
    fn clear_evicts_everything_least_recent_first_and_the_pod_works_after(
        cap in 1usize..12,
        before in proptest::collection::vec(0u64..30, 0..60),
        after in proptest::collection::vec(0u64..30, 0..60),
    ) {
        let (mut s, mut t) = pod_with(cap, false);
        let mut pod = LruPod::new(&mut s, &mut t).unwrap();
        let key = |k: u64| k.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        for &k in &before {
            pod.touch(key(k), &mut ());
        }
        let mut expected: Vec<(bool, u64)> = pod.iter_mru().map(|k| (false, k)).collect();
        expected.reverse();
        let mut log = Log::default();
        pod.clear(&mut log);
        prop_assert_eq!(log.0, expected);
        prop_assert!(pod.is_empty());
        prop_assert!(before.iter().all(|&k| !pod.contains(key(k))));
        let mut model = Model { cap, keys: vec![] };
        let (mut la, mut lb) = (Log::default(), Log::default());
        for &k in &after {
            prop_assert_eq!(pod.touch(key(k), &mut la), model.touch(key(k), &mut lb));
        }
        prop_assert_eq!(pod.iter_mru().collect::<Vec<_>>(), model.keys);
        prop_assert_eq!(la.0, lb.0);
    }
}
