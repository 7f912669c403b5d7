//! Percentiles by nearest rank, and a bounded-memory latency histogram for the firmware.

/// Index of the q-th percentile by nearest rank in an ascending array of `n` values, with
/// q = `num / den` in (0, 1]: `ceil(q * n) - 1`, computed exactly in integers. `None` if `n == 0`.
pub fn nearest_rank_index(n: usize, num: u64, den: u64) -> Option<usize> {
    if n == 0 || den == 0 {
        return None;
    }
    let rank = (num as u128 * n as u128).div_ceil(den as u128) as usize;
    Some(rank.clamp(1, n) - 1)
}

/// The percentiles reported everywhere: p50, p90, p99 as (num, den).
pub const REPORTED_PERCENTILES: [(u64, u64); 3] = [(50, 100), (90, 100), (99, 100)];

/// Sub-buckets per power of two: relative error of a reported value is below 1/SUB_BUCKETS.
pub const SUB_BUCKETS: usize = 32;
/// Buckets covering every u64 value.
pub const HISTOGRAM_BUCKETS: usize = 64 * SUB_BUCKETS;

/// A log-linear histogram of u64 values (HDR style) in fixed memory: values below
/// `SUB_BUCKETS` are exact; above, each power of two is split into `SUB_BUCKETS` equal buckets, so
/// the lower bound it reports for a percentile is within a factor (1 - 1/32) of the exact
/// nearest-rank value: `exact * 31/32 < reported <= exact`.
#[derive(Clone, Debug)]
pub struct LogHistogram {
    counts: [u32; HISTOGRAM_BUCKETS],
    total: u64,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram { counts: [0; HISTOGRAM_BUCKETS], total: 0 }
    }
}

fn bucket_of(v: u64) -> usize {
    let sub = SUB_BUCKETS as u64;
    if v < sub {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros() as usize; // v in [2^exp, 2^(exp+1))
    let shift = exp - 5; // SUB_BUCKETS = 2^5
    let mantissa = ((v >> shift) - sub) as usize;
    (exp - 4) * SUB_BUCKETS + mantissa
}

fn lower_bound_of(b: usize) -> u64 {
    if b < SUB_BUCKETS {
        return b as u64;
    }
    let exp = b / SUB_BUCKETS + 4;
    let mantissa = (b % SUB_BUCKETS) as u64;
    (SUB_BUCKETS as u64 + mantissa) << (exp - 5)
}

impl LogHistogram {
    /// Records one value.
    pub fn record(&mut self, v: u64) {
        let b = bucket_of(v);
        self.counts[b] = self.counts[b].saturating_add(1);
        self.total += 1;
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Lower bound of the bucket holding the nearest-rank q-th percentile, q = num/den.
    pub fn percentile(&self, num: u64, den: u64) -> Option<u64> {
        let idx = nearest_rank_index(self.total as usize, num, den)? as u64;
        let mut seen = 0u64;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c as u64;
            if seen > idx {
                return Some(lower_bound_of(b));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_matches_the_definition() {
        assert_eq!(nearest_rank_index(0, 50, 100), None);
        assert_eq!(nearest_rank_index(1, 99, 100), Some(0));
        assert_eq!(nearest_rank_index(10, 90, 100), Some(8));
        assert_eq!(nearest_rank_index(10, 50, 100), Some(4));
        assert_eq!(nearest_rank_index(11, 50, 100), Some(5));
        assert_eq!(nearest_rank_index(100, 99, 100), Some(98));
        assert_eq!(nearest_rank_index(101, 99, 100), Some(99));
    }

    #[test]
    fn histogram_error_is_bounded() {
        let mut h = LogHistogram::default();
        let mut values = [0u64; 1000];
        let mut x = 12345u64;
        for v in values.iter_mut() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            *v = (x >> 20) % 5_000_000_000;
            h.record(*v);
        }
        values.sort_unstable();
        for (num, den) in REPORTED_PERCENTILES {
            let exact = values[nearest_rank_index(1000, num, den).unwrap()];
            let approx = h.percentile(num, den).unwrap();
            assert!(approx <= exact && approx as f64 >= exact as f64 * (31.0 / 32.0), "{approx} vs {exact}");
        }
        for v in [0u64, 1, 31, 32, 33, 63, 64, 1000, u64::MAX] {
            assert!(lower_bound_of(bucket_of(v)) <= v);
        }
    }
}
