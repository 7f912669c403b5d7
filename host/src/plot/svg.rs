//! Writes a [`Scene`] as SVG text: one `<polyline>` per line run, `<text>` in a sans-serif font.

use std::fmt::Write;

use super::font;
use super::scene::{Anchor, Prim, Scene, Shape};

fn n(v: f64) -> String {
    let r = (v * 100.0).round() / 100.0;
    let r = if r == 0.0 { 0.0 } else { r };
    let s = format!("{r:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn points(pts: &[(f64, f64)]) -> String {
    pts.iter().map(|&(x, y)| format!("{},{}", n(x), n(y))).collect::<Vec<_>>().join(" ")
}

/// The outline of a marker shape as SVG polygon points (circles are drawn as `<circle>`).
fn marker_points(shape: Shape, x: f64, y: f64, r: f64) -> String {
    let s3 = 0.866_025_403_784_438_6;
    let pts: Vec<(f64, f64)> = match shape {
        Shape::Circle => Vec::new(),
        Shape::Square => {
            let a = r * 0.85;
            vec![(-a, -a), (a, -a), (a, a), (-a, a)]
        }
        Shape::Diamond => {
            let a = r * 1.25;
            vec![(0.0, -a), (a, 0.0), (0.0, a), (-a, 0.0)]
        }
        Shape::TriangleUp | Shape::TriangleDown => {
            let rr = r * 1.25;
            let sign = if shape == Shape::TriangleUp { 1.0 } else { -1.0 };
            let off = rr * 0.15;
            [(0.0, -rr), (s3 * rr, rr / 2.0), (-s3 * rr, rr / 2.0)]
                .into_iter()
                .map(|(px, py)| (px, sign * (py + off)))
                .collect()
        }
        Shape::Cross => {
            let (l, t) = (r * 1.15, r * 0.38);
            let arm = [(-t, -l), (t, -l), (t, -t)];
            let mut v = Vec::new();
            for q in 0..4 {
                for &(px, py) in &arm {
                    let (px, py) = match q {
                        0 => (px, py),
                        1 => (-py, px),
                        2 => (-px, -py),
                        _ => (py, -px),
                    };
                    v.push((px, py));
                }
            }
            let c = std::f64::consts::FRAC_1_SQRT_2;
            v.into_iter().map(|(px, py)| ((px - py) * c, (px + py) * c)).collect()
        }
    };
    points(&pts.into_iter().map(|(px, py)| (x + px, y + py)).collect::<Vec<_>>())
}

pub(crate) fn render(scene: &Scene) -> String {
    let (w, h) = (scene.width, scene.height);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="Helvetica, Arial, 'DejaVu Sans', sans-serif">"#
    );
    let _ = writeln!(o, r#"<rect x="0" y="0" width="{w}" height="{h}" fill="{}"/>"#, scene.background.hex());
    for p in &scene.prims {
        match p {
            Prim::Rect { x, y, w, h, color } => {
                let _ = writeln!(
                    o,
                    r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>"#,
                    n(*x),
                    n(*y),
                    n(w.max(0.0)),
                    n(h.max(0.0)),
                    color.hex()
                );
            }
            Prim::Line { pts, width, color } => {
                let _ = writeln!(
                    o,
                    r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="{}" stroke-linejoin="round" stroke-linecap="round"/>"#,
                    points(pts),
                    color.hex(),
                    n(*width)
                );
            }
            Prim::Marker { x, y, r, shape, color, hollow } => {
                if *hollow {
                    let t = (r / 4.0).max(1.5);
                    let _ = writeln!(
                        o,
                        r#"<circle cx="{}" cy="{}" r="{}" fill="none" stroke="{}" stroke-width="{}"/>"#,
                        n(*x),
                        n(*y),
                        n(*r),
                        color.hex(),
                        n(t)
                    );
                } else if *shape == Shape::Circle {
                    let _ = writeln!(
                        o,
                        r##"<circle cx="{}" cy="{}" r="{}" fill="{}" stroke="#ffffff" stroke-width="1.5"/>"##,
                        n(*x),
                        n(*y),
                        n(*r + 0.75),
                        color.hex()
                    );
                } else {
                    let _ = writeln!(
                        o,
                        r##"<polygon points="{}" fill="{}" stroke="#ffffff" stroke-width="1.5" stroke-linejoin="round"/>"##,
                        marker_points(*shape, *x, *y, *r + 0.5),
                        color.hex()
                    );
                }
            }
            Prim::Text { x, y, scale, anchor, vertical, bold, color, text } => {
                // Size the font so its capitals match the bitmap font's; place the baseline where the
                // bitmap's caps end.
                let size = font::CAP * scale / 0.72;
                let base = font::CAP * scale / 2.0;
                let anchor = match anchor {
                    Anchor::Start => "start",
                    Anchor::Middle => "middle",
                    Anchor::End => "end",
                };
                let weight = if *bold { r#" font-weight="bold""# } else { "" };
                let (tx, ty, transform) = if *vertical {
                    (*x + base, *y, format!(r#" transform="rotate(-90 {} {})""#, n(*x + base), n(*y)))
                } else {
                    (*x, *y + base, String::new())
                };
                let _ = writeln!(
                    o,
                    r#"<text x="{}" y="{}" font-size="{}" text-anchor="{anchor}" fill="{}"{weight}{transform}>{}</text>"#,
                    n(tx),
                    n(ty),
                    n(size),
                    color.hex(),
                    escape(text)
                );
            }
        }
    }
    o.push_str("</svg>\n");
    o
}
