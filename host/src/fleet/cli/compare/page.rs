//! One document, two renderings: a page (`fleet compare`'s, `fleet report`'s) is built once as
//! [`Block`]s and written as Markdown and as HTML from them, so the two cannot say different
//! things. Text is inline Markdown (`**bold**`, `` `code` ``): verbatim in Markdown, converted in
//! HTML.

use std::fmt::Write as _;

/// A piece of the page.
#[derive(Debug, Clone)]
pub enum Block {
    /// A section heading (level 2), with an anchor for the table of contents.
    Heading(String),
    /// A paragraph of plain text.
    Para(String),
    /// A table: header cells, then rows; cells are plain text.
    Table(Vec<String>, Vec<Vec<String>>),
    /// A bulleted list of plain-text items.
    List(Vec<String>),
    /// A plot: file stem (`stem.svg`, `stem.png` beside the page) and the inline SVG.
    Figure(String, String),
    /// A highlighted line.
    Callout(String),
    /// A sub-heading (level 3), not in the table of contents.
    Sub(String),
    /// Preformatted text (a scenario file).
    Pre(String),
}

/// A Markdown table (`| a | b |` lines, the second the `|---|` rule) as a [`Block::Table`].
pub fn table_from_md(md: &str) -> Block {
    let rows: Vec<Vec<String>> = md
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect();
    let mut it = rows.into_iter();
    let head = it.next().unwrap_or_default();
    Block::Table(head, it.skip(1).collect())
}

/// The level-2 headings of `blocks`, in order (the table of contents).
pub fn headings(blocks: &[Block]) -> Vec<&str> {
    blocks.iter().filter_map(|b| if let Block::Heading(h) = b { Some(h.as_str()) } else { None }).collect()
}

/// Whether a table cell is a figure (right-aligned): "n/a", or at most two words of which the
/// first is a number once its sign, thousands commas, unit suffix (`%`, `x`, `s`) are set aside,
/// as "-52.5%", "1.65x", "9,857.3", "-0.1 (abs)"; a note that merely starts with a digit is text.
fn is_figure(c: &str) -> bool {
    if c == "n/a" {
        return true;
    }
    let mut words = c.split_whitespace();
    let Some(first) = words.next() else { return false };
    let bare: String = first.trim_start_matches(['+', '-']).trim_end_matches(['%', 'x', 's']).replace(',', "");
    words.nth(1).is_none() && !bare.is_empty() && bare.parse::<f64>().is_ok()
}

