//! Chart layout: turns a [`Chart`] into a list of pixel-space primitives shared by the SVG and PNG
//! back ends, so both show the same picture.

use super::font;
use super::ticks::{self, Tick};
use super::{Chart, Series};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    pub(crate) fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Circle,
    Square,
    TriangleUp,
    Diamond,
    TriangleDown,
    Cross,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Anchor {
    Start,
    Middle,
    End,
}

#[derive(Clone, Debug)]
pub(crate) enum Prim {
    Rect {
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        color: Rgb,
    },
    Line {
        pts: Vec<(f64, f64)>,
        width: f64,
        color: Rgb,
    },
    Marker {
        x: f64,
        y: f64,
        r: f64,
        shape: Shape,
        color: Rgb,
        hollow: bool,
    },
    /// `(x, y)` is the anchor point; `y` is the vertical middle of the capitals.
    Text {
        x: f64,
        y: f64,
        scale: f64,
        anchor: Anchor,
        vertical: bool,
        bold: bool,
        color: Rgb,
        text: String,
    },
}

pub(crate) struct Scene {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) background: Rgb,
    pub(crate) prims: Vec<Prim>,
}

/// Okabe-Ito colour-blind-safe palette, ordered for contrast on white (yellow last).
pub(crate) const PALETTE: [Rgb; 8] = [
    Rgb(0x00, 0x72, 0xB2), // blue
    Rgb(0xD5, 0x5E, 0x00), // vermillion
    Rgb(0x00, 0x9E, 0x73), // bluish green
    Rgb(0xCC, 0x79, 0xA7), // reddish purple
    Rgb(0xE6, 0x9F, 0x00), // orange
    Rgb(0x56, 0xB4, 0xE9), // sky blue
    Rgb(0x00, 0x00, 0x00), // black
    Rgb(0xF0, 0xE4, 0x42), // yellow
];
const SHAPES: [Shape; 6] =
    [Shape::Circle, Shape::Square, Shape::TriangleUp, Shape::Diamond, Shape::TriangleDown, Shape::Cross];

const INK: Rgb = Rgb(0x22, 0x22, 0x22);
const AXIS: Rgb = Rgb(0x55, 0x55, 0x55);
const GRID: Rgb = Rgb(0xDD, 0xDD, 0xDD);
const GRID_MINOR: Rgb = Rgb(0xEE, 0xEE, 0xEE);
const NOTE: Rgb = Rgb(0x44, 0x44, 0x44);

pub(crate) fn style(i: usize) -> (Rgb, Shape) {
    (PALETTE[i % PALETTE.len()], SHAPES[i % SHAPES.len()])
}

/// Shortens `text` so that it is at most `max_px` wide at font scale `scale`, marking the cut with
/// `...`.
pub(crate) fn fit(text: &str, max_px: f64, scale: f64) -> String {
    let width = |t: &str| font::text_width_units(t) * scale;
    if width(text) <= max_px {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let mut n = chars.len();
    while n > 0 {
        n -= 1;
        let mut cut: String = chars[..n].iter().collect::<String>().trim_end().to_string();
        cut.push_str("...");
        if width(&cut) <= max_px {
            return cut;
        }
    }
    String::new()
}

struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    /// Pixel positions of `lo` and `hi`.
    p0: f64,
    p1: f64,
}

impl Axis {
    fn map(&self, v: f64) -> f64 {
        let t = if self.log {
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        self.p0 + t * (self.p1 - self.p0)
    }
}

fn finite_points(s: &Series, x_log: bool) -> impl Iterator<Item = (f64, f64)> + '_ {
    s.points.iter().copied().filter(move |&(x, y)| x.is_finite() && y.is_finite() && (!x_log || x > 0.0))
}

