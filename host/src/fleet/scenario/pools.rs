//! `[[fleet.pool]]`: a heterogeneous fleet's pools (docs/MODEL.md, "Heterogeneous pools") as the
//! core's pool table. Each key a pool leaves out is the `[fleet]` / `[fleet.engine]` value, read
//! by the core when the fleet is built (so a flag that changes the fleet's value changes every
//! pool that does not set its own). A pool naming its own `profile` starts from that profile's
//! coefficients: the fleet's coefficient keys do not apply to it (as `--prefill-profile`).

use std::collections::BTreeMap;
use std::path::Path;

use brokerlab_core::fleet::{Pool, PoolRole};
use serde::Deserialize;

use super::engine::{EngineSettings, StepModel};
use super::schema::PoolToml;
use crate::error::{CliError, CliResult};

/// Where each `[[fleet.pool]]` table of a TOML text sits: per pool (in order) the line of its
/// first key and the line of each key (1-based), so that an error names `FILE:LINE`. Empty when
/// the text does not parse (then the parse error names the line itself).
#[derive(Debug, Clone, Default)]
pub struct PoolLines(Vec<(Option<usize>, BTreeMap<String, usize>)>);

/// Only `fleet.pool` of any TOML document, each value with its place in the text.
#[derive(Deserialize)]
struct SpannedDoc {
    #[serde(default)]
    fleet: Option<SpannedFleet>,
}

#[derive(Deserialize)]
struct SpannedFleet {
    #[serde(default)]
    pool: Option<Vec<BTreeMap<String, toml::Spanned<toml::Value>>>>,
}

impl PoolLines {
    /// The pools' lines in `text`.
    pub fn of(text: &str) -> Self {
        let line =
            |offset: usize| text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1;
        let Ok(doc) = toml::from_str::<SpannedDoc>(text) else { return PoolLines::default() };
        let pools = doc.fleet.and_then(|f| f.pool).unwrap_or_default();
        PoolLines(
            pools
                .iter()
                .map(|t| {
                    let keys: BTreeMap<String, usize> =
                        t.iter().map(|(k, v)| (k.clone(), line(v.span().start))).collect();
                    (keys.values().min().copied(), keys)
                })
                .collect(),
        )
    }

    /// The line of key `k` of pool `i` (0-based), else of the pool's first key.
    pub fn line(&self, i: usize, k: &str) -> Option<usize> {
        let (first, keys) = self.0.get(i)?;
        keys.get(k).copied().or(*first)
    }

    /// `origin:LINE` for key `k` of pool `i` (`origin` alone when the line is unknown).
    pub fn at(&self, origin: &str, i: usize, k: &str) -> String {
        match self.line(i, k) {
            Some(l) => format!("{origin}:{l}"),
            None => origin.to_string(),
        }
    }

    /// `origin:LINE` at the first pool (`origin` alone when unknown).
    pub fn at_first(&self, origin: &str) -> String {
        match self.0.first().and_then(|p| p.0) {
            Some(l) => format!("{origin}:{l}"),
            None => origin.to_string(),
        }
    }
}

/// A `--pools FILE`: `[[fleet.pool]]` tables and nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolsFileToml {
    #[serde(default)]
    fleet: Option<PoolsFleetToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolsFleetToml {
    #[serde(default)]
    pool: Option<Vec<PoolToml>>,
}

/// A `--pools FILE` as read: its name in messages, its pools and where they sit.
#[derive(Debug, Clone)]
pub struct PoolsFile {
    /// The file, as messages name it.
    pub origin: String,
    /// Its `[[fleet.pool]]` tables, in order.
    pub list: Vec<PoolToml>,
    /// Their lines.
    pub lines: PoolLines,
}

impl PoolsFile {
    /// Reads `path`: `[[fleet.pool]]` tables with the scenario's keys; any other key, table or a
    /// file without pools is exit 2 naming the file, the line and the key.
    pub fn read(path: &Path) -> CliResult<Self> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::bad_input(format!("--pools {origin}: cannot read: {e}")))?;
        Self::parse(&text, &origin)
    }

    /// Parses the text of a pools file named `origin`.
    pub fn parse(text: &str, origin: &str) -> CliResult<Self> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let t: PoolsFileToml = toml::from_str(text).map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
        let list = t.fleet.and_then(|f| f.pool).unwrap_or_default();
        if list.is_empty() {
            return Err(CliError::bad_input(format!(
                "{origin}: `fleet.pool`: expected at least one [[fleet.pool]] table (docs/MODEL.md, \"Heterogeneous pools\")"
            )));
        }
        let lines = PoolLines::of(text);
        if let Some(i) = list.iter().position(|p| p.pods == 0) {
            return Err(CliError::bad_input(format!(
                "{}: `fleet.pool[{}].pods` = \"0\": expected at least 1 pod",
                lines.at(origin, i, "pods"),
                i + 1
            )));
        }
        Ok(PoolsFile { origin: origin.to_string(), list, lines })
    }

    /// Pods of all its pools.
    pub fn pods(&self) -> usize {
        self.list.iter().map(|p| p.pods as usize).sum()
    }
}

