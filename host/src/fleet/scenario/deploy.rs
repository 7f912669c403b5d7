//! The deployment features' inputs that are text on the command line and in scenarios: the
//! offload tier's CPU weight (exact thousandths) and the SLOs of SLO goodput (exact ns), read by
//! the rule of docs/MODEL.md ("Trace formats": floor(v x 10^k + 1/2) of a decimal).

use brokerlab_core::fleet::slo::Slo;

use crate::error::{CliError, CliResult};

/// A decimal text as an exact (integer part, fraction digits) pair, or why not.
fn decimal(text: &str) -> Result<(u128, String), &'static str> {
    let t = text.trim();
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) || int.len() > 20 {
        return Err("expected a non-negative decimal number");
    }
    let i = if int.is_empty() { 0 } else { int.parse::<u128>().map_err(|_| "expected a smaller number")? };
    Ok((i, frac.to_string()))
}

/// floor(v x 10^k + 1/2) of the decimal `text`, exactly.
pub fn scaled(text: &str, k: u32) -> Result<u64, &'static str> {
    let (int, frac) = decimal(text)?;
    let mut v = int.checked_mul(10u128.pow(k)).ok_or("expected a smaller number")?;
    let fd: Vec<u8> = frac.bytes().map(|b| b - b'0').collect();
    for (i, &d) in fd.iter().enumerate().take(k as usize) {
        v += d as u128 * 10u128.pow(k - 1 - i as u32);
    }
    // round half up on the first dropped digit
    if fd.get(k as usize).is_some_and(|&d| d >= 5) {
        v += 1;
    }
    u64::try_from(v).map_err(|_| "expected a smaller number")
}

/// `--cpu-tier-weight`: a decimal in [0, 1] with at most three digits after the point, in
/// thousandths.
pub fn parse_weight_milli(text: &str) -> Result<u32, &'static str> {
    let why = "expected a decimal between 0 and 1 with at most three digits after the point";
    let (_, frac) = decimal(text).map_err(|_| why)?;
    if frac.trim_end_matches('0').len() > 3 {
        return Err(why);
    }
    let milli = scaled(text, 3).map_err(|_| why)?;
    if milli > 1000 {
        return Err(why);
    }
    Ok(milli as u32)
}

/// The SLOs of `--slo-ttft-ms` and `--slo-tpot-ms` (None when neither is given).
pub fn slo(ttft_ms: Option<&str>, tpot_ms: Option<&str>) -> CliResult<Option<Slo>> {
    let ns = |flag: &str, v: Option<&str>| -> CliResult<Option<u64>> {
        v.map(|t| scaled(t, 6).map_err(|why| CliError::bad_input(format!("{flag} {t:?}: {why} (milliseconds)"))))
            .transpose()
    };
    let ttft_ns = ns("--slo-ttft-ms", ttft_ms)?;
    let tpot_ns = ns("--slo-tpot-ms", tpot_ms)?;
    Ok((ttft_ns.is_some() || tpot_ns.is_some()).then_some(Slo { ttft_ns, tpot_ns }))
}

/// The SLOs of a scenario's `[slo]` table (`ttft_ms`, `tpot_ms`: numbers of milliseconds, read
/// exactly as the flags' text is, to the nanosecond); errors name `origin` and the key.
pub fn slo_of_toml(ttft_ms: Option<f64>, tpot_ms: Option<f64>, origin: &str) -> CliResult<Slo> {
    let ns = |key: &str, v: Option<f64>| -> CliResult<Option<u64>> {
        v.map(|x| {
            // Display never writes an exponent: 0.5 -> "0.5", 2000.0 -> "2000"
            let text = format!("{x}");
            scaled(&text, 6)
                .map_err(|why| CliError::bad_input(format!("{origin}: `slo.{key}` = {text:?}: {why} (milliseconds)")))
        })
        .transpose()
    };
    let ttft_ns = ns("ttft_ms", ttft_ms)?;
    let tpot_ns = ns("tpot_ms", tpot_ms)?;
    if ttft_ns.is_none() && tpot_ns.is_none() {
        return Err(CliError::bad_input(format!(
            "{origin}: `slo`: expected ttft_ms, tpot_ms or both (an empty [slo] sets no SLO)"
        )));
    }
    Ok(Slo { ttft_ns, tpot_ns })
}

/// The SLOs of a run of a scenario: each of `--slo-ttft-ms` / `--slo-tpot-ms` given overrides
/// the scenario's `[slo]` key (`scenario`); None when neither sets any.
pub fn slo_with(ttft_ms: Option<&str>, tpot_ms: Option<&str>, scenario: Option<Slo>) -> CliResult<Option<Slo>> {
    let flags = slo(ttft_ms, tpot_ms)?;
    Ok(match (flags, scenario) {
        (f, None) => f,
        (None, s) => s,
        (Some(f), Some(s)) => Some(Slo { ttft_ns: f.ttft_ns.or(s.ttft_ns), tpot_ns: f.tpot_ns.or(s.tpot_ns) }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_read_exactly() {
        assert_eq!(scaled("20", 6), Ok(20_000_000));
        assert_eq!(scaled("0.0000005", 6), Ok(1));
        assert_eq!(scaled("0.0000004", 6), Ok(0));
        assert_eq!(scaled("1.5", 6), Ok(1_500_000));
        assert!(scaled("-1", 6).is_err());
        assert!(scaled("x", 6).is_err());
        assert!(scaled(".", 6).is_err());
        assert_eq!(parse_weight_milli("0.8"), Ok(800));
        assert_eq!(parse_weight_milli("1"), Ok(1000));
        assert_eq!(parse_weight_milli("0.125"), Ok(125));
        assert_eq!(parse_weight_milli("0.1250"), Ok(125));
        assert!(parse_weight_milli("0.1255").is_err());
        assert!(parse_weight_milli("1.001").is_err());
    }

    #[test]
    fn a_scenario_slo_is_read_exactly_and_each_flag_overrides_its_key() {
        let s = slo_of_toml(Some(2000.0), Some(0.5), "f.toml").unwrap();
        assert_eq!(s, Slo { ttft_ns: Some(2_000_000_000), tpot_ns: Some(500_000) });
        let e = slo_of_toml(Some(-1.0), None, "f.toml").unwrap_err().to_string();
        assert!(e.contains("f.toml") && e.contains("slo.ttft_ms"), "{e}");
        assert!(slo_of_toml(None, None, "f.toml").unwrap_err().to_string().contains("`slo`"));
        let both = slo_with(Some("100"), None, Some(s)).unwrap().unwrap();
        assert_eq!(both, Slo { ttft_ns: Some(100_000_000), tpot_ns: Some(500_000) });
        assert_eq!(slo_with(None, None, Some(s)).unwrap(), Some(s));
        assert_eq!(slo_with(None, None, None).unwrap(), None);
    }
}
