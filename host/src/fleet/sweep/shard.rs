//! Sweeps past one machine: `fleet sweep ... --shard I/N` runs the I-th of N disjoint slices of a
//! sweep's points (point `k` belongs to shard `k mod N`, so every shard gets cheap and expensive
//! points alike) and writes `partial.json`; `fleet merge DIR... --out OUT` checks that the
//! partials are the N shards of one sweep, each once, and writes exactly the files a one-machine
//! sweep writes (the same bytes, given the same `--out`; tested). docs/SWEEPS.md has worked
//! examples as a Kubernetes Indexed Job and a Slurm job array.
//!
//! `partial.json` (format `brokerlab-sweep-shard/2`): the shard and shard count, the number of
//! points of the whole sweep, a digest naming the sweep by what decides its results (the
//! scenario's bytes, the swept parameter, every point's configuration and the engine: not the
//! command line, so `--threads`, `-q`, `--max-memory` or the scenario's path may differ between
//! shards), each point's value and router, the arguments as given, the inputs, the scenario's
//! name, the swept parameter, the engine, this shard's points with their indices, and a SHA-256
//! of those points. `fleet merge` recomputes that digest and checks every point's value, router
//! and swept field against the plan: a point edited after the run is refused. This is a check of
//! integrity (damage, a hand edit, a mixed-up file), not of origin: whoever edits a point can
//! recompute the digest.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use brokerlab_core::fleet::RouterKind;

use crate::error::{CliError, CliResult};
use crate::fleet::run::summary::EngineKind;
use crate::fleet::sweep::{self, Point, SweepParam, SweepSummary};
use crate::provenance::{Input, Provenance};

/// The partial file's format tag.
pub const FORMAT: &str = "brokerlab-sweep-shard/2";
/// The partial file's name in a shard's `--out`.
pub const FILE: &str = "partial.json";
/// Most shards of one sweep.
pub const MAX_SHARDS: usize = 100_000;

/// `--shard I/N`: the I-th (0-based, as `JOB_COMPLETION_INDEX`) of N slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

impl Shard {
    /// Whether point `k` of the sweep is this shard's.
    pub fn owns(&self, k: usize) -> bool {
        k % self.count == self.index
    }
}

/// Parses `I/N` (clap value parser).
pub fn parse_shard(s: &str) -> Result<Shard, String> {
    let bad = || format!("expected I/N with N from 1 to {MAX_SHARDS} and I from 0 to N-1 (0-based), got {s:?}");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (index, count): (usize, usize) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if count == 0 || count > MAX_SHARDS || index >= count {
        return Err(bad());
    }
    Ok(Shard { index, count })
}

/// One shard's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Partial {
    /// [`FORMAT`].
    pub format: String,
    /// Digest naming the sweep by what decides its results: equal for every shard of one sweep.
    pub sweep: String,
    /// Every point of the sweep: its value and router, by index.
    pub plan: Vec<(f64, RouterKind)>,
    /// This shard.
    pub shard: usize,
    /// Number of shards.
    pub shards: usize,
    /// Points of the whole sweep.
    pub points_total: usize,
    /// The shard's command-line arguments (after `brokerlab`).
    pub args: Vec<String>,
    /// The inputs and their SHA-256.
    pub inputs: Vec<Input>,
    /// The scenario's name (plot titles).
    pub scenario_name: String,
    /// The swept parameter.
    pub param: SweepParam,
    /// The engine (`fifo` or `batched`).
    pub engine: EngineKind,
    /// This shard's points: (index in the sweep, point).
    pub points: Vec<(usize, serde_json::Value)>,
    /// SHA-256 of `points` as serialized here (compact JSON), lowercase hex.
    pub points_sha256: String,
}

/// What names a sweep in its shards: the digest of what decides its results, and the plan.
#[derive(Debug, Clone)]
pub struct SweepId {
    digest: String,
    plan: Vec<(f64, RouterKind)>,
}

/// The [`SweepId`] of a sweep of `param` over `specs` on the inputs `inputs` (their bytes'
/// SHA-256, not their paths) under `engine` (None: FIFO), counting SLO goodput under `slo`.
pub fn sweep_id(
    inputs: &[Input],
    param: SweepParam,
    engine: Option<&brokerlab_core::fleet::BatchedConfig>,
    specs: &[sweep::PointSpec],
    slo: Option<brokerlab_core::fleet::slo::Slo>,
) -> SweepId {
    let mut h = Sha256::new();
    for i in inputs {
        h.update(i.sha256.as_deref().unwrap_or("-").as_bytes());
        h.update([0]);
    }
    // every configuration field (Debug prints them all, floats exactly)
    h.update(format!("{param}\0{engine:?}\0").as_bytes());
    for p in specs {
        h.update(format!("{p:?}\0").as_bytes());
    }
    // hashed only when given, so a sweep without an SLO keeps the digest it always had
    if let Some(s) = slo {
        h.update(format!("slo {s:?}\0").as_bytes());
    }
    SweepId { digest: hex(&h.finalize()), plan: specs.iter().map(|p| (p.value, p.cfg.router)).collect() }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a shard's points as `partial.json` holds them.
fn points_sha256(points: &[(usize, serde_json::Value)]) -> String {
    // serializing a Value cannot fail (string keys only)
    let text = serde_json::to_string(points).unwrap_or_default();
    hex(&Sha256::digest(text.as_bytes()))
}

/// The arguments with `--shard` removed and `--out` set to `out`: the command a one-machine sweep
/// into `out` would have been.
fn one_machine_args(args: &[String], out: &Path) -> Vec<String> {
    let mut v = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--shard" => {
                it.next();
            }
            "--out" => {
                it.next();
                v.push("--out".into());
                v.push(out.display().to_string());
            }
            _ if a.starts_with("--shard=") => {}
            _ if a.starts_with("--out=") => v.push(format!("--out={}", out.display())),
            _ => v.push(a.clone()),
        }
    }
    v
}

