//! `fleet run --rate-scale X`: every arrival rate of a scenario times X, exact in integer
//! milli-requests/s (a rate that would need rounding is refused, never rounded).

use brokerlab_core::fleet::loadgen::LoadKind;

use super::Scenario;
use crate::error::{CliError, CliResult};

/// `rate` (milli-requests/s) times num / den, when exact.
fn scaled(rate: u64, (num, den): (u64, u64)) -> Option<u64> {
    let v = rate as u128 * num as u128;
    v.is_multiple_of(den as u128).then(|| v / den as u128).and_then(|v| u64::try_from(v).ok())
}

/// Scales every rate of `sc` (the workload's rate, burst and stages; `[load]`'s stages) by
/// num / den; `shown` is the flag's value as given, for messages.
pub fn apply(sc: &mut Scenario, x: (u64, u64), shown: &str) -> CliResult<()> {
    let flag = format!("--rate-scale {shown}");
    let one = |what: String, rate: u64| {
        scaled(rate, x).ok_or_else(|| {
            CliError::bad_input(format!(
                "{flag}: {what} {} req/s x {shown} is not a whole number of milli-requests/s (choose a scale that keeps it exact)",
                rate as f64 / 1e3
            ))
        })
    };
    if let Some(l) = sc.load.as_mut() {
        if l.kind == LoadKind::Concurrent {
            return Err(CliError::bad_input(format!(
                "{flag}: {}: load.type concurrent has no rates to scale (its clients send as requests end)",
                sc.origin
            )));
        }
        let n = l.stages_len as usize;
        for (i, st) in l.stages[..n].iter_mut().enumerate() {
            st.rate_milli_per_s = one(format!("load.stages[{}].rate_per_s", i + 1), st.rate_milli_per_s)?;
        }
        l.validate().map_err(|e| CliError::bad_input(format!("{flag}: {}: {e}", sc.origin)))?;
        return Ok(());
    }
    let w = &mut sc.workload;
    if w.rate_milli_per_s == 0 && w.stages_len == 0 {
        return Err(CliError::bad_input(format!(
            "{flag}: {}: the workload has no arrival rate (every request arrives at t = 0)",
            sc.origin
        )));
    }
    w.rate_milli_per_s = one("workload.rate_per_s".into(), w.rate_milli_per_s)?;
    w.burst_rate_milli_per_s = one("workload.burst.rate_per_s".into(), w.burst_rate_milli_per_s)?;
    let n = w.stages_len as usize;
    for (i, st) in w.stages[..n].iter_mut().enumerate() {
        st.rate_milli_per_s = one(format!("workload.stages[{}].rate_per_s", i + 1), st.rate_milli_per_s)?;
    }
    w.validate().map_err(|e| CliError::bad_input(format!("{flag}: {}: {e}", sc.origin)))
}

#[cfg(test)]
mod tests {
    use super::scaled;

    #[test]
    fn exact_or_refused() {
        assert_eq!(scaled(20_000, (15, 10)), Some(30_000));
        assert_eq!(scaled(1, (5, 10)), None);
        assert_eq!(scaled(3, (1, 3)), Some(1));
        assert_eq!(scaled(0, (7, 10)), Some(0));
    }
}
