//! Chart rendering for sweeps and reports: line charts (linear or log x) and grouped bar charts, as SVG
//! text or PNG bytes, with no plotting or image dependency.
//!
//! Both outputs come from one layout ([`scene`]), so they show the same picture: title, labelled axes,
//! 1-2-5 (or log-decade) ticks with grid lines, one colour (Okabe-Ito, colour-blind safe) and one
//! marker shape per series, a legend outside the plot area, and optional annotations. PNG text uses a
//! built-in 5x7 bitmap font; SVG text uses a sans-serif font. Output is deterministic: the same chart
//! gives byte-identical files.
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

mod font;
mod png;
mod raster;
mod scene;
mod svg;
mod ticks;

pub use ticks::{Tick, format_tick, log_ticks, nice_step, nice_ticks};

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

/// A chart. Axis labels should carry their units, e.g. `"p90 latency (s)"`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Logarithmic x axis (points with `x <= 0` are skipped). Ignored for bar charts.
    pub x_log: bool,
    /// Fixed y range ends; `None` picks a nice range around the data.
    pub y_min: Option<f64>,
    pub y_max: Option<f64>,
    /// Grouped bar chart: each distinct x is a category (e.g. a pod index), one bar per series.
    pub bars: bool,
    /// Names of the bar categories, in ascending x order (empty: the x values are printed).
    pub x_categories: Vec<String>,
    /// Markers at data coordinates `(x, y, text)`, e.g. `(0.4, 1.2, "sweet spot")`: a ring at the
    /// point, a dashed drop line to the x axis, the text above. A non-finite `y` draws only the line.
    pub annotations: Vec<(f64, f64, String)>,
}

/// The chart as an SVG document (`width` x `height` user units, with a `viewBox`).
pub fn svg(chart: &Chart, width: u32, height: u32) -> String {
    svg::render(&scene::build(chart, width, height))
}

/// The chart as a PNG file (8-bit RGB).
pub fn png(chart: &Chart, width: u32, height: u32) -> Vec<u8> {
    let scene = scene::build(chart, width, height);
    let canvas = raster::render(&scene);
    png::encode_rgb(canvas.w as u32, canvas.h as u32, &canvas.px)
}

#[cfg(test)]
mod tests;
