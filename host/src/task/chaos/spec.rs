//! The chaos run's task specs: payments, lookups, at least one email, plain model steps.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// The draws of a chaos run (specs, kill plans, delays): ChaCha8, seeded, the same generator the
/// core's workload uses.
#[derive(Debug, Clone)]
pub struct Draws(ChaCha8Rng);

impl Draws {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Draws(ChaCha8Rng::seed_from_u64(seed))
    }
    /// Uniform in `0..n` (`n > 0`), by the multiply-shift rule (no modulo bias worth a name).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.0.next_u64() as u128 * n.max(1) as u128) >> 64) as u64
    }
}

/// What one step of a chaos task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// A plain model step (no tool; the scripted model only).
    Think,
    /// A read-only call (`lookup`, or the tool server's `find`).
    Lookup,
    /// An idempotent call (`payment`, or `pay`).
    Payment,
    /// A non-idempotent call (`send_email`, or `mail`).
    Email,
}

impl StepKind {
    /// The kind of a call of `tool` (the built-in names and the tool server's).
    pub fn of_tool(tool: Option<&str>) -> StepKind {
        match tool {
            None => StepKind::Think,
            Some("lookup" | "find") => StepKind::Lookup,
            Some("payment" | "pay") => StepKind::Payment,
            Some(_) => StepKind::Email,
        }
    }
}

/// The tools of a chaos run's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolsMode {
    /// The built-in simulated tools, their files in DIR/world.
    #[default]
    Builtin,
    /// HTTP tools (`find`, `pay`, `mail`) on the in-repo tool server, its file DIR/tool-server.sqlite.
    Http,
}

/// The model of a chaos run's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelMode {
    /// The scripted model (`[[step]]` tables).
    #[default]
    Script,
    /// `kind = "openai"` against the in-repo scripted model server: the script in the prompt.
    Openai,
}

/// Where the servers of an HTTP or OpenAI chaos run listen.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    /// The tool server, `http://127.0.0.1:PORT`.
    pub tools: String,
    /// The model server, `http://127.0.0.1:PORT/v1`.
    pub model: String,
}

/// The kinds of a chaos task's steps: at least one payment, one lookup and one email, the rest
/// drawn (payment 40 %, lookup 25 %, plain model step 20 %, email 15 %).
fn kinds(steps: u16, rng: &mut Draws) -> Vec<StepKind> {
    let n = steps.max(3) as usize;
    let mut kinds: Vec<StepKind> = (0..n)
        .map(|_| match rng.below(100) {
            0..40 => StepKind::Payment,
            40..65 => StepKind::Lookup,
            65..85 => StepKind::Think,
            _ => StepKind::Email,
        })
        .collect();
    // three distinct positions for the kinds every task must have
    let mut pos: Vec<usize> = (0..n).collect();
    for (k, kind) in [StepKind::Email, StepKind::Payment, StepKind::Lookup].into_iter().enumerate() {
        let j = k + rng.below((n - k) as u64) as usize;
        pos.swap(k, j);
        kinds[pos[k]] = kind;
    }
    kinds
}

/// The spec (TOML) of chaos task `id` with the built-in tools and the scripted model: `steps`
/// steps of the kinds [`kinds`] draws.
pub fn chaos_spec(id: &str, steps: u16, rng: &mut Draws) -> String {
    chaos_spec_for(id, steps, rng, ToolsMode::Builtin, ModelMode::Script, &Endpoints::default())
}

/// The tool name and arguments of a step of `kind` at `i` (`amount` drawn), by tools mode.
fn call_of(kind: StepKind, i: usize, amount: u64, tools: ToolsMode) -> Option<(&'static str, serde_json::Value)> {
    let http = tools == ToolsMode::Http;
    Some(match kind {
        StepKind::Think => return None,
        StepKind::Lookup => (if http { "find" } else { "lookup" }, serde_json::json!({ "q": format!("acct-{i}") })),
        StepKind::Payment => {
            (if http { "pay" } else { "payment" }, serde_json::json!({ "amount": amount, "to": format!("acct-{i}") }))
        }
        StepKind::Email => (
            if http { "mail" } else { "send_email" },
            serde_json::json!({ "to": format!("c{i}@example.com"), "subject": format!("receipt {amount}") }),
        ),
    })
}

