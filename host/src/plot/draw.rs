//! Draws a [`Chart`] with plotters on any backend (SVG text or an RGB bitmap), in the house style.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::style::{self, AXIS, FONT, GRID, GRID_MINOR, INK, NOTE, SHADE, SHADE_ALPHA, Shape, Sizes};
use super::{Chart, Series};

/// A pixel offset.
type Px = (i32, i32);

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn font(size: f64, color: RGBColor) -> TextStyle<'static> {
    TextStyle { font: (FONT, size).into_font(), color: color.to_backend_color(), pos: Pos::default() }
}

/// A compact tick label for `v` on an axis whose largest magnitude is `mag`: one unit per axis
/// (`0`, `0.25`, `1500`; `10k`, `15k`; `1.5M`).
pub fn format_tick(v: f64, mag: f64) -> String {
    let trim = |s: String| -> String {
        if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
    };
    if v.abs() < 1e-12 {
        "0".into()
    } else if mag >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if mag >= 1e4 {
        trim(format!("{:.2}", v / 1e3)) + "k"
    } else if mag < 1e-3 {
        format!("{v:.1e}")
    } else {
        trim(format!("{v:.3}"))
    }
}

/// A bar's value label: three significant digits (`0.362`, `31.1`, `94.9`, `1,234`).
pub fn bar_value(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        let s = format!("{a:.0}");
        let mut o = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                o.push(',');
            }
            o.push(c);
        }
        if v < 0.0 { format!("-{o}") } else { o }
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// `text`, shortened with "..." until it is at most `max_px` wide in `style`.
fn fit<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, text: &str, style: &TextStyle, max_px: f64) -> String {
    let width = |t: &str| area.estimate_text_size(t, style).map_or(0.0, |(w, _)| f64::from(w));
    if width(text) <= max_px {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    (0..chars.len())
        .rev()
        .map(|n| chars[..n].iter().collect::<String>().trim_end().to_string() + "...")
        .find(|t| width(t) <= max_px)
        .unwrap_or_default()
}

fn usable(x: f64, y: f64, x_log: bool, y_log: bool) -> bool {
    x.is_finite() && y.is_finite() && (!x_log || x > 0.0) && (!y_log || y > 0.0)
}

/// `(lo, hi)` of the finite values, widened when empty or flat.
fn extent(vals: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    match (lo.is_finite() && hi.is_finite(), log) {
        (false, true) => (1.0, 10.0),
        (false, false) => (0.0, 1.0),
        (true, true) if hi / lo < 1.000_001 => (lo / 2.0, hi * 2.0),
        (true, false) if hi - lo <= f64::EPSILON * hi.abs().max(1.0) => {
            let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo - d, hi + d)
        }
        _ => (lo, hi),
    }
}

/// Pads `(lo, hi)` by `frac` of its span (a factor on log axes).
fn pad(lo: f64, hi: f64, log: bool, frac: f64) -> (f64, f64) {
    if log {
        let k = (hi / lo).powf(frac);
        (lo / k, hi * k)
    } else {
        let d = (hi - lo) * frac;
        (lo - d, hi + d)
    }
}

/// The 1-2-5 step closest to `raw` (`raw > 0`).
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let base = 10f64.powf(raw.log10().floor());
    let m = match raw / base {
        f if f < 1.5 => 1.0,
        f if f < 3.0 => 2.0,
        f if f < 7.0 => 5.0,
        _ => 10.0,
    };
    m * base
}

/// Multiples of `step` in `[lo, hi]`, with float noise rounded away.
fn multiples(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let (first, last) = ((lo / step - 1e-9).ceil() as i64, (hi / step + 1e-9).floor() as i64);
    let p = 10f64.powi((-(step.log10().floor()) as i32).clamp(0, 15));
    (first..=last.min(first + 200)).map(|i| (i as f64 * step * p).round() / p).collect()
}

/// An axis: its range, linear or logarithmic, with the ticks we choose (plotters' own choice of
/// ticks labels a log axis with decades only and cannot be told to use 1-2-5 steps).
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    labelled: Vec<f64>,
    light: Vec<f64>,
}

