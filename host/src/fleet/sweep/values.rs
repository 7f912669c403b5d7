//! The values of a `fleet sweep --param P`: parsed from --values or --from/--to, checked, and
//! turned into one fleet configuration (and workload) per point.

use brokerlab_core::fleet::FleetConfig;

use crate::error::{CliError, CliResult};
use crate::fleet::cli::args::SweepArgs;
use crate::fleet::sweep::SweepParam;
use crate::fleet::{scenario, sweep};

fn capacity_value(flag: &str, s: &str, fit: usize, hot: u64) -> CliResult<u64> {
    let bad = |why: &str| CliError::bad_input(format!("{flag}: capacity value `{s}`: {why}"));
    let form = "expected a number of blocks, fit, hot/K or hot*K (K a whole number >= 1)";
    let k = |t: &str| match t.parse::<u64>() {
        Ok(0) => Err(bad("K must be at least 1")),
        Ok(k) => Ok(k),
        Err(_) => Err(bad(form)),
    };
    let v = if s == "fit" {
        fit as u64
    } else if let Some(t) = s.strip_prefix("hot/") {
        hot / k(t)?
    } else if let Some(t) = s.strip_prefix("hot*") {
        hot.checked_mul(k(t)?).ok_or_else(|| bad("hot*K overflows 64 bits"))?
    } else if s == "hot" {
        hot
    } else {
        s.parse().map_err(|_| bad(form))?
    };
    let max = brokerlab_core::fleet::limits::MAX_POD_BLOCKS as u64;
    match v {
        0 => Err(bad(&format!("is 0 blocks (hot set {hot} blocks, fit {fit} blocks); expected at least 1 block"))),
        v if v > max => {
            Err(bad(&format!("is {v} blocks; expected at most {max} (MAX_POD_BLOCKS: slot indices are u32)")))
        }
        v => Ok(v),
    }
}

fn num_value(flag: &str, s: &str) -> CliResult<f64> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| CliError::bad_input(format!("{flag} `{s}`: expected a number")))
}

/// A whole, non-negative sweep value (stale, pods): never rounded or clamped silently.
fn whole_value(flag: &str, param: &str, v: f64) -> CliResult<f64> {
    if v >= 0.0 && v.fract() == 0.0 && v <= u32::MAX as f64 {
        Ok(v)
    } else {
        Err(CliError::bad_input(format!("{flag} {}: --param {param} takes whole numbers >= 0", scenario::num(v))))
    }
}

/// One sweep value: (parameter value, workload index, fleet configuration).
pub type SweepValue = (f64, usize, FleetConfig);

/// A sweep's points: the workloads generated here, each point's (value, workload index, config),
/// and the parameter (`--param`, checked here).
pub struct Values {
    /// The workloads.
    pub gens: Vec<scenario::Generated>,
    /// The points.
    pub values: Vec<SweepValue>,
    /// The swept parameter.
    pub param: SweepParam,
}