/// The `[[tool]]` tables of the HTTP tools on the tool server at `base` (fenced, with the retry
/// budget that outlasts the server's restarts: about 3 s).
fn http_tools(base: &str) -> String {
    let patience = "timeout_ms = 3000\nconnect_timeout_ms = 1000\nretries = 6\nbackoff_ms = 50\nmax_backoff_ms = 1000\n\
                    max_retry_after_ms = 1000\n";
    format!(
        "\n[[tool]]\nname = \"find\"\nkind = \"http\"\nclass = \"read-only\"\nmethod = \"GET\"\n\
         url = \"{base}/tools/find?q={{q}}\"\nchecks_fence = true\n{patience}\
         parameters = {{ type = \"object\", properties = {{ q = {{ type = \"string\" }} }}, required = [\"q\"] }}\n\
         \n[[tool]]\nname = \"pay\"\nkind = \"http\"\nclass = \"idempotent\"\nurl = \"{base}/tools/pay\"\n\
         checks_fence = true\nfence_url = \"{base}/fence\"\n{patience}\
         parameters = {{ type = \"object\", properties = {{ amount = {{ type = \"integer\" }}, to = {{ type = \"string\" }} }}, \
         required = [\"amount\", \"to\"] }}\n\
         \n[[tool]]\nname = \"mail\"\nkind = \"http\"\nclass = \"non-idempotent\"\nurl = \"{base}/tools/mail\"\n\
         checks_fence = true\nfence_url = \"{base}/fence\"\n{patience}\
         parameters = {{ type = \"object\", properties = {{ to = {{ type = \"string\" }}, subject = {{ type = \"string\" }} }}, \
         required = [\"to\", \"subject\"] }}\n"
    )
}

/// The spec (TOML) of chaos task `id` in a mode: the built-in tools or the HTTP tools on the
/// tool server; the scripted model (`[[step]]` tables, plain steps included) or the OpenAI
/// model server playing the same calls from the prompt's `brokerlab-script:` line and then
/// answering (plain steps have no counterpart there: a model's turn without a call ends the
/// task, so they are left out). The draws are the same in every mode.
pub fn chaos_spec_for(
    id: &str,
    steps: u16,
    rng: &mut Draws,
    tools: ToolsMode,
    model: ModelMode,
    at: &Endpoints,
) -> String {
    let kinds = kinds(steps, rng);
    let mut s = format!("id = \"{id}\"\n");
    let calls: Vec<(usize, StepKind, u64)> =
        kinds.iter().enumerate().map(|(i, k)| (i, *k, 1 + rng.below(999))).collect();
    if model == ModelMode::Openai {
        use crate::agent::serve::model::{Scripted, script_line};
        let mut turns: Vec<Scripted> = calls
            .iter()
            .filter_map(|(i, k, amount)| call_of(*k, *i, *amount, tools))
            .map(|(tool, args)| Scripted::Call { tool: tool.into(), args, text: String::new() })
            .collect();
        let n = turns.len();
        turns.push(Scripted::Answer(format!("{id}: all {n} calls made")));
        s.push_str(&format!("max_steps = {}\n\n[model]\nkind = \"openai\"\n", n + 1));
        s.push_str(&format!("base_url = \"{}\"\nmodel = \"scripted\"\n", at.model));
        s.push_str(
            "timeout_ms = 5000\nconnect_timeout_ms = 1000\nretries = 8\nbackoff_ms = 50\nmax_backoff_ms = 1000\n",
        );
        s.push_str("max_retry_after_ms = 1000\n");
        let prompt = format!("Make these calls in order, then answer.\n{}", script_line(&turns));
        s.push_str(&format!("prompt = {}\n", toml_string(&prompt)));
        match tools {
            ToolsMode::Http => s.push_str(&http_tools(&at.tools)),
            ToolsMode::Builtin => {
                for name in ["lookup", "payment", "send_email"] {
                    s.push_str(&format!("\n[[tool]]\nname = \"{name}\"\nkind = \"builtin\"\n"));
                }
            }
        }
        return s;
    }
    if tools == ToolsMode::Http {
        s.push_str(&http_tools(&at.tools));
    }
    for (i, k, amount) in calls {
        let step = match (k, call_of(k, i, amount, tools)) {
            (StepKind::Think, _) | (_, None) => format!("model = \"step {i}: think\"\n"),
            (StepKind::Lookup, Some((tool, args))) => {
                format!("model = \"step {i}: look up the account\"\ntool = \"{tool}\"\nargs = {}\n", toml_inline(&args))
            }
            (StepKind::Payment, Some((tool, args))) => {
                format!("model = \"step {i}: pay the invoice\"\ntool = \"{tool}\"\nargs = {}\n", toml_inline(&args))
            }
            (StepKind::Email, Some((tool, args))) => {
                format!("model = \"step {i}: tell the customer\"\ntool = \"{tool}\"\nargs = {}\n", toml_inline(&args))
            }
        };
        s.push_str("\n[[step]]\n");
        s.push_str(&step);
    }
    s
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// A flat JSON object of strings and integers as a TOML inline table, keys in the order the
/// builtin specs always wrote them (`amount` before `to`, `to` before `subject`).
fn toml_inline(v: &serde_json::Value) -> String {
    let order = ["q", "amount", "to", "subject"];
    let o = v.as_object().cloned().unwrap_or_default();
    let parts: Vec<String> = order.iter().filter_map(|k| o.get(*k).map(|x| format!("{k} = {x}"))).collect();
    format!("{{ {} }}", parts.join(", "))
}

/// One step of a chaos task as planned: what it calls (by kind), with which tool and canonical
/// arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The kind.
    pub kind: StepKind,
    /// The tool's name (empty for a plain step).
    pub tool: String,
    /// The canonical JSON arguments.
    pub args: String,
}