/// Clips segment `a -> b` to the rectangle (Liang-Barsky); `None` when it lies outside.
fn clip_segment(a: (f64, f64), b: (f64, f64), r: (f64, f64, f64, f64)) -> Option<((f64, f64), (f64, f64))> {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    for (p, q) in [(-dx, a.0 - r.0), (dx, r.2 - a.0), (-dy, a.1 - r.1), (dy, r.3 - a.1)] {
        if p == 0.0 {
            if q < 0.0 {
                return None;
            }
        } else {
            let t = q / p;
            if p < 0.0 {
                t0 = t0.max(t);
            } else {
                t1 = t1.min(t);
            }
        }
    }
    if t0 > t1 {
        return None;
    }
    Some(((a.0 + t0 * dx, a.1 + t0 * dy), (a.0 + t1 * dx, a.1 + t1 * dy)))
}

/// Splits a polyline into the runs that lie inside `r`.
fn clip_polyline(pts: &[(f64, f64)], r: (f64, f64, f64, f64)) -> Vec<Vec<(f64, f64)>> {
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut cur: Vec<(f64, f64)> = Vec::new();
    for w in pts.windows(2) {
        match clip_segment(w[0], w[1], r) {
            Some((a, b)) => {
                if cur.last() != Some(&a) {
                    if cur.len() > 1 {
                        runs.push(std::mem::take(&mut cur));
                    }
                    cur.clear();
                    cur.push(a);
                }
                cur.push(b);
            }
            None => {
                if cur.len() > 1 {
                    runs.push(std::mem::take(&mut cur));
                }
                cur.clear();
            }
        }
    }
    if cur.len() > 1 {
        runs.push(cur);
    }
    runs
}

fn dashed(a: (f64, f64), b: (f64, f64), on: f64, off: f64) -> Vec<Prim> {
    let len = (b.0 - a.0).hypot(b.1 - a.1);
    let mut out = Vec::new();
    if len <= 0.0 {
        return out;
    }
    let (ux, uy) = ((b.0 - a.0) / len, (b.1 - a.1) / len);
    let mut t = 0.0;
    while t < len {
        let e = (t + on).min(len);
        out.push(Prim::Line {
            pts: vec![(a.0 + ux * t, a.1 + uy * t), (a.0 + ux * e, a.1 + uy * e)],
            width: 1.5,
            color: NOTE,
        });
        t += on + off;
    }
    out
}