/// Parameter values of a sweep, as (value, workload index, config) with workloads generated here.
pub fn sweep_values(sc: &scenario::Scenario, a: &SweepArgs) -> CliResult<Values> {
    let base = sc.fleet;
    // an unknown --param is reported where it always was: after the range flags' checks
    let param = SweepParam::from_flag(&a.param);
    let from = if a.from_fit { Some("fit".to_string()) } else { a.from.clone() };
    if a.steps < 2 {
        return Err(CliError::bad_input(format!("--steps {}: expected at least 2 points", a.steps)));
    }
    let range = |kind: &str| -> CliResult<Option<(String, String)>> {
        match (&from, &a.to) {
            (Some(f), Some(t)) if a.values.is_empty() => Ok(Some((f.clone(), t.clone()))),
            (None, None) if !a.values.is_empty() => Ok(None),
            _ => Err(CliError::bad_input(format!("--param {kind}: give --values, or both --from and --to"))),
        }
    };
    if matches!(param, Ok(SweepParam::Rate)) {
        let milli = |flag: &str, v: f64| {
            scenario::rate_milli(v)
                .map_err(|e| CliError::bad_input(format!("{flag} {}: expected {e}", scenario::num(v))))
        };
        let millis: Vec<u64> = match range("rate")? {
            None => a
                .values
                .iter()
                .map(|v| num_value("--values", v).and_then(|x| milli("--values", x)))
                .collect::<CliResult<_>>()?,
            Some((f, t)) => {
                let (f, t) = (num_value("--from", &f)?, num_value("--to", &t)?);
                let (mf, mt) = (milli("--from", f)? as f64, milli("--to", t)? as f64);
                // Range points are rounded to the resolution (0.001 requests/s); the value
                // reported is the rate run.
                let mut v: Vec<u64> = sweep::linear(mf, mt, a.steps).into_iter().map(|x| x.round() as u64).collect();
                v.dedup();
                v
            }
        };
        let mut gens = Vec::new();
        let mut out = Vec::new();
        for (i, m) in millis.iter().enumerate() {
            let mut w = sc.workload;
            w.rate_milli_per_s = *m;
            w.validate().map_err(|e| CliError::bad_input(format!("--param rate value {}: {e}", *m as f64 / 1000.0)))?;
            gens.push(scenario::Generated::with_origin(w, &sc.origin)?);
            out.push((*m as f64 / 1000.0, i, base));
        }
        return Ok(Values { gens, values: out, param: SweepParam::Rate });
    }
    let g = scenario::Generated::with_origin(sc.workload, &sc.origin)?;
    let param = param?;
    // over [[fleet.pool]] tables: pods are each pool's, and a capacity only moves the pools
    // that set none (docs/MODEL.md, "Heterogeneous pools"); a sweep that would move nothing is
    // refused rather than written as points that differ in their label only
    if !base.pools.is_empty() {
        if param == SweepParam::Pods {
            return Err(CliError::bad_input(format!(
                "--param pods: {} has [[fleet.pool]] tables, whose pod counts are each pool's `pods` (fleet.pool[i].pods); sweep pods over a scenario without pools, or write one scenario per pool size",
                sc.origin
            )));
        }
        if param == SweepParam::Capacity && base.pools.iter().all(|p| p.capacity_blocks.is_some()) {
            return Err(CliError::bad_input(format!(
                "--param capacity: every [[fleet.pool]] of {} sets its own `capacity` (fleet.pool[i].capacity), so the fleet's capacity moves no pod; leave `capacity` out of the pools the sweep should move",
                sc.origin
            )));
        }
    }
    let vals: Vec<f64> = match param {
        SweepParam::Capacity => {
            let fit = g.distinct_blocks();
            let hot = sc.workload.hot_set_blocks();
            match range("capacity")? {
                None => a
                    .values
                    .iter()
                    .map(|v| capacity_value("--values", v, fit, hot).map(|x| x as f64))
                    .collect::<CliResult<_>>()?,
                Some((f, t)) => {
                    let (f, t) = (capacity_value("--from", &f, fit, hot)?, capacity_value("--to", &t, fit, hot)?);
                    sweep::geometric(f as f64, t as f64, a.steps).into_iter().map(|x| x as f64).collect()
                }
            }
        }
        SweepParam::Alpha
        | SweepParam::Stale
        | SweepParam::Pods
        | SweepParam::CpuCapacity
        | SweepParam::PrefillPods => {
            let p = param.name();
            match range(p)? {
                None => a
                    .values
                    .iter()
                    .map(|v| {
                        let x = num_value("--values", v)?;
                        if p == "alpha" { Ok(x) } else { whole_value("--values", p, x) }
                    })
                    .collect::<CliResult<_>>()?,
                Some((f, t)) => {
                    let (f, t) = (num_value("--from", &f)?, num_value("--to", &t)?);
                    if p == "alpha" {
                        sweep::linear(f, t, a.steps)
                    } else {
                        let (f, t) = (whole_value("--from", p, f)?, whole_value("--to", p, t)?);
                        let mut v: Vec<f64> = sweep::linear(f, t, a.steps).into_iter().map(f64::round).collect();
                        v.dedup();
                        v
                    }
                }
            }
        }
        // rate returned above; the report's own parameters are no flag values
        SweepParam::Rate | SweepParam::RagSorted => {
            return Err(CliError::bad_input(format!(
                "--param {param}: expected capacity, alpha, stale, pods, rate, cpu-capacity or prefill-pods"
            )));
        }
    };
    let mut out = Vec::new();
    for v in vals {
        let mut cfg = base;
        match param {
            SweepParam::Capacity => cfg.capacity_blocks = v as usize,
            SweepParam::Alpha => cfg.alpha = v,
            SweepParam::Stale => cfg = crate::fleet::run::with_view(cfg, |view| view.stale_delay = v as u32),
            // (the batched engine's offload tier reads it too: `engine::batched`, and the sweep
            // sets it exactly, 0 included)
            SweepParam::CpuCapacity => cfg = crate::fleet::run::with_fifo(cfg, |f| f.cpu_capacity_blocks = v as usize),
            // set per point with the batched engine's settings (`fleet sweep`)
            SweepParam::PrefillPods => {}
            _ => cfg.pods = v as usize,
        }
        cfg.validate().map_err(|e| CliError::bad_input(format!("--param {param} value {}: {e}", scenario::num(v))))?;
        out.push((v, 0, cfg));
    }
    Ok(Values { gens: vec![g], values: out, param })
}