/// The plan of a task's spec: its scripted steps, or the calls of the script in its prompt
/// (OpenAI model), and whether a final answer ends it (it then takes one more step).
pub fn plan_of(spec: &super::super::spec::Spec) -> (Vec<Planned>, bool) {
    use super::super::spec::ModelSpec;
    use crate::agent::serve::model::{SCRIPT_MARKER, Scripted, parse_script};
    if let Some(ModelSpec::Openai(o)) = &spec.model {
        let line = o.prompt.lines().find_map(|l| l.trim().strip_prefix(SCRIPT_MARKER).map(str::trim));
        let turns = line
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
            .and_then(|v| parse_script(&v).ok())
            .unwrap_or_default();
        let plan = turns
            .into_iter()
            .filter_map(|t| match t {
                Scripted::Call { tool, args, .. } => {
                    Some(Planned { kind: StepKind::of_tool(Some(&tool)), tool, args: args.to_string() })
                }
                Scripted::Answer(_) => None,
            })
            .collect();
        return (plan, true);
    }
    let plan = spec
        .steps
        .iter()
        .map(|s| Planned {
            kind: StepKind::of_tool(s.tool.as_deref()),
            tool: s.tool.clone().unwrap_or_default(),
            args: s.args.clone(),
        })
        .collect();
    (plan, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The builtin specs are byte for byte what they were before the modes existed (the seeds
    /// of the published runs draw the same tasks), and every mode's spec parses.
    #[test]
    fn the_builtin_spec_is_unchanged_and_every_mode_parses() {
        let s = chaos_spec("chaos-1-0", 5, &mut Draws::new(7));
        assert!(s.starts_with("id = \"chaos-1-0\"\n\n[[step]]\n"), "{s}");
        assert!(s.contains("args = { amount = ") || s.contains("args = { q = "), "{s}");
        let at = Endpoints { tools: "http://127.0.0.1:9".into(), model: "http://127.0.0.1:9/v1".into() };
        for tools in [ToolsMode::Builtin, ToolsMode::Http] {
            for model in [ModelMode::Script, ModelMode::Openai] {
                let t = chaos_spec_for("c", 6, &mut Draws::new(3), tools, model, &at);
                let spec = super::super::super::spec::Spec::parse(&t)
                    .unwrap_or_else(|e| panic!("{tools:?} {model:?}: {e}\n{t}"));
                let (plan, answer) = plan_of(&spec);
                assert_eq!(answer, model == ModelMode::Openai);
                assert!(plan.iter().any(|p| p.kind == StepKind::Payment), "{t}");
            }
        }
    }
}
