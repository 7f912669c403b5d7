//! The built-in scenarios: the files in `scenarios/`, compiled in so `fleet report` and
//! `fleet bench` need nothing else.

use super::Scenario;
use crate::error::CliResult;

/// Built-in scenarios (the files in `scenarios/`, compiled in so the report needs nothing else).
pub const BUILTIN: [(&str, &str); 5] = [
    ("multi-tenant", include_str!("../../../../scenarios/multi-tenant.toml")),
    ("alpha", include_str!("../../../../scenarios/alpha.toml")),
    ("llm-d", include_str!("../../../../scenarios/llm-d.toml")),
    ("rag", include_str!("../../../../scenarios/rag.toml")),
    ("autoscale", include_str!("../../../../scenarios/autoscale.toml")),
];

/// A built-in scenario by name.
pub fn builtin(name: &str) -> CliResult<Scenario> {
    let (_, text) = BUILTIN.iter().find(|(n, _)| *n == name).expect("built-in scenario exists");
    Scenario::parse(text, &format!("scenarios/{name}.toml"), name)
}
