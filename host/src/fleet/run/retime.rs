//! `--speedup X`, `--start-at S`, `--max-requests N` of a trace replay: a request source that
//! retimes another's arrivals, exactly in integer ns (Dynamo's `arrival_speedup_ratio`).
//!
//! A request arriving at t (ns) with t >= S is fed at floor((t - S) x den / num), where X =
//! num / den exactly as written in decimal (2.5 = 5/2); requests before S are skipped; after N
//! fed requests the rest are skipped (the file is still read to its end). Order is kept: the map
//! is non-decreasing.

use brokerlab_core::fleet::{Error as CoreError, Request};

use super::source::RequestSource;
use crate::error::{CliError, CliResult};
use crate::fleet::input::trace::BytesRead;

/// Most decimal places of `--speedup` and `--start-at` (their values are exact rationals).
pub const MAX_DECIMALS: u32 = 9;

/// How a trace's arrivals are changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retime {
    /// Speed-up X = num / den (1/1: as recorded).
    pub num: u64,
    /// Denominator.
    pub den: u64,
    /// Requests before this arrival (ns) are skipped; the run's time 0 is here.
    pub start_at_ns: u64,
    /// Most requests fed (None: all).
    pub max_requests: Option<u64>,
}

impl Retime {
    /// No change.
    pub const NONE: Retime = Retime { num: 1, den: 1, start_at_ns: 0, max_requests: None };

    /// The new arrival of a request at `t`, None when it is skipped (before the start).
    pub fn arrival(&self, t: u64) -> Option<u64> {
        let t = t.checked_sub(self.start_at_ns)?;
        Some((t as u128 * self.den as u128 / self.num as u128).min(u64::MAX as u128) as u64)
    }
}

/// A positive decimal `s` (at most [`MAX_DECIMALS`] places) as an exact fraction (num, den).
pub fn parse_decimal(s: &str, flag: &str, positive: bool) -> CliResult<(u64, u64)> {
    let bad = || {
        CliError::bad_input(format!(
            "{flag} {s}: expected a {}decimal number with at most {MAX_DECIMALS} places (e.g. 2 or 0.5)",
            if positive { "positive " } else { "" }
        ))
    };
    let (int, frac) = s.trim().split_once('.').unwrap_or((s.trim(), ""));
    if (int.is_empty() && frac.is_empty()) || frac.len() > MAX_DECIMALS as usize {
        return Err(bad());
    }
    if !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let den = 10u64.pow(frac.len() as u32);
    let i: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| bad())? };
    let f: u64 = if frac.is_empty() { 0 } else { frac.parse().map_err(|_| bad())? };
    let num = i.checked_mul(den).and_then(|v| v.checked_add(f)).ok_or_else(bad)?;
    if positive && num == 0 {
        return Err(bad());
    }
    Ok((num, den))
}

/// `inner` with its arrivals retimed by `r`.
pub struct Retimed<'a> {
    /// The source.
    pub inner: &'a mut dyn RequestSource,
    /// The change.
    pub retime: Retime,
}

impl RequestSource for Retimed<'_> {
    fn feed(&mut self, sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>) -> CliResult<()> {
        let r = self.retime;
        let mut fed = 0u64;
        self.inner.feed(&mut |req| {
            if r.max_requests.is_some_and(|m| fed >= m) {
                return Ok(());
            }
            let Some(t) = r.arrival(req.arrival_ns) else { return Ok(()) };
            fed += 1;
            sink(&Request { arrival_ns: t, ..*req })
        })
    }

    fn restart_error(&self) -> Option<String> {
        self.inner.restart_error()
    }

    fn len_hint(&self) -> Option<u64> {
        match (self.inner.len_hint(), self.retime.max_requests) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn id_blocks(&self) -> u32 {
        self.inner.id_blocks()
    }

    fn bytes_read(&self) -> Option<BytesRead> {
        self.inner.bytes_read()
    }

    fn grow_into(&mut self, growth: &crate::mem::Growth) {
        self.inner.grow_into(growth);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact_fractions() {
        assert_eq!(parse_decimal("2", "--speedup", true).unwrap(), (2, 1));
        assert_eq!(parse_decimal("2.5", "--speedup", true).unwrap(), (25, 10));
        assert_eq!(parse_decimal("0.1", "--speedup", true).unwrap(), (1, 10));
        assert!(parse_decimal("0", "--speedup", true).is_err());
        assert!(parse_decimal("-1", "--speedup", true).is_err());
        assert!(parse_decimal("1e3", "--speedup", true).is_err());
        assert_eq!(parse_decimal("0", "--start-at", false).unwrap(), (0, 1));
    }

    #[test]
    fn arrivals_scale_exactly() {
        let r = Retime { num: 25, den: 10, start_at_ns: 1_000, max_requests: None };
        assert_eq!(r.arrival(999), None);
        assert_eq!(r.arrival(1_000), Some(0));
        // (3_501 - 1_000) x 10 / 25 = 1_000.4 -> 1_000
        assert_eq!(r.arrival(3_501), Some(1_000));
        // a tenth: 1 ns x 10 / 1 = 10 ns
        let slow = Retime { num: 1, den: 10, ..Retime::NONE };
        assert_eq!(slow.arrival(1), Some(10));
        assert_eq!(Retime::NONE.arrival(u64::MAX), Some(u64::MAX));
    }
}