fn anchor(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| {
            if c.is_ascii_alphanumeric() {
                Some(c.to_ascii_lowercase())
            } else if c == ' ' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Inline Markdown (`**bold**`, `` `code` ``) as escaped HTML.
pub fn inline_html(md: &str) -> String {
    let mut o = String::new();
    let mut code = false;
    for (i, part) in md.split("**").enumerate() {
        if i > 0 {
            o += if i % 2 == 1 { "<b>" } else { "</b>" };
        }
        for (j, piece) in part.split('`').enumerate() {
            if j > 0 {
                o += if code { "</code>" } else { "<code>" };
                code = !code;
            }
            o += &esc(piece);
        }
    }
    o
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The page as Markdown (`provenance`: its Markdown section).
pub fn markdown(title: &str, blocks: &[Block], provenance: &str) -> String {
    let mut o = format!("# {title}\n\n");
    let heads: Vec<&String> =
        blocks.iter().filter_map(|b| if let Block::Heading(h) = b { Some(h) } else { None }).collect();
    o += "Contents: ";
    o += &heads.iter().map(|h| format!("[{h}](#{})", anchor(h))).collect::<Vec<_>>().join(" · ");
    o += "\n\n";
    for b in blocks {
        match b {
            Block::Heading(h) => {
                let _ = write!(o, "## {h}\n\n");
            }
            Block::Para(p) => {
                let _ = write!(o, "{p}\n\n");
            }
            Block::Callout(p) => {
                let _ = write!(o, "> {p}\n\n");
            }
            Block::Table(head, rows) => {
                let _ = writeln!(o, "| {} |", head.iter().map(|c| md_cell(c)).collect::<Vec<_>>().join(" | "));
                let _ = writeln!(o, "|{}", "---|".repeat(head.len()));
                for r in rows {
                    let _ = writeln!(o, "| {} |", r.iter().map(|c| md_cell(c)).collect::<Vec<_>>().join(" | "));
                }
                o += "\n";
            }
            Block::List(items) => {
                for i in items {
                    let _ = writeln!(o, "- {i}");
                }
                o += "\n";
            }
            Block::Figure(stem, _) => {
                let _ = write!(o, "![{stem}]({stem}.png)\n\n");
            }
            Block::Sub(h) => {
                let _ = write!(o, "### {h}\n\n");
            }
            Block::Pre(t) => {
                let _ = write!(o, "```\n{}\n```\n\n", t.trim_end());
            }
        }
    }
    o + provenance
}

/// The page as one self-contained HTML file (`provenance`: its HTML table).
pub fn html(title: &str, blocks: &[Block], provenance: &str) -> String {
    let mut o = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title><style>\
         body{{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222;padding:0 1em}}\
         table{{border-collapse:collapse;margin:1em 0;font-size:.9em}}\
         td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right}}th{{background:#f3f3f3}}\
         td:first-child,th:first-child{{text-align:left;white-space:nowrap}}td.t{{text-align:left}}\
         figure{{margin:1em 0}}figure svg{{max-width:100%;height:auto}}\
         .call{{font-size:1.1em;background:#fffbe6;padding:10px;border-left:4px solid #e69f00}}\
         nav{{background:#f7f7f7;padding:8px}}pre{{background:#f7f7f7;padding:8px;overflow:auto}}\
         table.prov{{font-size:.8em;color:#444}}table.prov th,table.prov td{{border:none;padding:1px 8px 1px 0;text-align:left}}\
         table.prov th{{background:none;font-weight:normal;color:#777}}</style></head><body><h1>{t}</h1>",
        t = esc(title)
    );
    o += "<nav>Contents: ";
    let heads: Vec<&String> =
        blocks.iter().filter_map(|b| if let Block::Heading(h) = b { Some(h) } else { None }).collect();
    o += &heads.iter().map(|h| format!("<a href=\"#{}\">{}</a>", anchor(h), esc(h))).collect::<Vec<_>>().join(" · ");
    o += "</nav>\n";
    for b in blocks {
        match b {
            Block::Heading(h) => {
                let _ = writeln!(o, "<h2 id=\"{}\">{}</h2>", anchor(h), esc(h));
            }
            Block::Para(p) => {
                let _ = writeln!(o, "<p>{}</p>", inline_html(p));
            }
            Block::Callout(p) => {
                let _ = writeln!(o, "<p class=\"call\">{}</p>", inline_html(p));
            }
            Block::Table(head, rows) => {
                o += "<table><tr>";
                for c in head {
                    let _ = write!(o, "<th>{}</th>", esc(c));
                }
                o += "</tr>\n";
                for r in rows {
                    o += "<tr>";
                    for c in r {
                        // numbers right-aligned (they line up by digit), words left
                        let num = is_figure(c);
                        let class = if num { "" } else { " class=\"t\"" };
                        let _ = write!(o, "<td{class}>{}</td>", inline_html(c));
                    }
                    o += "</tr>\n";
                }
                o += "</table>\n";
            }
            Block::List(items) => {
                o += "<ul>";
                for i in items {
                    let _ = write!(o, "<li>{}</li>", inline_html(i));
                }
                o += "</ul>\n";
            }
            Block::Figure(stem, svg) => {
                let _ = writeln!(
                    o,
                    "<figure>{svg}<figcaption><a href=\"{stem}.svg\">{stem}.svg</a> / <a href=\"{stem}.png\">{stem}.png</a></figcaption></figure>"
                );
            }
            Block::Sub(h) => {
                let _ = writeln!(o, "<h3>{}</h3>", esc(h));
            }
            Block::Pre(t) => {
                let _ = writeln!(o, "<pre>{}</pre>", esc(t.trim_end()));
            }
        }
    }
    o += "<h2 id=\"provenance\">Provenance</h2>";
    o + provenance + "</body></html>\n"
}

#[cfg(test)]
mod tests {
    use super::is_figure;

    #[test]
    fn figures_right_notes_left() {
        for c in ["9,857.3", "-52.5%", "+12.9%", "1.65x", "0.257", "-0.1 (abs)", "n/a", "30 s"] {
            assert!(is_figure(c), "{c} is a figure");
        }
        for c in ["938 counted of the 1,000 generated tokens", "off: client TTFT", "", "precise", "x", "-"] {
            assert!(!is_figure(c), "{c} is text");
        }
    }
}
