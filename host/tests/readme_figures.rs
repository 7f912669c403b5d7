//! The README's figures are tied to the commands that produce them. The line right before a block
//! of figures (a paragraph or a table, up to the next blank line) names its command:
//!
//! - `<!-- figures: brokerlab ARGS -->`: deterministic. The command runs (this build's binary, in
//!   the checkout) and every number of three or more digits in the block must occur among the
//!   numbers of its standard output (thousands separators ignored, `32.0` equals `32`).
//! - `<!-- timing: brokerlab fleet bench ARGS -->` (or `task bench`): machine-dependent. The value
//!   is not checked; the marker must name a bench command.
//!
//! Every block of the README's `## Performance` section that holds a figure must carry a `timing:`
//! marker, so a figure nobody can regenerate cannot be added there unnoticed.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_brokerlab");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The numbers of `text`: runs of digits with `,` separators and one `.`, as values.
fn numbers(text: &str, min_digits: usize) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        // a digit inside a word (u64, x86-64, M3) is not a figure
        let prev_word = i > 0 && (chars[i - 1].is_ascii_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == '-');
        if chars[i].is_ascii_digit() && !prev_word {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_digit()
                    || ((chars[i] == ',' || chars[i] == '.') && chars.get(i + 1).is_some_and(char::is_ascii_digit)))
            {
                i += 1;
            }
            let tok: String = chars[start..i].iter().collect();
            let plain = tok.replace(',', "");
            let digits = plain.chars().filter(char::is_ascii_digit).count();
            if digits >= min_digits
                && let Ok(v) = plain.parse::<f64>()
            {
                out.push((tok, v));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// (line of the marker, kind, command, block text) of every marked block.
fn marked(readme: &str) -> Vec<(usize, String, String, String)> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        for kind in ["figures", "timing"] {
            let Some(rest) = l.trim().strip_prefix(&format!("<!-- {kind}:")) else { continue };
            let cmd = rest.trim_end_matches("-->").trim().to_string();
            let block: Vec<&str> = lines[i + 1..].iter().take_while(|l| !l.trim().is_empty()).copied().collect();
            out.push((i + 1, kind.to_string(), cmd, block.join("\n")));
        }
    }
    out
}

#[test]
fn the_number_reader_reads_separators_and_decimals() {
    let n: Vec<f64> =
        numbers("a 131,072 B, 86.9% of 4 MiB; v2 x86-64 (Cortex-M3) 1.5.", 1).iter().map(|x| x.1).collect();
    assert_eq!(n, [131_072.0, 86.9, 4.0, 1.5]);
    assert_eq!(numbers("15,328 and 7", 3).len(), 1);
}

#[test]
fn every_deterministic_readme_figure_is_its_commands_output() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks: Vec<_> = marked(&readme).into_iter().filter(|b| b.1 == "figures").collect();
    assert!(!blocks.is_empty(), "README marks no figures");
    let mut failed = Vec::new();
    for (line, _, cmd, block) in &blocks {
        let args: Vec<&str> = cmd.split_whitespace().collect();
        assert_eq!(args.first(), Some(&"brokerlab"), "README.md:{line}: a figures command runs brokerlab: {cmd}");
        let o = Command::new(BIN).args(&args[1..]).current_dir(root()).output().unwrap();
        assert!(o.status.success(), "README.md:{line}: `{cmd}` failed: {}", String::from_utf8_lossy(&o.stderr));
        let stdout = String::from_utf8_lossy(&o.stdout);
        let have: HashSet<u64> = numbers(&stdout, 1).iter().map(|x| x.1.to_bits()).collect();
        let missing: Vec<String> =
            numbers(block, 3).into_iter().filter(|(_, v)| !have.contains(&v.to_bits())).map(|(t, _)| t).collect();
        if !missing.is_empty() {
            failed.push(format!("README.md:{line}: `{cmd}` does not print {missing:?}"));
        }
    }
    assert!(failed.is_empty(), "stale README figures (rerun the command, update the figure):\n{}", failed.join("\n"));
}

#[test]
fn every_timing_figure_names_its_bench_command() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for (line, _, cmd, _) in marked(&readme).iter().filter(|b| b.1 == "timing") {
        assert!(
            cmd.starts_with("brokerlab fleet bench") || cmd.starts_with("brokerlab task bench"),
            "README.md:{line}: a timing figure names its bench command, not `{cmd}`"
        );
    }
    // In "## Performance", a block with a figure and no `timing:` marker fails.
    let start = readme.find("\n## Performance\n").expect("README has a Performance section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 4)];
    let lines: Vec<&str> = section.lines().collect();
    let mut unmarked = Vec::new();
    let mut i = 1;
    while i < lines.len() {
        if lines[i].trim().is_empty() || lines[i].starts_with('#') || lines[i].trim().starts_with("<!--") {
            i += 1;
            continue;
        }
        let marker = lines[i - 1].trim().starts_with("<!-- timing:");
        let begin = i;
        let mut text = String::new();
        while i < lines.len() && !lines[i].trim().is_empty() {
            text += lines[i];
            text += "\n";
            i += 1;
        }
        // a figure: a number next to a unit of speed or time, or a ratio
        let figure = ["/s", " ms", " s ", "x ", "x,", "x)", "MB", "GB"].iter().any(|u| text.contains(u))
            && !numbers(&text, 1).is_empty();
        if figure && !marker {
            unmarked.push(lines[begin].to_string());
        }
    }
    assert!(
        unmarked.is_empty(),
        "Performance figures without a `<!-- timing: brokerlab ... bench -->` marker: {unmarked:?}"
    );
}
