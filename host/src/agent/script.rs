//! The scripted model (the default, `[[step]]` tables): it answers step `n` with the spec's step
//! `n`, whatever the conversation says. Tests, demos and chaos runs use it.

use super::model::{Model, ModelError, ModelRequest, ModelTurn};
use crate::task::spec::{Spec, Step};

/// The scripted model of a spec.
#[derive(Debug, Clone)]
pub struct ScriptModel {
    steps: Vec<Step>,
}

impl ScriptModel {
    /// The model that plays `spec`'s steps.
    pub fn new(spec: &Spec) -> ScriptModel {
        ScriptModel { steps: spec.steps.clone() }
    }
}

impl Model for ScriptModel {
    fn reply(&mut self, req: &ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        let s = self
            .steps
            .get(usize::from(req.step))
            .ok_or_else(|| ModelError::Refused(format!("the spec has no step {}", req.step)))?;
        Ok(match &s.tool {
            None => ModelTurn::Text { text: s.model.clone() },
            Some(t) => ModelTurn::Call {
                text: s.model.clone(),
                tool: t.clone(),
                arguments: serde_json::from_str(&s.args)
                    .map_err(|e| ModelError::Refused(format!("step {}: args: {e}", req.step)))?,
            },
        })
    }
}
