//! A small deterministic minimiser: Nelder-Mead over parameters scaled by their start values
//! (`u_i = x_i / x0_i`, so efficiencies near 1 and overheads of millions of ns move alike),
//! bounds kept by clamping, restarted from the best point with a smaller simplex until a restart
//! no longer improves. Fixed start, fixed tie order, only `+ - x /` and comparisons on f64 (no
//! `ln`, `exp`, no RNG): the same evaluations and the same result on every IEEE-754 machine.

/// First simplex: +50% in each parameter; restarts: +5%.
const FIRST_SIZE: f64 = 0.5;
const RESTART_SIZE: f64 = 0.05;
/// A simplex is converged when its points are within this of the best, per scaled parameter.
const SPREAD: f64 = 1e-10;
/// Smallest relative loss decrease for which a restart counts as progress.
const MIN_GAIN: f64 = 1e-12;
/// Most loss evaluations.
pub const MAX_EVALS: usize = 20_000;

/// The minimiser's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Minimum {
    /// The parameters.
    pub x: Vec<f64>,
    /// The loss there.
    pub loss: f64,
    /// Loss evaluations made.
    pub evals: usize,
}

struct Search<'a, F: FnMut(&[f64]) -> f64> {
    f: F,
    x0: &'a [f64],
    lo: &'a [f64],
    hi: &'a [f64],
    evals: usize,
}

impl<F: FnMut(&[f64]) -> f64> Search<'_, F> {
    fn clamp(&self, u: Vec<f64>) -> Vec<f64> {
        u.iter().enumerate().map(|(i, &v)| v.max(self.lo[i] / self.x0[i]).min(self.hi[i] / self.x0[i])).collect()
    }

    fn x(&self, u: &[f64]) -> Vec<f64> {
        u.iter().zip(self.x0).map(|(a, b)| a * b).collect()
    }

    fn eval(&mut self, u: &[f64]) -> f64 {
        self.evals += 1;
        let x = self.x(u);
        let v = (self.f)(&x);
        // a NaN is worse than anything, so it is never kept
        if v.is_nan() { f64::INFINITY } else { v }
    }

    /// `a + t (b - a)`, clamped.
    fn along(&self, a: &[f64], b: &[f64], t: f64) -> Vec<f64> {
        self.clamp(a.iter().zip(b).map(|(&p, &q)| p + t * (q - p)).collect())
    }

    /// One Nelder-Mead run from a simplex around `best` of relative size `size`; its best point.
    fn run(&mut self, best: &[f64], size: f64) -> (Vec<f64>, f64) {
        let n = best.len();
        let mut pts = vec![best.to_vec()];
        for i in 0..n {
            let mut u = best.to_vec();
            u[i] *= 1.0 + size;
            let mut u = self.clamp(u);
            if u[i] == best[i] {
                // at the upper bound: step down instead
                u[i] = best[i] * (1.0 - size / 2.0);
            }
            pts.push(u);
        }
        let mut fs: Vec<f64> = pts.clone().iter().map(|u| self.eval(u)).collect();
        while self.evals < MAX_EVALS {
            let mut order: Vec<usize> = (0..=n).collect();
            order.sort_by(|&a, &b| fs[a].total_cmp(&fs[b]).then(a.cmp(&b)));
            pts = order.iter().map(|&k| pts[k].clone()).collect();
            fs = order.iter().map(|&k| fs[k]).collect();
            let spread =
                pts[1..].iter().flat_map(|u| u.iter().zip(&pts[0]).map(|(a, b)| (a - b).abs())).fold(0.0, f64::max);
            if spread < SPREAD {
                break;
            }
            let c: Vec<f64> = (0..n).map(|j| pts[..n].iter().map(|u| u[j]).sum::<f64>() / n as f64).collect();
            let worst = pts[n].clone();
            let r = self.along(&c, &worst, -1.0);
            let fr = self.eval(&r);
            if fr < fs[0] {
                let e = self.along(&c, &worst, -2.0);
                let fe = self.eval(&e);
                (pts[n], fs[n]) = if fe < fr { (e, fe) } else { (r, fr) };
            } else if fr < fs[n - 1] {
                (pts[n], fs[n]) = (r, fr);
            } else {
                let k = if fr < fs[n] { self.along(&c, &r, 0.5) } else { self.along(&c, &worst, 0.5) };
                let fk = self.eval(&k);
                if fk < fr.min(fs[n]) {
                    (pts[n], fs[n]) = (k, fk);
                } else {
                    for i in 1..=n {
                        pts[i] = self.along(&pts[0].clone(), &pts[i].clone(), 0.5);
                        fs[i] = self.eval(&pts[i].clone());
                    }
                }
            }
        }
        let i = (0..=n).min_by(|&a, &b| fs[a].total_cmp(&fs[b]).then(a.cmp(&b))).expect("a simplex has points");
        (pts[i].clone(), fs[i])
    }
}