impl Axis {
    /// A linear axis labelled at about `target` 1-2-5 steps (or at `at`, when given).
    /// `whole`: steps of at least 1 (for counts).
    fn linear(lo: f64, hi: f64, target: usize, whole: bool, at: Option<Vec<f64>>) -> Axis {
        let step = nice_step((hi - lo) / target as f64);
        let labelled = at.unwrap_or_else(|| multiples(lo, hi, if whole { step.max(1.0) } else { step }));
        Axis { lo, hi, log: false, labelled, light: Vec::new() }
    }

    /// A log axis: decades labelled (with 2 and 5, or every digit, when fewer than three decades are
    /// in view), the other digits as unlabelled grid lines.
    fn log(lo: f64, hi: f64) -> Axis {
        let (e0, e1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        let all: Vec<(u32, f64)> = (e0..=e1.min(e0 + 60))
            .flat_map(|e| (1..=9).map(move |m| (m, f64::from(m) * 10f64.powi(e))))
            .filter(|&(_, v)| v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9))
            .collect();
        let pick = |ms: &[u32]| all.iter().filter(|(m, _)| ms.contains(m)).map(|p| p.1).collect::<Vec<f64>>();
        let digits = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        let labelled =
            [&[1][..], &[1, 2, 5]].iter().map(|ms| pick(ms)).find(|v| v.len() >= 3).unwrap_or_else(|| pick(&digits));
        Axis { lo, hi, log: true, labelled, light: all.into_iter().map(|p| p.1).collect() }
    }

