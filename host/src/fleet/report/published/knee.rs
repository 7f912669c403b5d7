//! The knee rule of docs/PUBLISHED.md assumption A9, applied the same way to simulated and to
//! published rows (no published source defines a knee).

/// One load point: (load: achieved rate or concurrency, client latency p90, throughput).
pub type LoadPoint = (f64, f64, f64);

/// A knee: the load and the throughput there.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Knee {
    /// The knee's load (QPS: midpoint of the two achieved rates around the jump; concurrency:
    /// the point before it).
    pub load: f64,
    /// Throughput at the point before the jump.
    pub throughput: f64,
    /// The latency ratio of the jump.
    pub jump: f64,
}

/// A9: the load point just before the largest ratio jump of the client latency p90 between
/// consecutive load points (sorted by load here; the caller leaves the warmup out). `midpoint`:
/// the knee is the midpoint of the two loads (Poisson ramps). `None` with fewer than two points
/// or a latency that is not a positive number (a missing row never yields a knee).
pub fn knee(points: &[LoadPoint], midpoint: bool) -> Option<Knee> {
    let mut p = points.to_vec();
    if p.len() < 2 || p.iter().any(|q| !(q.1 > 0.0 && q.0.is_finite() && q.2.is_finite())) {
        return None;
    }
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (i, jump) = p.windows(2).map(|w| w[1].1 / w[0].1).enumerate().max_by(|a, b| a.1.total_cmp(&b.1))?;
    let load = if midpoint { (p[i].0 + p[i + 1].0) / 2.0 } else { p[i].0 };
    Some(Knee { load, throughput: p[i].2, jump })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::report::published::cells::{B2B_AFFINITY, B2B_SERVICE, B2bRow};

    fn points(rows: &[B2bRow]) -> Vec<LoadPoint> {
        rows.iter().filter(|r| !r.warmup).map(|r| (r.ach_qps, r.ttft_p90_s, r.in_tok_s)).collect()
    }

    #[test]
    fn a9_on_the_published_b2b_rows_gives_the_documented_knees() {
        // docs/PUBLISHED.md A9: prefix+token (36.77 + 39.62) / 2 = 38.195 at 89,787 in tok/s
        // (TTFT p90 2.2 -> 20.2 s); k8 (15.80 + 20.55) / 2 = 18.175 at 30,550 (4.9 -> 56.8 s).
        let a = knee(&points(&B2B_AFFINITY), true).unwrap();
        assert!((a.load - 38.195).abs() < 1e-9 && a.throughput == 89_787.2, "{a:?}");
        assert!((a.jump - 20.2 / 2.2).abs() < 1e-9);
        let k = knee(&points(&B2B_SERVICE), true).unwrap();
        assert!((k.load - 18.175).abs() < 1e-9 && k.throughput == 30_550.3, "{k:?}");
    }

    #[test]
    fn missing_or_degenerate_rows_give_no_knee() {
        assert_eq!(knee(&[(1.0, 1.0, 1.0)], true), None);
        assert_eq!(knee(&[(1.0, 1.0, 1.0), (2.0, f64::NAN, 1.0)], true), None);
        assert_eq!(knee(&[(1.0, 0.0, 1.0), (2.0, 3.0, 1.0)], true), None);
        // Concurrency points: the point before the jump, unsorted input sorted first.
        let k = knee(&[(30.0, 74.4, 16.0), (20.0, 14.2, 29.0), (10.0, 10.0, 9.0)], false).unwrap();
        assert_eq!((k.load, k.throughput), (20.0, 29.0));
    }
}