/// Minimises `f` over `lo[i] <= x[i] <= hi[i]` from `x0` (all positive).
pub fn minimize(x0: &[f64], lo: &[f64], hi: &[f64], f: impl FnMut(&[f64]) -> f64) -> Minimum {
    assert!(x0.len() == lo.len() && lo.len() == hi.len(), "one bound per parameter");
    assert!(x0.iter().zip(lo).all(|(&x, &l)| x > 0.0 && l > 0.0), "scaled search needs positive starts and bounds");
    let mut s = Search { f, x0, lo, hi, evals: 0 };
    let mut best = s.clamp(vec![1.0; x0.len()]);
    let mut fbest = s.eval(&best);
    let mut size = FIRST_SIZE;
    while s.evals < MAX_EVALS {
        let (u, fu) = s.run(&best, size);
        if fu < fbest - MIN_GAIN * fbest.abs() {
            (best, fbest) = (u, fu);
            size = RESTART_SIZE;
        } else {
            break;
        }
    }
    Minimum { x: s.x(&best), loss: fbest, evals: s.evals }
}

/// Symmetric squared relative error of a prediction `p` against a measurement `m` (both > 0):
/// `(p - m)^2 / (p m)`, about `ln(p / m)^2` near p = m, the same for p = 2m and p = m / 2, and
/// free of `ln`.
pub fn sq_rel(p: f64, m: f64) -> f64 {
    let d = p - m;
    d * d / (p * m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_minimum_of_a_separable_bowl() {
        let want = [0.37, 2.5e6, 40.0];
        let f = |x: &[f64]| x.iter().zip(want).map(|(&a, b)| sq_rel(a, b)).sum::<f64>();
        let m = minimize(&[0.5, 1e6, 10.0], &[1e-3, 1.0, 1e-3], &[1.0, 1e10, 1e6], f);
        for (got, want) in m.x.iter().zip(want) {
            assert!((got / want - 1.0).abs() < 1e-5, "{got} vs {want}");
        }
        assert!(m.evals < MAX_EVALS);
    }

    #[test]
    fn follows_a_correlated_valley() {
        // only the product matters, plus a weak pull of x0 to 1: the valley x0 x1 = 6
        let f = |x: &[f64]| sq_rel(x[0] * x[1], 6.0) + 1e-3 * sq_rel(x[0], 1.0);
        let m = minimize(&[10.0, 10.0], &[1e-6, 1e-6], &[1e6, 1e6], f);
        assert!((m.x[0] * m.x[1] / 6.0 - 1.0).abs() < 1e-8, "{:?}", m.x);
        assert!((m.x[0] - 1.0).abs() < 1e-6, "{:?}", m.x);
        assert!(m.evals < 2_000, "{} evaluations", m.evals);
    }

    #[test]
    fn respects_bounds_and_skips_nan() {
        let f = |x: &[f64]| if x[0] > 0.8 { f64::NAN } else { sq_rel(x[0], 5.0) };
        let m = minimize(&[0.5], &[0.1], &[1.0], f);
        assert!(m.x[0] <= 0.8 && m.x[0] > 0.7999, "{:?}", m.x);
        let same = minimize(&[0.5], &[0.1], &[1.0], f);
        assert_eq!(m, same, "deterministic");
    }
}
