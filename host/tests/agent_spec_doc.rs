//! docs/RUNNER.md "The spec format" lists exactly the keys the spec parser accepts, in four
//! tables, and its defaults are the ones in `brokerlab::agent::defaults` (one home for each).

use brokerlab::agent::defaults as d;
use brokerlab::task::spec::{KEYS_MODEL, KEYS_STEP, KEYS_TOOL, KEYS_TOP};

/// The rows of the table that follows the line `heading` in the spec format section: (key, row).
fn table(doc: &str, heading: &str) -> Vec<(String, String)> {
    let start = doc.find("### The spec format").expect("a \"The spec format\" section");
    let section = &doc[start..];
    let end = section[4..].find("\n### ").map_or(section.len(), |i| i + 4);
    let section = &section[..end];
    let at = section.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no {heading:?} line"));
    section[at + heading.len() + 2..]
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let key = l.split('|').nth(1).unwrap_or("").trim().trim_matches('`').to_string();
            (key, l.to_string())
        })
        .collect()
}

fn sorted(keys: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    v.sort();
    v
}

/// `30000` as the table writes it: `30,000`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn the_spec_format_table_lists_every_key_and_its_default() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/RUNNER.md")).unwrap();
    let groups: [(&str, &[&str]); 4] = [
        ("Top level:", &KEYS_TOP),
        ("`[model]`:", &KEYS_MODEL),
        ("`[[tool]]`:", &KEYS_TOOL),
        ("`[[step]]` (scripted model):", &KEYS_STEP),
    ];
    let mut tables = Vec::new();
    for (heading, keys) in groups {
        let rows = table(&doc, heading);
        let mut got: Vec<String> = rows.iter().map(|(k, _)| k.clone()).collect();
        got.sort();
        assert_eq!(got, sorted(keys), "the {heading} table");
        for (k, row) in &rows {
            assert_eq!(row.matches('|').count(), 5, "{heading} {k}: expected key | type | default | meaning");
        }
        tables.push(rows);
    }
    let row = |t: usize, key: &str| tables[t].iter().find(|(k, _)| k == key).map(|(_, r)| r.clone()).unwrap();
    let defaults: [(usize, &str, u64); 12] = [
        (0, "max_steps", u64::from(d::MAX_STEPS)),
        (1, "max_tokens", u64::from(d::MODEL_MAX_TOKENS)),
        (1, "timeout_ms", d::MODEL_TIMEOUT_MS),
        (1, "connect_timeout_ms", d::CONNECT_TIMEOUT_MS),
        (1, "retries", u64::from(d::MODEL_RETRIES)),
        (1, "backoff_ms", d::BACKOFF_MS),
        (1, "max_backoff_ms", d::MAX_BACKOFF_MS),
        (1, "max_retry_after_ms", d::MAX_RETRY_AFTER_MS),
        (2, "timeout_ms", d::TOOL_TIMEOUT_MS),
        (2, "retries", u64::from(d::TOOL_RETRIES)),
        (2, "backoff_ms", d::BACKOFF_MS),
        (2, "max_backoff_ms", d::MAX_BACKOFF_MS),
    ];
    for (t, key, v) in defaults {
        let r = row(t, key);
        let default = r.split('|').nth(3).unwrap_or("");
        assert!(default.contains(&thousands(v)), "{key}: the table's default {default:?} is not {v}");
    }
}
