//! Chart rendering for sweeps and reports: line charts (linear or log axes) and grouped bar charts,
//! as SVG text or PNG bytes, drawn with [plotters] in one house style ([`style`]).
//!
//! Both outputs come from the same drawing code, so they show the same picture: title, labelled
//! axes with grid lines, per series one colour (Okabe-Ito, colour-blind safe), one marker shape at
//! every point and one dash pattern, a legend outside the plot area, shaded x ranges, notes and
//! annotations. Text is DejaVu Sans: embedded for the PNGs (no system fonts are read), named in the
//! SVGs. Output is deterministic: the same chart gives byte-identical files (versions are pinned).
//!
//! ```
//! use brokerlab::plot::{Chart, Series, png, svg};
//! let chart = Chart {
//!     title: "Hit rate vs capacity".into(),
//!     x_label: "capacity per pod (blocks)".into(),
//!     y_label: "hit rate (%)".into(),
//!     x_log: true,
//!     series: vec![Series::new("round-robin", vec![(100.0, 10.0), (1000.0, 40.0), (10000.0, 90.0)])],
//!     ..Chart::default()
//! };
//! assert!(svg(&chart, 800, 480).starts_with("<svg"));
//! assert!(png(&chart, 800, 480).starts_with(b"\x89PNG"));
//! ```

mod bitmap;
mod draw;
mod style;

use plotters::prelude::{IntoDrawingArea, SVGBackend};

pub use draw::{bar_value, format_tick};

/// One line (or one colour of bars): `(x, y)` points in drawing order. A non-finite `y` (or `x`) is a
/// gap: the line breaks there.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { label: label.into(), points }
    }
}

/// A chart. Axis labels should carry their units, e.g. `"p90 latency (s)"`. Series are drawn in
/// order, each over the ones before it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Logarithmic x axis (points with `x <= 0` are skipped). Ignored for bar charts.
    pub x_log: bool,
    /// Logarithmic y axis, in whole decades (points with `y <= 0` are skipped). Ignored for bars.
    pub y_log: bool,
    /// Fixed y range ends; `None` picks a range around the data.
    pub y_min: Option<f64>,
    pub y_max: Option<f64>,
    /// Grouped bar chart: each distinct x is a category (e.g. a pod index), one bar per series.
    pub bars: bool,
    /// Print each bar's value above it (bars only): a linear axis spanning 0.3 s to 100 s hides
    /// the short bars, and bars cannot take a log axis.
    pub bar_values: bool,
    /// Names of the bar categories, in ascending x order (empty: the x values are printed).
    pub x_categories: Vec<String>,
    /// Markers at data coordinates `(x, y, text)`, e.g. `(0.4, 1.2, "sweet spot")`: a ring at the
    /// point, a dashed drop line to the x axis, the text beside it. A non-finite `y` draws only the line.
    pub annotations: Vec<(f64, f64, String)>,
    /// Shaded x ranges `(from, to, legend label)` under the data, e.g. a load burst.
    pub shades: Vec<(f64, f64, String)>,
    /// Lines of text under the legend entries.
    pub notes: Vec<String>,
}

/// Smallest and largest canvas side drawn (requests outside are clamped).
const MIN_SIDE: (u32, u32) = (240, 160);
const MAX_SIDE: u32 = 8192;

fn clamp(width: u32, height: u32) -> (u32, u32) {
    (width.clamp(MIN_SIDE.0, MAX_SIDE), height.clamp(MIN_SIDE.1, MAX_SIDE))
}

/// The chart as an SVG document (`width` x `height` user units, with a `viewBox`).
pub fn svg(chart: &Chart, width: u32, height: u32) -> String {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, clamp(width, height)).into_drawing_area();
        draw::draw(&root, chart).expect("drawing SVG into a string cannot fail");
        root.present().expect("presenting SVG into a string cannot fail");
    }
    out
}

/// The chart as a PNG file (8-bit RGB).
pub fn png(chart: &Chart, width: u32, height: u32) -> Vec<u8> {
    let (w, h) = clamp(width, height);
    let mut rgb = vec![255u8; w as usize * h as usize * 3];
    {
        let root = bitmap::Bitmap::new(&mut rgb, (w, h)).into_drawing_area();
        draw::draw(&root, chart).expect("drawing into a buffer of the right size cannot fail");
        root.present().expect("presenting into a buffer cannot fail");
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().expect("writing a PNG header to memory cannot fail");
    writer.write_image_data(&rgb).expect("the buffer is w x h x 3 bytes");
    writer.finish().expect("writing a PNG to memory cannot fail");
    out
}

#[cfg(test)]
mod tests;