/// Lays out `chart` on a `width` x `height` canvas.
pub(crate) fn build(chart: &Chart, width: u32, height: u32) -> Scene {
    let width = width.clamp(16, 8192);
    let height = height.clamp(16, 8192);
    let (wf, hf) = (width as f64, height as f64);
    // Text scale: integer multiples of the 5x7 font keep the PNG crisp.
    let s = if wf.min(hf * 1.6) >= 1500.0 {
        3.0
    } else if wf.min(hf * 1.6) >= 560.0 {
        2.0
    } else {
        1.0
    };
    let char_w = font::ADVANCE * s;
    let cap = font::CAP * s;
    let pad = 4.0 * s;
    let line_w = (1.25 * s).max(1.5);
    let marker_r = 2.5 * s + 0.5;

    let mut prims = Vec::new();
    let x_log = chart.x_log && !chart.bars;

    // ---- data extents
    let series: Vec<(usize, &Series)> = chart.series.iter().enumerate().collect();
    let mut xs: Vec<f64> = Vec::new();
    let mut ys: Vec<f64> = Vec::new();
    for (_, s) in &series {
        for (x, y) in finite_points(s, x_log) {
            xs.push(x);
            ys.push(y);
        }
    }
    for (x, y, _) in &chart.annotations {
        if x.is_finite() && (!x_log || *x > 0.0) && !chart.bars {
            xs.push(*x);
        }
        if y.is_finite() {
            ys.push(*y);
        }
    }
    let categories: Vec<f64> = if chart.bars {
        let mut c: Vec<f64> = Vec::new();
        for (_, s) in &series {
            for &(x, _) in &s.points {
                if x.is_finite() && !c.contains(&x) {
                    c.push(x);
                }
            }
        }
        c.sort_by(f64::total_cmp);
        c
    } else {
        Vec::new()
    };

    // ---- y domain and ticks
    let (mut ylo, mut yhi) = ys.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &y| (a.min(y), b.max(y)));
    if chart.bars && ylo.is_finite() {
        ylo = ylo.min(0.0);
        yhi = yhi.max(0.0);
    }
    let fixed_lo = chart.y_min.filter(|v| v.is_finite());
    let fixed_hi = chart.y_max.filter(|v| v.is_finite());
    if let Some(v) = fixed_lo {
        ylo = v;
    }
    if let Some(v) = fixed_hi {
        yhi = v;
    }
    if !ylo.is_finite() || !yhi.is_finite() {
        (ylo, yhi) = match (ylo.is_finite(), yhi.is_finite()) {
            (true, false) => (ylo, ylo + 1.0),
            (false, true) => (yhi - 1.0, yhi),
            _ => (0.0, 1.0),
        };
    }
    if ylo > yhi {
        std::mem::swap(&mut ylo, &mut yhi);
    }
    if yhi - ylo <= f64::EPSILON * yhi.abs().max(1.0) {
        let d = if ylo == 0.0 { 1.0 } else { ylo.abs() * 0.1 };
        if fixed_lo.is_some() && fixed_hi.is_none() {
            yhi = ylo + d;
        } else if fixed_hi.is_some() && fixed_lo.is_none() {
            ylo = yhi - d;
        } else {
            ylo -= d;
            yhi += d;
        }
    }
    let yt_step = ticks::nice_step((yhi - ylo) / 5.0);
    if fixed_lo.is_none() {
        ylo = (ylo / yt_step).floor() * yt_step;
    }
    if fixed_hi.is_none() {
        yhi = (yhi / yt_step).ceil() * yt_step;
    }
    let y_ticks = ticks::linear(ylo, yhi, 5);

    // ---- x domain and ticks
    let (mut xlo, mut xhi) = xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    if !xlo.is_finite() {
        (xlo, xhi) = if x_log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if x_log {
        if xhi / xlo < 1.000_001 {
            xlo /= 2.0;
            xhi *= 2.0;
        }
        let k = (xhi / xlo).powf(0.03);
        xlo /= k;
        xhi *= k;
    } else if !chart.bars {
        if xhi - xlo <= f64::EPSILON * xhi.abs().max(1.0) {
            let d = if xlo == 0.0 { 1.0 } else { xlo.abs() * 0.1 };
            xlo -= d;
            xhi += d;
        }
        let padx = (xhi - xlo) * 0.03;
        xlo -= padx;
        xhi += padx;
    }
    let x_ticks: Vec<Tick> = if chart.bars {
        Vec::new()
    } else if x_log {
        ticks::log(xlo, xhi)
    } else {
        ticks::linear(xlo, xhi, 6)
    };

    // ---- margins
    let y_tick_w =
        y_ticks.iter().filter_map(|t| t.label.as_deref()).map(|l| font::text_width_units(l) * s).fold(char_w, f64::max);
    let title_h = if chart.title.is_empty() { 0.0 } else { cap + 3.0 * pad };
    let left = pad * 2.0 + cap + pad * 2.5 + y_tick_w + pad * 1.5;
    let bottom = pad * 1.5 + cap + pad * 2.0 + cap + pad * 2.5;
    let swatch = 13.0 * s;
    // Series without a label stay out of the legend.
    let max_legend_px = (wf * 0.35 - (pad * 6.5 + swatch * 1.2)).max(4.0 * char_w);
    let legend: Vec<(usize, String)> = series
        .iter()
        .filter(|(_, sr)| !sr.label.trim().is_empty())
        .map(|(i, sr)| (*i, fit(&sr.label, max_legend_px, s)))
        .collect();
    let legend_w = if legend.is_empty() {
        pad * 2.0
    } else {
        let longest = legend.iter().map(|(_, l)| font::text_width_units(l)).fold(0.0, f64::max) * s;
        pad * 3.0 + swatch * 1.2 + pad * 1.5 + longest + pad * 2.0
    };
    let top = title_h + pad * 2.0 + cap / 2.0;
    let (px0, py0) = (left, top);
    let (px1, py1) = ((wf - legend_w).max(px0 + 10.0), (hf - bottom).max(py0 + 10.0));

    let xa = Axis { lo: xlo, hi: xhi, log: x_log, p0: px0, p1: px1 };
    let ya = Axis { lo: ylo, hi: yhi, log: false, p0: py1, p1: py0 };

    // ---- title
    if !chart.title.is_empty() {
        let t = fit(&chart.title, wf - 2.0 * pad, s);
        let tw = font::text_width_units(&t) * s;
        let cx = ((px0 + px1) / 2.0).clamp(pad + tw / 2.0, (wf - pad - tw / 2.0).max(pad + tw / 2.0));
        prims.push(Prim::Text {
            x: cx,
            y: pad * 1.5 + cap / 2.0,
            scale: s,
            anchor: Anchor::Middle,
            vertical: false,
            bold: true,
            color: INK,
            text: t,
        });
    }

    // ---- grid
    let hline = |y: f64, c: Rgb| Prim::Line { pts: vec![(px0, y), (px1, y)], width: 1.0, color: c };
    let vline = |x: f64, c: Rgb| Prim::Line { pts: vec![(x, py0), (x, py1)], width: 1.0, color: c };
    let snap = |v: f64| v.floor() + 0.5;
    for t in &y_ticks {
        let y = snap(ya.map(t.value));
        prims.push(hline(y, GRID));
    }
    for t in x_ticks.iter().filter(|t| t.label.is_none()) {
        prims.push(vline(snap(xa.map(t.value)), GRID_MINOR));
    }
    for t in x_ticks.iter().filter(|t| t.label.is_some()) {
        prims.push(vline(snap(xa.map(t.value)), GRID));
    }

    // ---- data (also recorded as obstacles, so annotation labels can avoid covering it)
    let data_clip = (px0, py0, px1, py1);
    let eps = 0.5;
    let mut obstacle_boxes: Vec<(f64, f64, f64, f64)> = Vec::new();
    let mut obstacle_segs: Vec<((f64, f64), (f64, f64))> = Vec::new();
    if chart.bars {
        let n = categories.len().max(1) as f64;
        let slot = (px1 - px0) / n;
        let group = slot * 0.8;
        let nb = series.len().max(1) as f64;
        let bw = group / nb;
        let gap = if bw > 6.0 { 1.0 } else { 0.0 };
        let y0 = ya.map(0.0f64.clamp(ylo, yhi));
        for (k, (i, s)) in series.iter().enumerate() {
            let (color, _) = style(*i);
            for &(x, y) in &s.points {
                if !x.is_finite() || !y.is_finite() {
                    continue;
                }
                let Some(ci) = categories.iter().position(|&c| c == x) else { continue };
                let bx = px0 + slot * ci as f64 + (slot - group) / 2.0 + bw * k as f64;
                let yv = ya.map(y.clamp(ylo, yhi));
                let (top_y, bot_y) = (yv.min(y0), yv.max(y0));
                prims.push(Prim::Rect { x: bx + gap / 2.0, y: top_y, w: bw - gap, h: bot_y - top_y, color });
                obstacle_boxes.push((bx, top_y, bx + bw, bot_y));
            }
        }
    } else {
        for (i, s) in &series {
            let (color, shape) = style(*i);
            // Break the line at gaps (non-finite values).
            let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
            for &(x, y) in &s.points {
                let ok = x.is_finite() && y.is_finite() && (!x_log || x > 0.0);
                if ok {
                    if let Some(r) = runs.last_mut() {
                        r.push((xa.map(x), ya.map(y)));
                    }
                } else if runs.last().is_some_and(|r| !r.is_empty()) {
                    runs.push(Vec::new());
                }
            }
            for run in &runs {
                for part in clip_polyline(run, data_clip) {
                    obstacle_segs.extend(part.windows(2).map(|w| (w[0], w[1])));
                    prims.push(Prim::Line { pts: part, width: line_w, color });
                }
            }
            for run in &runs {
                for &(x, y) in run {
                    if x >= px0 - eps && x <= px1 + eps && y >= py0 - eps && y <= py1 + eps {
                        prims.push(Prim::Marker { x, y, r: marker_r, shape, color, hollow: false });
                        obstacle_boxes.push((x - marker_r, y - marker_r, x + marker_r, y + marker_r));
                    }
                }
            }
        }
    }

    if prims.iter().all(|p| !matches!(p, Prim::Marker { .. } | Prim::Rect { .. })) {
        prims.push(Prim::Text {
            x: (px0 + px1) / 2.0,
            y: (py0 + py1) / 2.0,
            scale: s,
            anchor: Anchor::Middle,
            vertical: false,
            bold: false,
            color: NOTE,
            text: "no data".to_string(),
        });
    }

    // ---- annotations
    let mut placed: Vec<(f64, f64, f64, f64)> = Vec::new();
    let overlaps = |a: (f64, f64, f64, f64), b: (f64, f64, f64, f64)| a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3;
    for (x, y, label) in &chart.annotations {
        let xp = if chart.bars {
            categories
                .iter()
                .enumerate()
                .filter(|_| x.is_finite())
                .min_by(|a, b| (a.1 - x).abs().total_cmp(&(b.1 - x).abs()))
                .map(|(ci, _)| px0 + (px1 - px0) / categories.len() as f64 * (ci as f64 + 0.5))
        } else if x.is_finite() && (!x_log || *x > 0.0) {
            Some(xa.map(*x))
        } else {
            None
        };
        let Some(xp) = xp.filter(|v| *v >= px0 - eps && *v <= px1 + eps) else { continue };
        let yp = if y.is_finite() { Some(ya.map(*y).clamp(py0, py1)) } else { None };
        let ring = marker_r * 2.2;
        let end = yp.map(|v| v + ring).unwrap_or(py0);
        let mut own_segs = Vec::new();
        if end < py1 {
            prims.extend(dashed((xp, py1), (xp, end), 3.0 * s, 2.5 * s));
            own_segs.push(((xp, py1), (xp, end)));
        }
        if let Some(yp) = yp {
            prims.push(Prim::Marker { x: xp, y: yp, r: ring, shape: Shape::Circle, color: NOTE, hollow: true });
            placed.push((xp - ring, yp - ring, xp + ring, yp + ring));
        }
        let text = fit(label, (px1 - px0) * 0.5, s);
        let tw = font::text_width_units(&text) * s;
        let (hw, hh) = (tw / 2.0 + 2.0 * s, cap / 2.0 + 2.0 * s);
        let g = pad;
        let candidates: Vec<(f64, f64)> = match yp {
            Some(yp) => vec![
                (xp, yp - ring - g - hh),
                (xp + ring + g + hw, yp),
                (xp - ring - g - hw, yp),
                (xp + ring * 0.7 + g + hw, yp - ring * 0.7 - g - hh),
                (xp - ring * 0.7 - g - hw, yp - ring * 0.7 - g - hh),
                (xp, yp + ring + g + hh),
                (xp, yp - ring - 3.0 * g - 3.0 * hh),
            ],
            None => vec![(xp + g + hw, py0 + g + hh), (xp - g - hw, py0 + g + hh)],
        };
        let clamp_c = |(cx, cy): (f64, f64)| {
            let cx = cx.clamp(px0 + hw + 1.0, (px1 - hw - 1.0).max(px0 + hw + 1.0));
            let cy = cy.clamp(py0 + hh + 1.0, (py1 - hh - 1.0).max(py0 + hh + 1.0));
            (cx, cy)
        };
        let score = |c: (f64, f64)| -> usize {
            let bx = (c.0 - hw, c.1 - hh, c.0 + hw, c.1 + hh);
            let segs =
                obstacle_segs.iter().chain(&own_segs).filter(|(a, b)| clip_segment(*a, *b, bx).is_some()).count();
            let boxes = obstacle_boxes.iter().filter(|o| overlaps(**o, bx)).count();
            let notes = placed.iter().filter(|o| overlaps(**o, bx)).count();
            segs + boxes + 5 * notes
        };
        let (mut best, mut best_score) = (clamp_c(candidates[0]), usize::MAX);
        for c in candidates {
            let c = clamp_c(c);
            let sc = score(c);
            if sc < best_score {
                (best, best_score) = (c, sc);
            }
        }
        let (tx, ty) = best;
        placed.push((tx - hw, ty - hh, tx + hw, ty + hh));
        // A leader line when the label had to move away from its ring.
        if let Some(yp) = yp {
            let (dx, dy) = (tx - xp, ty - yp);
            let len = dx.hypot(dy);
            if len > 0.0 {
                let start = (xp + dx / len * ring, yp + dy / len * ring);
                let bx = (tx - hw, ty - hh, tx + hw, ty + hh);
                if let Some((_, _)) = clip_segment(start, (tx, ty), bx) {
                    let mut t_in = 0.0;
                    // Find where the segment enters the label box.
                    for k in 0..=64 {
                        let t = k as f64 / 64.0;
                        let p = (start.0 + (tx - start.0) * t, start.1 + (ty - start.1) * t);
                        if p.0 >= bx.0 && p.0 <= bx.2 && p.1 >= bx.1 && p.1 <= bx.3 {
                            t_in = t;
                            break;
                        }
                    }
                    let end = (start.0 + (tx - start.0) * t_in, start.1 + (ty - start.1) * t_in);
                    if (end.0 - start.0).hypot(end.1 - start.1) > 2.0 * pad {
                        prims.push(Prim::Line { pts: vec![start, end], width: 1.0, color: NOTE });
                    }
                }
            }
        }
        let bg = Rgb(255, 255, 255);
        prims.push(Prim::Rect { x: tx - hw, y: ty - hh, w: 2.0 * hw, h: 2.0 * hh, color: bg });
        prims.push(Prim::Text {
            x: tx,
            y: ty,
            scale: s,
            anchor: Anchor::Middle,
            vertical: false,
            bold: false,
            color: INK,
            text,
        });
    }

    // ---- frame, ticks and tick labels
    let frame = vec![(px0, py0), (px1, py0), (px1, py1), (px0, py1), (px0, py0)];
    let frame: Vec<(f64, f64)> = frame.into_iter().map(|(x, y)| (snap(x), snap(y))).collect();
    prims.push(Prim::Line { pts: frame, width: 1.0, color: AXIS });
    let tick_len = 2.0 * s;
    for t in &y_ticks {
        let y = snap(ya.map(t.value));
        prims.push(Prim::Line { pts: vec![(snap(px0) - tick_len, y), (snap(px0), y)], width: 1.0, color: AXIS });
        if let Some(l) = &t.label {
            prims.push(Prim::Text {
                x: px0 - tick_len - pad,
                y,
                scale: s,
                anchor: Anchor::End,
                vertical: false,
                bold: false,
                color: INK,
                text: l.clone(),
            });
        }
    }
    let label_y = py1 + tick_len + pad + cap / 2.0;
    if chart.bars {
        let n = categories.len().max(1) as f64;
        let slot = (px1 - px0) / n;
        let labels: Vec<String> = if chart.x_categories.len() == categories.len() {
            chart.x_categories.clone()
        } else {
            ticks::labels_for(&categories)
        };
        let widest = labels.iter().map(|l| font::text_width_units(l) * s).fold(0.0, f64::max);
        let every = ((widest + 3.0 * char_w) / slot).ceil().max(1.0) as usize;
        for (ci, l) in labels.into_iter().enumerate() {
            let x = px0 + slot * (ci as f64 + 0.5);
            prims.push(Prim::Line {
                pts: vec![(snap(x), snap(py1)), (snap(x), snap(py1) + tick_len)],
                width: 1.0,
                color: AXIS,
            });
            if ci % every == 0 {
                prims.push(x_tick_label(x, label_y, s, l));
            }
        }
    } else {
        let labelled: Vec<&Tick> = x_ticks.iter().filter(|t| t.label.is_some()).collect();
        let widest =
            labelled.iter().map(|t| font::text_width_units(t.label.as_deref().unwrap_or("")) * s).fold(0.0, f64::max);
        let spacing = if labelled.len() > 1 {
            labelled.windows(2).map(|w| (xa.map(w[1].value) - xa.map(w[0].value)).abs()).fold(f64::MAX, f64::min)
        } else {
            f64::MAX
        };
        let every = ((widest + 2.0 * char_w) / spacing).ceil().max(1.0) as usize;
        for t in &x_ticks {
            let x = snap(xa.map(t.value));
            let len = if t.label.is_some() { tick_len } else { tick_len * 0.6 };
            prims.push(Prim::Line { pts: vec![(x, snap(py1)), (x, snap(py1) + len)], width: 1.0, color: AXIS });
        }
        for (k, t) in labelled.iter().enumerate() {
            if k % every != 0 {
                continue;
            }
            let x = snap(xa.map(t.value));
            prims.push(x_tick_label(x, label_y, s, t.label.clone().unwrap_or_default()));
        }
    }

    // ---- axis labels
    if !chart.x_label.is_empty() {
        prims.push(Prim::Text {
            x: (px0 + px1) / 2.0,
            y: label_y + cap + pad * 2.0,
            scale: s,
            anchor: Anchor::Middle,
            vertical: false,
            bold: false,
            color: INK,
            text: fit(&chart.x_label, px1 - px0, s),
        });
    }
    if !chart.y_label.is_empty() {
        prims.push(Prim::Text {
            x: pad * 2.0 + cap / 2.0,
            y: (py0 + py1) / 2.0,
            scale: s,
            anchor: Anchor::Middle,
            vertical: true,
            bold: false,
            color: INK,
            text: fit(&chart.y_label, py1 - py0, s),
        });
    }

    // ---- legend (outside the plot area, to the right)
    let lx = px1 + pad * 3.0;
    let row_h = (cap * 2.1).max(swatch + 2.0 * s);
    for (k, (i, label)) in legend.iter().enumerate() {
        let (color, shape) = style(*i);
        let cy = py0 + cap / 2.0 + row_h * k as f64;
        if cy > hf {
            break;
        }
        if chart.bars {
            prims.push(Prim::Rect {
                x: lx + swatch * 0.2,
                y: cy - swatch * 0.4,
                w: swatch * 0.8,
                h: swatch * 0.8,
                color,
            });
        } else {
            prims.push(Prim::Line { pts: vec![(lx, cy), (lx + swatch * 1.2, cy)], width: line_w, color });
            prims.push(Prim::Marker { x: lx + swatch * 0.6, y: cy, r: marker_r, shape, color, hollow: false });
        }
        prims.push(Prim::Text {
            x: lx + swatch * 1.2 + pad * 1.5,
            y: cy,
            scale: s,
            anchor: Anchor::Start,
            vertical: false,
            bold: false,
            color: INK,
            text: label.clone(),
        });
    }

    Scene { width, height, background: Rgb(255, 255, 255), prims }
}

/// A label under an x-axis tick, centred on it.
fn x_tick_label(x: f64, y: f64, scale: f64, text: String) -> Prim {
    Prim::Text { x, y, scale, anchor: Anchor::Middle, vertical: false, bold: false, color: INK, text }
}
