//! Tick placement ("nice" 1-2-5 steps, log decades) and tick label formatting.

/// A tick: its value, and its label (`None` for an unlabelled minor tick).
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    pub value: f64,
    pub label: Option<String>,
}

/// The 1-2-5 step closest to `raw` (`raw > 0`; anything else gives 1).
pub fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let exp = raw.log10().floor();
    let base = 10f64.powi(exp as i32);
    let f = raw / base;
    let m = if f < 1.5 {
        1.0
    } else if f < 3.0 {
        2.0
    } else if f < 7.0 {
        5.0
    } else {
        10.0
    };
    m * base
}

/// Values of the nice ticks inside `[lo, hi]`, aiming at about `target` intervals.
///
/// `nice_ticks(0.0, 0.87, 5)` is `[0.0, 0.2, 0.4, 0.6, 0.8]`.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) {
        return Vec::new();
    }
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
    if hi == lo {
        return vec![lo];
    }
    let step = nice_step((hi - lo) / target.max(1) as f64);
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last.min(first + 1000)).map(|i| clean(i as f64 * step, step)).collect()
}

/// Rounds away the float noise of `i * step` (e.g. 0.6000000000000001) and negative zero.
fn clean(v: f64, step: f64) -> f64 {
    let dec = decimals(step) as i32;
    let p = 10f64.powi(dec.min(15));
    let r = (v * p).round() / p;
    if r == 0.0 { 0.0 } else { r }
}

/// Decimal places needed to print multiples of `step`.
fn decimals(step: f64) -> usize {
    if !(step.is_finite() && step > 0.0) {
        return 0;
    }
    (-(step.log10() + 1e-9).floor()).max(0.0) as usize
}

/// Formats `v` printed at the precision of `step`, with `k`/`M`/`G` suffixes for large round values.
pub fn format_tick(v: f64, step: f64) -> String {
    format_scaled(v, step, v.abs())
}

/// Like [`format_tick`], choosing the suffix from `mag` (the largest magnitude on the axis) so that
/// all labels of an axis share one unit.
fn format_scaled(v: f64, step: f64, mag: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    if mag >= 1e4 || (mag >= 1e3 && step >= 1e3) {
        for (div, suffix) in [(1e9, "G"), (1e6, "M"), (1e3, "k")] {
            if mag >= div && step >= div / 10.0 {
                return format!("{}{suffix}", plain(v / div, step / div));
            }
        }
    }
    if v.abs() < 1e-4 || step < 1e-6 {
        return format!("{v:.1e}");
    }
    plain(v, step)
}

fn plain(v: f64, step: f64) -> String {
    let s = format!("{:.*}", decimals(step).min(12), v);
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') { s[1..].to_string() } else { s }
}

/// Labelled linear ticks covering `[lo, hi]`.
pub(crate) fn linear(lo: f64, hi: f64, target: usize) -> Vec<Tick> {
    let vals = nice_ticks(lo, hi, target);
    let step = if vals.len() > 1 { vals[1] - vals[0] } else { nice_step((hi - lo).abs() / target.max(1) as f64) };
    let mag = vals.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    vals.into_iter().map(|v| Tick { value: v, label: Some(format_scaled(v, step, mag)) }).collect()
}

/// Ticks for a log axis over `[lo, hi]` (`0 < lo < hi`): decades labelled, 2..9 as minor ticks; with
/// less than two decades in view, 2 and 5 (or all of 1..9) are labelled too, and for very narrow ranges
/// linear ticks are used.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<Tick> {
    log(lo, hi)
}

pub(crate) fn log(lo: f64, hi: f64) -> Vec<Tick> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return Vec::new();
    }
    let e0 = lo.log10().floor() as i32;
    let e1 = hi.log10().ceil() as i32;
    if e1 - e0 > 60 {
        return Vec::new();
    }
    let mut cands = Vec::new();
    for e in e0..=e1 {
        let base = 10f64.powi(e);
        for m in 1..=9 {
            let v = m as f64 * base;
            if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                cands.push((m, v, base));
            }
        }
    }
    let count = |set: &[i32]| cands.iter().filter(|(m, _, _)| set.contains(m)).count();
    let labelled: &[i32] = if count(&[1]) >= 3 {
        &[1]
    } else if count(&[1, 2, 5]) >= 3 {
        &[1, 2, 5]
    } else if count(&[1, 2, 3, 4, 5, 6, 7, 8, 9]) >= 3 {
        &[1, 2, 3, 4, 5, 6, 7, 8, 9]
    } else {
        return linear(lo, hi, 4);
    };
    let minor_too = cands.len() <= 60;
    cands
        .into_iter()
        .filter(|(m, _, _)| minor_too || labelled.contains(m))
        .map(|(m, v, base)| Tick { value: v, label: labelled.contains(&m).then(|| format_tick(v, base)) })
        .collect()
}

/// Labels for category values (bar charts): printed with as few decimals as tell them apart.
pub(crate) fn labels_for(values: &[f64]) -> Vec<String> {
    for dec in 0..=6 {
        let labels: Vec<String> = values.iter().map(|v| format!("{v:.dec$}")).collect();
        let mut sorted = labels.clone();
        sorted.dedup();
        if sorted.len() == labels.len() {
            return labels;
        }
    }
    values.iter().map(|v| format!("{v}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(t: &[Tick]) -> Vec<&str> {
        t.iter().filter_map(|t| t.label.as_deref()).collect()
    }

    #[test]
    fn nice_linear_ticks() {
        assert_eq!(nice_ticks(0.0, 0.87, 5), vec![0.0, 0.2, 0.4, 0.6, 0.8]);
        assert_eq!(nice_ticks(0.0, 100.0, 5), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(nice_ticks(-1.0, 1.0, 4), vec![-1.0, -0.5, 0.0, 0.5, 1.0]);
        assert_eq!(nice_ticks(3.0, 3.0, 5), vec![3.0]);
        assert!(nice_ticks(f64::NAN, 1.0, 5).is_empty());
        assert_eq!(labels(&linear(0.0, 0.87, 5)), ["0", "0.2", "0.4", "0.6", "0.8"]);
        assert_eq!(labels(&linear(0.0, 50_000.0, 5)), ["0", "10k", "20k", "30k", "40k", "50k"]);
        assert_eq!(labels(&linear(0.0, 2.5e6, 5)), ["0", "0.5M", "1.0M", "1.5M", "2.0M", "2.5M"]);
        assert_eq!(labels(&linear(-0.3, 0.3, 6)), ["-0.3", "-0.2", "-0.1", "0", "0.1", "0.2", "0.3"]);
        assert_eq!(nice_step(0.0), 1.0);
    }

    #[test]
    fn log_axis_ticks() {
        let t = log(80.0, 120_000.0);
        assert_eq!(labels(&t), ["100", "1k", "10k", "100k"]);
        assert!(t.iter().any(|t| t.value == 200.0 && t.label.is_none()));
        assert_eq!(labels(&log(300.0, 6000.0)), ["500", "1k", "2k", "5k"]);
        assert_eq!(labels(&log(0.01, 1.0)), ["0.01", "0.1", "1"]);
        assert!(!log(1000.0, 1100.0).is_empty());
        assert!(log(0.0, 10.0).is_empty());
    }
}
