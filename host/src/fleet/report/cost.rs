//! `fleet report`'s section on the step-cost model, "What the cost model says, and how wrong it
//! is": the same check as `fleet cost-check` (`cost::check`; deterministic, no run needed), as
//! Markdown (the report's page splits it into blocks).

/// The section's Markdown (a missing or NaN row of the check panics: the report must not print it).
pub(super) fn markdown() -> String {
    let c = crate::fleet::cost::check::run();
    crate::fleet::cost::check::report_section(&c).unwrap_or_else(|e| panic!("the cost check lost a row: {e}"))
}