/// Writes a shard's `partial.json` into `dir`.
#[allow(clippy::too_many_arguments)]
pub fn write_partial<P: Serialize>(
    dir: &Path,
    shard: Shard,
    id: SweepId,
    prov: &Provenance,
    scenario_name: &str,
    param: SweepParam,
    engine: EngineKind,
    points: &[(usize, P)],
) -> CliResult<()> {
    let args: Vec<String> = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    let points = points
        .iter()
        .map(|(k, p)| serde_json::to_value(p).map(|v| (*k, v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CliError::failure(format!("a sweep point does not serialize: {e}")))?;
    let partial = Partial {
        format: FORMAT.into(),
        sweep: id.digest,
        shard: shard.index,
        shards: shard.count,
        points_total: id.plan.len(),
        plan: id.plan,
        points_sha256: points_sha256(&points),
        args,
        inputs: prov.inputs.clone(),
        scenario_name: scenario_name.into(),
        param,
        engine,
        points,
    };
    let text = serde_json::to_string(&partial).map_err(|e| CliError::failure(format!("partial.json: {e}")))?;
    sweep::write_file(dir, FILE, text.as_bytes())
}

fn read_partial(dir: &Path) -> CliResult<Partial> {
    let path = dir.join(FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| CliError::bad_input(format!("{}: cannot read a shard's result: {e}", path.display())))?;
    let p: Partial = serde_json::from_str(&text).map_err(|e| {
        CliError::bad_input(format!("{}: not a shard's partial.json ({e}); expected {FORMAT}", path.display()))
    })?;
    if p.format != FORMAT {
        return Err(CliError::bad_input(format!("{}: format {:?}, expected {FORMAT:?}", path.display(), p.format)));
    }
    Ok(p)
}

/// The merged sweep: the points in order and what a one-machine sweep would have recorded.
pub struct Merged<P> {
    /// Every point of the sweep, in order.
    pub points: Vec<P>,
    /// Provenance as the one-machine sweep into `out` would have written it.
    pub provenance: Provenance,
    /// Scenario name.
    pub scenario_name: String,
    /// Swept parameter.
    pub param: SweepParam,
}

/// The engine of the sweep whose shards are in `dirs` (`fifo` or `batched`), after checking them.
pub fn read_all(dirs: &[PathBuf]) -> CliResult<Vec<(PathBuf, Partial)>> {
    if dirs.is_empty() {
        return Err(CliError::bad_input("fleet merge: give the shards' output directories"));
    }
    let parts: Vec<(PathBuf, Partial)> =
        dirs.iter().map(|d| read_partial(d).map(|p| (d.clone(), p))).collect::<CliResult<_>>()?;
    let (d0, first) = &parts[0];
    for (d, p) in &parts[1..] {
        if p.sweep != first.sweep || p.shards != first.shards || p.points_total != first.points_total {
            return Err(CliError::bad_input(format!(
                "{}: a shard of another sweep than {} (a different scenario, parameter, values, engine, SLO or \
                 shard count)",
                d.display(),
                d0.display()
            )));
        }
    }
    for (d, p) in &parts {
        check_points(d, p)?;
    }
    let mut seen = vec![None::<&Path>; first.shards];
    for (d, p) in &parts {
        match seen.get_mut(p.shard) {
            Some(Some(other)) => {
                return Err(CliError::bad_input(format!(
                    "{} and {}: both hold shard {}/{}",
                    other.display(),
                    d.display(),
                    p.shard,
                    p.shards
                )));
            }
            Some(slot) => *slot = Some(d),
            None => return Err(CliError::bad_input(format!("{}: shard {} of {}", d.display(), p.shard, p.shards))),
        }
    }
    let missing: Vec<String> =
        seen.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| i.to_string()).collect();
    if !missing.is_empty() {
        return Err(CliError::bad_input(format!(
            "shard(s) {} of {} missing: give every shard's directory",
            missing.join(", "),
            first.shards
        )));
    }
    Ok(parts)
}

/// Checks a shard's points against its digest and its plan: each point's value and router, and
/// the swept field of its configuration (`capacity`, `alpha`, `stale`, `pods`) equal to the
/// value. A mismatch is exit 2 naming the file and the point.
fn check_points(dir: &Path, p: &Partial) -> CliResult<()> {
    let path = dir.join(FILE);
    let bad = |msg: String| CliError::bad_input(format!("{}: {msg}", path.display()));
    if p.plan.len() != p.points_total {
        return Err(bad(format!("a plan of {} points for {} points", p.plan.len(), p.points_total)));
    }
    if points_sha256(&p.points) != p.points_sha256 {
        return Err(bad(
            "its points do not match their SHA-256 (points_sha256): the file was changed after the sweep wrote it; \
             rerun the shard (the digest checks integrity, not origin: it does not prove who wrote the file)"
                .into(),
        ));
    }
    // rate: the workload's, not a field of the fleet
    let field = p.param.summary_field();
    for (k, v) in &p.points {
        let Some(&(value, router)) = p.plan.get(*k) else { continue }; // reported by `merge`
        let router_ok = serde_json::to_value(router).is_ok_and(|r| v.get("router") == Some(&r));
        let value_ok =
            v.get("value").and_then(serde_json::Value::as_f64).is_some_and(|x| x.to_bits() == value.to_bits());
        let swept_ok = field.is_none_or(|f| v.get(f).is_none_or(|x| x.as_f64() == Some(value)));
        if !(router_ok && value_ok && swept_ok) {
            return Err(bad(format!(
                "point {k} is not the sweep's point {k} ({} = {value}, router {router}): it says value {}, {} {}, \
                 router {}",
                p.param,
                v.get("value").unwrap_or(&serde_json::Value::Null),
                field.unwrap_or("value"),
                field.and_then(|f| v.get(f)).unwrap_or(&serde_json::Value::Null),
                v.get("router").unwrap_or(&serde_json::Value::Null)
            )));
        }
    }
    Ok(())
}

/// Puts the shards' points back in order as `P`.
pub fn merge<P: serde::de::DeserializeOwned>(parts: Vec<(PathBuf, Partial)>, out: &Path) -> CliResult<Merged<P>> {
    let first = parts[0].1.clone();
    let mut slots: Vec<Option<P>> = (0..first.points_total).map(|_| None).collect();
    for (d, p) in parts {
        for (k, v) in p.points {
            let point: P = serde_json::from_value(v)
                .map_err(|e| CliError::bad_input(format!("{}: point {k}: {e}", d.join(FILE).display())))?;
            match slots.get_mut(k) {
                Some(slot @ None) if k % first.shards == p.shard => *slot = Some(point),
                _ => {
                    return Err(CliError::bad_input(format!(
                        "{}: point {k} is not shard {}'s, or appears twice",
                        d.join(FILE).display(),
                        p.shard
                    )));
                }
            }
        }
    }
    let points = slots
        .into_iter()
        .enumerate()
        .map(|(k, p)| p.ok_or_else(|| CliError::bad_input(format!("point {k} is missing from its shard"))))
        .collect::<CliResult<Vec<P>>>()?;
    let args = one_machine_args(&first.args, out);
    let no_date = args.iter().any(|a| a == "--no-date");
    let mut provenance = Provenance::new(&args, (!no_date).then(crate::provenance::now_utc));
    provenance.inputs = first.inputs;
    Ok(Merged { points, provenance, scenario_name: first.scenario_name, param: first.param })
}

/// Writes the files of a sweep of either engine (shared by `fleet sweep` and `fleet merge`).
pub fn write_points<S: SweepSummary>(
    out: &Path,
    name: &str,
    param: SweepParam,
    points: &[Point<S>],
    prov: &Provenance,
) -> CliResult<String> {
    sweep::write_file(out, "points.csv", S::csv(points)?.as_bytes())?;
    sweep::write_file(out, "points.provenance.json", prov.sidecar_json().as_bytes())?;
    #[derive(Serialize)]
    struct Points<'a, S: Serialize> {
        points: &'a [Point<S>],
    }
    sweep::write_file(out, "points.json", prov.json_with(&Points { points }).as_bytes())?;
    let written = S::plots(out, name, param, points)?;
    Ok(format!(
        "{}wrote {}/points.csv (+ points.provenance.json), points.json{written}\n",
        S::table(param, points),
        out.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_and_arguments() {
        assert_eq!(parse_shard("0/3"), Ok(Shard { index: 0, count: 3 }));
        assert_eq!(parse_shard("2/3"), Ok(Shard { index: 2, count: 3 }));
        for bad in ["3/3", "1/0", "-1/3", "a/b", "1", "0/100001"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
        let s = Shard { index: 1, count: 3 };
        assert_eq!((0..7).filter(|&k| s.owns(k)).collect::<Vec<_>>(), [1, 4]);
        let args: Vec<String> =
            ["fleet", "sweep", "sc.toml", "--shard", "1/3", "--out", "p1", "--no-date"].map(String::from).into();
        assert_eq!(
            one_machine_args(&args, Path::new("all")),
            ["fleet", "sweep", "sc.toml", "--out", "all", "--no-date"]
        );
        let eq: Vec<String> = ["sweep", "--shard=0/2", "--out=x"].map(String::from).into();
        assert_eq!(one_machine_args(&eq, Path::new("y")), ["sweep", "--out=y"]);
    }
}