/// The pool table of `list` over the fleet's engine settings `fleet`, each pool's engine checked
/// (errors name `ORIGIN:LINE: fleet.pool[i].key`, i 1-based, the line from `lines`). The table
/// lives for the rest of the process (the core's configuration borrows it: a few hundred bytes
/// per pool, once per scenario read).
pub fn table(list: &[PoolToml], fleet: &EngineSettings, origin: &str, lines: &PoolLines) -> CliResult<&'static [Pool]> {
    if list.is_empty() {
        return Err(CliError::bad_input(format!("{origin}: `fleet.pool`: expected at least one pool")));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let key = |k: &str| {
            let k = k.replace('-', "_");
            format!("{}: `fleet.pool[{}].{k}`", lines.at(origin, i, &k), i + 1)
        };
        let bad = |k: &str, expected: &str, got: &str| {
            CliError::bad_input(format!("{}: {got:?}: expected {expected}", key(k)))
        };
        if t.name.is_empty() {
            return Err(bad("name", "a non-empty name", &t.name));
        }
        if list[..i].iter().any(|o| o.name == t.name) {
            return Err(bad("name", "a name no other pool has", &t.name));
        }
        if t.pods == 0 {
            return Err(bad("pods", "at least 1 pod", "0"));
        }
        let role = match t.role.as_deref() {
            None => PoolRole::Aggregated,
            Some(r) => PoolRole::parse(r).ok_or_else(|| bad("role", "\"aggregated\", \"prefill\" or \"decode\"", r))?,
        };
        if t.capacity == Some(0) {
            return Err(bad("capacity", "at least 1 block", "0"));
        }
        let step_model = match t.step_model.as_deref() {
            None => None,
            Some(m) => Some(StepModel::parse(m).ok_or_else(|| bad("step_model", "\"linear\" or \"physics\"", m))?),
        };
        let coefficients = [t.t_overhead_ns, t.t_prefill_token_ns, t.t_decode_seq_ns, t.t_kv_token_ns];
        let own_cost = t.profile.is_some() || step_model.is_some() || coefficients.iter().any(Option::is_some);
        // The pool's settings: the fleet's without P/D, the pool's keys over them.
        let mut s = EngineSettings {
            prefill_pods: None,
            prefill_capacity: None,
            prefill_profile: None,
            pd_decider: None,
            pd_threshold_tokens: None,
            pd_link_bytes_per_s: None,
            pd_link_latency_ns: None,
            ..fleet.clone()
        };
        if t.profile.is_some() || step_model.is_some() {
            // its own profile's coefficients
            s.profile = None;
            s.step_model = None;
            s.t_overhead_ns = None;
            s.t_prefill_token_ns = None;
            s.t_decode_seq_ns = None;
            s.t_kv_token_ns = None;
            s.shared_kv_read = None;
        }
        let own = EngineSettings {
            profile: t.profile.clone(),
            step_model,
            max_num_seqs: t.max_num_seqs,
            max_num_batched_tokens: t.max_num_batched_tokens,
            t_overhead_ns: t.t_overhead_ns,
            t_prefill_token_ns: t.t_prefill_token_ns,
            t_decode_seq_ns: t.t_decode_seq_ns,
            t_kv_token_ns: t.t_kv_token_ns,
            cpu_capacity: t.cpu_capacity,
            pcie_bytes_per_s: t.pcie_bytes_per_s,
            kv_bytes_per_token: t.kv_bytes_per_token,
            ..EngineSettings::default()
        };
        let s = s.overridden_by(&own);
        let e = s.config(&key)?;
        // KV bytes per token: the pool's key, else the fleet's, else (a pool with its own
        // profile) that profile's
        let kv = t.kv_bytes_per_token.or_else(|| {
            (fleet.kv_bytes_per_token.is_none() && (t.profile.is_some() || step_model.is_some()))
                .then_some(e.offload.kv_bytes_per_token)
        });
        out.push(Pool {
            name: Box::leak(t.name.clone().into_boxed_str()),
            pods: t.pods,
            role,
            capacity_blocks: t.capacity,
            max_num_seqs: t.max_num_seqs,
            max_num_batched_tokens: t.max_num_batched_tokens,
            cost: own_cost.then_some((e.profile, e.cost)),
            cpu_capacity: t.cpu_capacity,
            pcie_bytes_per_s: t.pcie_bytes_per_s,
            kv_bytes_per_token: kv,
        });
    }
    Ok(Box::leak(out.into_boxed_slice()))
}

/// `--pools FILE` over the engine flags' settings `flags` (`fleet replay`): the pool table (each
/// key a pool leaves out is the flags' value) and the engine settings with P/D's prefill pods
/// from the pools' roles, as a scenario's `[[fleet.pool]]` gives them. Beside prefill pools,
/// `--prefill-capacity` and `--prefill-profile` are refused (each pool has its own) and
/// `--prefill-pods`, when given, must be the prefill pools' pods.
pub fn with_flags(file: &PoolsFile, mut flags: EngineSettings) -> CliResult<(&'static [Pool], EngineSettings)> {
    let t = table(&file.list, &flags, &file.origin, &file.lines)?;
    let np = brokerlab_core::fleet::sim::pools::pods_of(t, PoolRole::Prefill);
    if np > 0 {
        for (set, flag) in [
            (flags.prefill_capacity.is_some(), "--prefill-capacity"),
            (flags.prefill_profile.is_some(), "--prefill-profile"),
        ] {
            if set {
                return Err(CliError::bad_input(format!(
                    "{flag}: absent with --pools {} (each pool sets its own capacity and profile)",
                    file.origin
                )));
            }
        }
        let np = u32::try_from(np).unwrap_or(u32::MAX);
        match flags.prefill_pods {
            Some(n) if n != np => {
                return Err(CliError::bad_input(format!(
                    "--prefill-pods {n}: expected {np}, the pods of the prefill pools in --pools {} (or leave it out)",
                    file.origin
                )));
            }
            _ => flags.prefill_pods = Some(np),
        }
    }
    Ok((t, flags))
}
