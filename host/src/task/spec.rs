//! Task specs: the scripted fake model (TOML), validated against the core's limits.
//!
//! ```toml
//! id = "invoice-42"          # optional; without it every `task run` starts a new task
//! [[step]]
//! model = "Look up the customer"
//! tool = "lookup"            # lookup | payment | send_email (optional)
//! args = { q = "acct-1" }    # a table (optional, only with `tool`)
//! ```
//!
//! Unknown keys are an error naming the key. The spec is stored in the log database as canonical
//! JSON; its CRC-32C is the `spec_digest` of the task's `created` record.

use std::path::Path;

use brokerlab_core::runner::{
    Args, MAX_ARGS_BYTES, MAX_MODEL_TEXT, MAX_STEPS, MAX_TASK_ID, ModelReply, ModelText, ToolCall, ToolClass, ToolName,
    crc32c,
};
use serde::{Deserialize, Serialize};

use crate::task::error::{TaskError, TaskResult};

/// The tools the scripted model can call, with their class.
pub const TOOLS: [(&str, ToolClass); 3] =
    [("lookup", ToolClass::ReadOnly), ("payment", ToolClass::Idempotent), ("send_email", ToolClass::NonIdempotent)];

/// The class of a known tool.
pub fn tool_class(name: &str) -> Option<ToolClass> {
    TOOLS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    id: Option<String>,
    #[serde(default)]
    step: Vec<StepFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    model: String,
    tool: Option<String>,
    args: Option<toml::Table>,
}

/// One validated step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The scripted model response.
    pub model: String,
    /// The tool it calls.
    pub tool: Option<String>,
    /// Canonical JSON of the args table (`{}` when absent).
    pub args: String,
}

/// A validated spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// Task id from the file, if any.
    pub id: Option<String>,
    /// Steps.
    pub steps: Vec<Step>,
}

/// Checks a task id: 1..=MAX_TASK_ID bytes of `[A-Za-z0-9._-]`.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_TASK_ID {
        return Err(format!("must be 1 to {MAX_TASK_ID} bytes long, got {}", id.len()));
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!("contains {c:?}; use letters, digits, '.', '_' and '-'"));
    }
    Ok(())
}

impl Spec {
    /// Reads and validates a spec file; errors name the file and the field.
    pub fn load(path: &Path) -> TaskResult<Spec> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| TaskError::BadSpec { file: path.to_path_buf(), msg: format!("cannot read spec: {e}") })?;
        Spec::parse(&text).map_err(|msg| TaskError::BadSpec { file: path.to_path_buf(), msg })
    }

    /// The spec stored in task `task`'s row of log `db` (canonical JSON); exit 2 naming both
    /// when it does not parse.
    pub fn stored(json: &str, db: &str, task: &str) -> TaskResult<Spec> {
        Spec::from_json(json).map_err(|e| TaskError::StoredSpec {
            db: db.to_string(),
            task: task.to_string(),
            detail: e.to_string(),
        })
    }

    /// Parses and validates spec text.
    pub fn parse(text: &str) -> Result<Spec, String> {
        let file: SpecFile = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        if let Some(id) = &file.id {
            check_id(id).map_err(|m| format!("id: {m}"))?;
        }
        if file.step.is_empty() {
            return Err("no [[step]] tables: a task needs at least one step".into());
        }
        if file.step.len() > MAX_STEPS as usize {
            return Err(format!("{} steps, at most {MAX_STEPS} allowed", file.step.len()));
        }
        let mut steps = Vec::with_capacity(file.step.len());
        for (i, s) in file.step.into_iter().enumerate() {
            if s.model.len() > MAX_MODEL_TEXT {
                return Err(format!("step[{i}].model: {} bytes, at most {MAX_MODEL_TEXT}", s.model.len()));
            }
            if let Some(t) = &s.tool {
                if tool_class(t).is_none() {
                    return Err(format!("step[{i}].tool: unknown tool {t:?} (expected lookup, payment or send_email)"));
                }
            } else if s.args.is_some() {
                return Err(format!("step[{i}].args: args without a tool"));
            }
            let args = serde_json::to_string(&s.args.unwrap_or_default())
                .map_err(|e| format!("step[{i}].args: cannot be encoded as JSON: {e}"))?;
            if args.len() > MAX_ARGS_BYTES {
                return Err(format!("step[{i}].args: {} bytes as JSON, at most {MAX_ARGS_BYTES}", args.len()));
            }
            steps.push(Step { model: s.model, tool: s.tool, args });
        }
        Ok(Spec { id: file.id, steps })
    }

    /// Canonical JSON (stored in the database).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a Spec always serializes")
    }

    /// Reads the canonical JSON back.
    pub fn from_json(s: &str) -> Result<Spec, String> {
        serde_json::from_str(s).map_err(|e| e.to_string())
    }

    /// CRC-32C of the canonical JSON of the steps (the id is not part of the digest, so a fork
    /// with the same spec has the same digest).
    pub fn digest(&self) -> u32 {
        crc32c(serde_json::to_string(&self.steps).expect("steps serialize").as_bytes())
    }

    /// The scripted model's reply for `step`.
    pub fn reply(&self, step: u16) -> Option<ModelReply> {
        let s = self.steps.get(step as usize)?;
        let text = ModelText::try_from(s.model.as_str()).ok()?;
        let call = match &s.tool {
            Some(t) => Some(ToolCall {
                tool: ToolName::try_from(t.as_str()).ok()?,
                class: tool_class(t)?,
                args: Args::from_slice(s.args.as_bytes()).ok()?,
            }),
            None => None,
        };
        Some(ModelReply { text, call })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let s = Spec::parse(
            "id = \"a\"\n[[step]]\nmodel = \"m\"\ntool = \"payment\"\nargs = { b = 2, a = 1 }\n[[step]]\nmodel = \"x\"\n",
        )
        .unwrap();
        assert_eq!(s.steps[0].args, r#"{"a":1,"b":2}"#);
        assert_eq!(s.steps[1].tool, None);
        let e = Spec::parse("[[step]]\nmodel = \"m\"\ncolour = 1\n").unwrap_err();
        assert!(e.contains("colour"), "{e}");
        let e = Spec::parse("idd = \"x\"\n[[step]]\nmodel = \"m\"\n").unwrap_err();
        assert!(e.contains("idd"), "{e}");
        let e = Spec::parse("[[step]]\nmodel = \"m\"\ntool = \"rm\"\n").unwrap_err();
        assert!(e.contains("step[0].tool"), "{e}");
        assert!(Spec::parse("id = \"a b\"\n[[step]]\nmodel = \"m\"\n").is_err());
        assert!(Spec::parse("").is_err());
    }
}
