//! `fleet report`'s section on the step-cost model, "What the cost model says, and how wrong it
//! is": the same check as `fleet cost-check` (`cost::check`; deterministic, no run needed), as
//! Markdown and as HTML.

use std::fmt::Write as _;

use super::render::{md_inline_to_html, md_table_to_html};

/// The section's Markdown (a missing or NaN row of the check panics: the report must not print it).
pub(super) fn markdown() -> String {
    let c = crate::fleet::cost::check::run();
    crate::fleet::cost::check::report_section(&c).unwrap_or_else(|e| panic!("the cost check lost a row: {e}"))
}

/// The section as HTML, block by block: paragraphs, tables (code spans shown plain) and the notes
/// as a list.
pub(super) fn html() -> String {
    let mut o = String::from("<h2>9b. What the cost model says, and how wrong it is</h2>");
    for block in markdown().split("\n\n") {
        if block.starts_with('|') {
            o += &md_table_to_html(&block.replace('`', ""));
        } else if block.starts_with("Notes:") {
            o += "<ul>";
            for item in block.lines().filter_map(|l| l.strip_prefix("- ")) {
                let _ = write!(o, "<li>{}</li>", md_inline_to_html(item));
            }
            o += "</ul>";
        } else {
            let _ = write!(o, "<p>{}</p>", md_inline_to_html(block));
        }
    }
    o
}