    fn fraction(&self, v: f64) -> f64 {
        if self.log {
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    /// The largest magnitude labelled.
    fn magnitude(&self) -> f64 {
        self.labelled.iter().fold(0.0, |m: f64, v| m.max(v.abs()))
    }

    /// The middle of the axis (geometric on a log axis).
    fn middle(&self) -> f64 {
        if self.log { (self.lo * self.hi).sqrt() } else { (self.lo + self.hi) / 2.0 }
    }
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        limit.0 + (self.fraction(*v) * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() { self.light.clone() } else { self.labelled.clone() }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// One legend row.
enum Key {
    Series(usize),
    Bar(usize),
    Shade,
    Note,
}

/// Draws `chart` on `root`.
pub(crate) fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult<DB> {
    style::register_font();
    root.fill(&WHITE)?;
    let (w, h) = root.dim_in_pixel();
    let sz = style::sizes(w, h);
    let body = if chart.title.is_empty() {
        root.clone()
    } else {
        let t = font(sz.title, INK);
        let title = fit(root, &chart.title, &t, f64::from(w) - 2.0 * f64::from(sz.pad));
        root.margin(sz.pad, 0, 0, 0).titled(&title, t)?
    };

    // Legend (outside the plot, to the right): series with a label, shaded ranges, notes.
    let label_font = font(sz.tick, INK);
    let max_legend = f64::from(w) * 0.33;
    let swatch = sz.tick * 2.2;
    let mut rows: Vec<(Key, String)> = Vec::new();
    for (i, s) in chart.series.iter().enumerate() {
        if !s.label.trim().is_empty() {
            rows.push((if chart.bars { Key::Bar(i) } else { Key::Series(i) }, s.label.clone()));
        }
    }
    for (_, _, label) in chart.shades.iter().filter(|s| !s.2.is_empty()) {
        rows.push((Key::Shade, label.clone()));
    }
    for note in &chart.notes {
        rows.push((Key::Note, note.clone()));
    }
    let text_max = max_legend - swatch - 3.0 * f64::from(sz.pad);
    let rows: Vec<(Key, String)> = rows.into_iter().map(|(k, l)| (k, fit(root, &l, &label_font, text_max))).collect();
    let widest =
        rows.iter().map(|(_, l)| body.estimate_text_size(l, &label_font).map_or(0, |(w, _)| w)).max().unwrap_or(0);
    let legend_w =
        if rows.is_empty() { sz.pad } else { (f64::from(widest) + swatch + 3.0 * f64::from(sz.pad)).round() as i32 };
    let (bw, _) = body.dim_in_pixel();
    let (plot, legend) = body.split_horizontally((bw as i32 - legend_w).max(bw as i32 / 2));

    let (x_log, y_log) = (chart.x_log && !chart.bars, chart.y_log && !chart.bars);
    // The x domain: bar categories sit at 0, 1, ... n - 1.
    let categories = bar_categories(chart);
    let (xlo, xhi) = if chart.bars {
        (-0.5, categories.len().max(1) as f64 - 0.5)
    } else {
        let xs = chart.series.iter().flat_map(|s| &s.points).filter(|p| usable(p.0, p.1, x_log, y_log)).map(|p| p.0);
        let xs = xs.chain(chart.annotations.iter().map(|a| a.0).filter(|x| x.is_finite() && (!x_log || *x > 0.0)));
        let (lo, hi) = extent(xs, x_log);
        pad(lo, hi, x_log, 0.03)
    };
    let ys = chart.series.iter().flat_map(|s| &s.points).filter(|p| usable(p.0, p.1, x_log, y_log)).map(|p| p.1);
    let ys = ys.chain(chart.annotations.iter().map(|a| a.1).filter(|y| y.is_finite() && (!y_log || *y > 0.0)));
    let ys = ys.chain(chart.bars.then_some(0.0));
    let (mut ylo, mut yhi) = extent(ys.clone(), y_log);
    // Counts (e.g. pods) get whole-number ticks.
    let whole_y = ys.clone().count() > 0 && ys.clone().all(|y| y.fract() == 0.0);
    if y_log {
        // Whole decades, so that the axis is labelled at both ends.
        (ylo, yhi) = (10f64.powf(ylo.log10().floor()), 10f64.powf(yhi.log10().ceil()));
    } else {
        // Out to whole ticks, then a little more so that markers on the ends are not cut.
        let step = nice_step((yhi - ylo) / 6.0);
        let step = if whole_y { step.max(1.0) } else { step };
        let (rlo, rhi) = ((ylo / step).floor() * step, (yhi / step).ceil() * step);
        let (plo, phi) = pad(rlo, rhi, false, 0.025);
        ylo = if chart.bars && ylo >= 0.0 { rlo } else { plo };
        yhi = phi;
    }
    let fixed = |v: Option<f64>| v.filter(|v| v.is_finite() && (!y_log || *v > 0.0));
    ylo = fixed(chart.y_min).unwrap_or(ylo);
    yhi = fixed(chart.y_max).unwrap_or(yhi);
    if ylo > yhi {
        std::mem::swap(&mut ylo, &mut yhi);
    }
    if yhi - ylo <= f64::EPSILON * yhi.abs().max(1.0) {
        yhi = if y_log { ylo * 10.0 } else { ylo + 1.0 };
    }

    let frame = Frame { chart, sz: &sz, categories: &categories };
    let x = if chart.bars {
        Axis::linear(xlo, xhi, 1, false, Some((0..categories.len()).map(|i| i as f64).collect()))
    } else if x_log {
        Axis::log(xlo, xhi)
    } else {
        Axis::linear(xlo, xhi, 7, false, None)
    };
    let y = if y_log { Axis::log(ylo, yhi) } else { Axis::linear(ylo, yhi, 6, whole_y, None) };
    frame.plot(&plot, x, y)?;
    draw_legend(&legend, &rows, &sz, &label_font, swatch)
}

fn bar_categories(chart: &Chart) -> Vec<f64> {
    let mut c: Vec<f64> = Vec::new();
    if chart.bars {
        for &(x, _) in chart.series.iter().flat_map(|s| &s.points) {
            if x.is_finite() && !c.contains(&x) {
                c.push(x);
            }
        }
        c.sort_by(f64::total_cmp);
    }
    c
}

struct Frame<'a> {
    chart: &'a Chart,
    sz: &'a Sizes,
    categories: &'a [f64],
}

impl Frame<'_> {
    fn plot<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, x: Axis, y: Axis) -> DrawResult<DB> {
        let (chart, sz) = (self.chart, self.sz);
        let tick_font = font(sz.tick, INK);
        let y_ticks_w = (sz.tick * 3.6).round() as i32;
        let mut cc = ChartBuilder::on(area)
            .margin(sz.pad)
            .margin_right(sz.pad * 2)
            .x_label_area_size((sz.tick + sz.label * 1.9).round() as i32)
            .y_label_area_size(y_ticks_w + (sz.label * 1.6).round() as i32)
            .build_cartesian_2d(x, y)?;
        let (x_mag, y_mag) = (cc.as_coord_spec().x_spec().magnitude(), cc.as_coord_spec().y_spec().magnitude());
        let cats: Vec<String> = if self.chart.x_categories.len() == self.categories.len() {
            chart.x_categories.clone()
        } else {
            let mag = self.categories.iter().fold(0.0, |m: f64, v| m.max(v.abs()));
            self.categories.iter().map(|v| format_tick(*v, mag)).collect()
        };
        let x_fmt = |v: &f64| {
            if chart.bars {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 {
                    cats.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            } else {
                format_tick(*v, x_mag)
            }
        };
        let y_fmt = |v: &f64| format_tick(*v, y_mag);
        let desc_font = font(sz.label, INK);
        let (pw, ph) = cc.plotting_area().dim_in_pixel();
        let x_desc = fit(area, &chart.x_label, &desc_font, f64::from(pw));
        let y_desc = fit(area, &chart.y_label, &desc_font, f64::from(ph));
        let mut mesh = cc.configure_mesh();
        mesh.x_desc(x_desc)
            .y_desc(y_desc)
            .axis_desc_style(desc_font)
            .label_style(tick_font)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .bold_line_style(GRID.stroke_width(1))
            .light_line_style(GRID_MINOR.stroke_width(1))
            .axis_style(AXIS.stroke_width(1))
            .y_labels(7)
            .x_labels(if chart.bars { self.categories.len().max(1) } else { 8 });
        if chart.bars {
            mesh.disable_x_mesh();
        }
        mesh.draw()?;

        let (xr, yr) = (cc.x_range(), cc.y_range());
        let (ylo, yhi) = (yr.start, yr.end);
        let inside = |x: f64, y: f64| {
            usable(x, y, chart.x_log && !chart.bars, chart.y_log && !chart.bars)
                && x >= xr.start
                && x <= xr.end
                && y >= ylo
                && y <= yhi
        };

        // Shaded x ranges, under the data.
        for (a, b, _) in &chart.shades {
            let (a, b) = (a.max(xr.start), b.min(xr.end));
            if a < b {
                cc.draw_series(std::iter::once(Rectangle::new([(a, ylo), (b, yhi)], SHADE.mix(SHADE_ALPHA).filled())))?;
            }
        }

        if chart.bars {
            self.draw_bars(&mut cc, ylo, yhi)?;
        } else {
            for (i, s) in chart.series.iter().enumerate() {
                self.draw_series(&mut cc, i, s, &inside)?;
            }
        }

        // Annotations: a ring at the point, a dashed drop line to the x axis, the text beside it.
        self.draw_annotations(area, &mut cc, &inside)?;
        if !chart.series.iter().flat_map(|s| &s.points).any(|p| inside(p.0, p.1) || (chart.bars && p.1.is_finite())) {
            let (mid_x, mid_y) = (cc.as_coord_spec().x_spec().middle(), cc.as_coord_spec().y_spec().middle());
            let t = font(sz.label, NOTE).pos(Pos::new(HPos::Center, VPos::Center));
            cc.draw_series(std::iter::once(Text::new("no data", (mid_x, mid_y), t)))?;
        }
        Ok(())
    }

    /// Bar series: one group per category, a bar per series, from 0 (within the y range).
    fn draw_bars<DB: DrawingBackend>(
        &self,
        cc: &mut ChartContext<DB, Cartesian2d<Axis, Axis>>,
        ylo: f64,
        yhi: f64,
    ) -> DrawResult<DB> {
        let chart = self.chart;
        let n = chart.series.len().max(1) as f64;
        let group = 0.8;
        for (k, s) in chart.series.iter().enumerate() {
            let color = style::series_style(k).color;
            let base = 0f64.clamp(ylo, yhi);
            let bars = s.points.iter().filter_map(|&(x, y)| {
                let ci = self.categories.iter().position(|&c| c == x)? as f64;
                let x0 = ci - group / 2.0 + group / n * k as f64;
                (y.is_finite()).then(|| {
                    let mut r =
                        Rectangle::new([(x0, base), (x0 + group / n * 0.92, y.clamp(ylo, yhi))], color.filled());
                    r.set_margin(0, 0, 0, 0);
                    r
                })
            });
            cc.draw_series(bars)?;
            if chart.bar_values {
                let t = font(self.sz.tick, INK).pos(Pos::new(HPos::Center, VPos::Bottom));
                let labels = s.points.iter().filter_map(|&(x, y)| {
                    let ci = self.categories.iter().position(|&c| c == x)? as f64;
                    let mid = ci - group / 2.0 + group / n * (k as f64 + 0.46);
                    y.is_finite().then(|| Text::new(bar_value(y), (mid, y.clamp(ylo, yhi)), t.clone()))
                });
                cc.draw_series(labels)?;
            }
        }
        Ok(())
    }

    /// Annotations: a ring at the point, a dashed drop line to the x axis, the text beside it.
    fn draw_annotations<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        cc: &mut ChartContext<DB, Cartesian2d<Axis, Axis>>,
        inside: &dyn Fn(f64, f64) -> bool,
    ) -> DrawResult<DB> {
        let (chart, sz) = (self.chart, self.sz);
        let (xr, yr) = (cc.x_range(), cc.y_range());
        let (ylo, yhi) = (yr.start, yr.end);
        for (ax, ay, text) in &chart.annotations {
            let ax = if chart.bars {
                match self.categories.iter().position(|c| c == ax) {
                    Some(i) => i as f64,
                    None => continue,
                }
            } else {
                *ax
            };
            let has_y = inside(ax, *ay);
            if !inside(ax, if has_y { *ay } else { ylo.max(f64::MIN_POSITIVE) }) {
                continue;
            }
            let top = if has_y { *ay } else { yhi };
            let dash = (sz.marker * 0.8, sz.marker * 0.6);
            cc.draw_series(std::iter::once(DashedPathElement::new(
                [(ax, ylo), (ax, top)],
                dash.0,
                dash.1,
                NOTE.stroke_width(1),
            )))?;
            let ring = (sz.marker * 2.2).round() as i32;
            let t = font(sz.tick, INK);
            let (tw, th) = area.estimate_text_size(text, &t)?;
            let (tw, th) = (tw as i32, th as i32);
            // Beside the ring, towards the middle of the plot.
            let (px, _) = cc.backend_coord(&(ax, top));
            let (mid, _) = cc.backend_coord(&(xr.start, top));
            let (end, _) = cc.backend_coord(&(xr.end, top));
            let right = px < (mid + end) / 2;
            let dx = if right { ring / 2 } else { -ring / 2 - tw };
            // Below the ring (annotations mark minima, like the sweet spot of a latency curve).
            let dy = if has_y { ring + sz.pad / 2 } else { sz.pad };
            let label = EmptyElement::at((ax, top))
                + Rectangle::new([(dx - 3, dy - 2), (dx + tw + 3, dy + th + 2)], WHITE.mix(0.8).filled())
                + Text::new(text.clone(), (dx, dy), t);
            if has_y {
                cc.draw_series(std::iter::once(
                    EmptyElement::at((ax, top)) + Circle::new((0, 0), ring, NOTE.stroke_width(2)),
                ))?;
            }
            cc.draw_series(std::iter::once(label))?;
        }
        Ok(())
    }

    /// A line series: its runs (broken at gaps), then a marker at every point.
    fn draw_series<DB: DrawingBackend>(
        &self,
        cc: &mut ChartContext<DB, Cartesian2d<Axis, Axis>>,
        i: usize,
        s: &Series,
        inside: &dyn Fn(f64, f64) -> bool,
    ) -> DrawResult<DB> {
        let st = style::series_style(i);
        let sz = self.sz;
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(x, y) in &s.points {
            if inside(x, y) {
                runs.last_mut().expect("one run").push((x, y));
            } else if runs.last().is_some_and(|r| !r.is_empty()) {
                runs.push(Vec::new());
            }
        }
        let line = st.color.stroke_width(sz.line);
        for run in runs.iter().filter(|r| r.len() > 1) {
            match st.dash {
                None => cc.draw_series(std::iter::once(PathElement::new(run.clone(), line)))?,
                Some((on, off)) => {
                    // Dash lengths are in pixels, in units of the line width.
                    let lw = f64::from(sz.line);
                    cc.draw_series(std::iter::once(DashedPathElement::new(run.clone(), on * lw, off * lw, line)))?
                }
            };
        }
        let r = sz.marker * st.marker_scale;
        cc.draw_series(runs.iter().flatten().map(|&p| {
            let (fill, edge) = marker(&st, r);
            EmptyElement::at(p) + fill + edge
        }))?;
        Ok(())
    }
}

/// A marker around (0, 0) in pixels: its filled shape and its outline. Filled markers get a thin white
/// outline (so that overlapping markers stay apart); hollow ones a coloured outline only, so that
/// smaller markers of equal points show inside them.
fn marker(st: &style::SeriesStyle, r: f64) -> (Polygon<Px>, PathElement<Px>) {
    let pts = shape_points(st.shape, r);
    let mut outline = pts.clone();
    outline.push(pts[0]);
    if st.hollow {
        (Polygon::new(pts, WHITE.filled()), PathElement::new(outline, st.color.stroke_width(2)))
    } else {
        (Polygon::new(pts, st.color.filled()), PathElement::new(outline, WHITE.stroke_width(1)))
    }
}

/// The outline of a marker shape around (0, 0), radius about `r` pixels.
fn shape_points(shape: Shape, r: f64) -> Vec<Px> {
    let s3 = 0.866_025_403_784_438_6;
    let pts: Vec<(f64, f64)> = match shape {
        Shape::Circle => {
            (0..20).map(|k| f64::from(k) * std::f64::consts::TAU / 20.0).map(|a| (r * a.cos(), r * a.sin())).collect()
        }
        Shape::Square => {
            let a = r * 0.85;
            vec![(-a, -a), (a, -a), (a, a), (-a, a)]
        }
        Shape::Diamond => {
            let a = r * 1.25;
            vec![(0.0, -a), (a, 0.0), (0.0, a), (-a, 0.0)]
        }
        Shape::TriangleUp => vec![(0.0, -r * 1.25), (s3 * r * 1.25, r * 0.7), (-s3 * r * 1.25, r * 0.7)],
        Shape::TriangleDown => vec![(0.0, r * 1.25), (s3 * r * 1.25, -r * 0.7), (-s3 * r * 1.25, -r * 0.7)],
        Shape::Cross => {
            let (l, t) = (r * 1.15, r * 0.32);
            vec![
                (-t, -l),
                (t, -l),
                (t, -t),
                (l, -t),
                (l, t),
                (t, t),
                (t, l),
                (-t, l),
                (-t, t),
                (-l, t),
                (-l, -t),
                (-t, -t),
            ]
        }
    };
    pts.into_iter().map(|(x, y)| (x.round() as i32, y.round() as i32)).collect()
}

/// The legend: one row per series (a stretch of its line with its marker, or a bar swatch), per
/// shaded range and per note.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    rows: &[(Key, String)],
    sz: &Sizes,
    label_font: &TextStyle,
    swatch: f64,
) -> DrawResult<DB> {
    let row_h = (sz.tick * 1.9).round() as i32;
    let x0 = sz.pad;
    let x1 = x0 + swatch.round() as i32;
    let mut y = sz.pad * 2 + row_h / 2 + (sz.title * 0.2) as i32;
    for (key, text) in rows {
        match key {
            Key::Series(i) => {
                let st = style::series_style(*i);
                let line = st.color.stroke_width(sz.line);
                match st.dash {
                    None => area.draw(&PathElement::new(vec![(x0, y), (x1, y)], line))?,
                    Some((on, off)) => {
                        let lw = f64::from(sz.line);
                        area.draw(&DashedPathElement::new(vec![(x0, y), (x1, y)], on * lw, off * lw, line))?
                    }
                }
                let (fill, edge) = marker(&st, sz.marker * st.marker_scale);
                area.draw(&(EmptyElement::at(((x0 + x1) / 2, y)) + fill + edge))?;
            }
            Key::Bar(i) => {
                let h = (sz.tick * 0.45).round() as i32;
                area.draw(&Rectangle::new([(x0 + h, y - h), (x1 - h, y + h)], style::series_style(*i).color.filled()))?;
            }
            Key::Shade => {
                let h = (sz.tick * 0.55).round() as i32;
                area.draw(&Rectangle::new([(x0, y - h), (x1, y + h)], SHADE.mix(SHADE_ALPHA).filled()))?;
            }
            Key::Note => {}
        }
        let (tx, color) = if matches!(key, Key::Note) { (x0, NOTE) } else { (x1 + sz.pad, INK) };
        let t =
            TextStyle { color: color.to_backend_color(), ..label_font.clone() }.pos(Pos::new(HPos::Left, VPos::Center));
        area.draw(&Text::new(text.clone(), (tx, y), t))?;
        y += row_h;
    }
    Ok(())
}
