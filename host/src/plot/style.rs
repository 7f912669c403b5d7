//! The house style: palette, marker shapes, dash patterns, sizes and the embedded font.

use std::sync::Once;

use plotters::style::{FontStyle, RGBColor};

/// Okabe-Ito colour-blind-safe palette, ordered for contrast on white (yellow last).
pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0x00, 0x00, 0x00), // black
    RGBColor(0xF0, 0xE4, 0x42), // yellow
];

pub(crate) const INK: RGBColor = RGBColor(0x22, 0x22, 0x22);
pub(crate) const AXIS: RGBColor = RGBColor(0x55, 0x55, 0x55);
pub(crate) const GRID: RGBColor = RGBColor(0xDD, 0xDD, 0xDD);
pub(crate) const GRID_MINOR: RGBColor = RGBColor(0xF0, 0xF0, 0xF0);
pub(crate) const NOTE: RGBColor = RGBColor(0x44, 0x44, 0x44);
/// Fill of a shaded x range (e.g. a load burst), drawn under the data.
pub(crate) const SHADE: RGBColor = RGBColor(0xE6, 0x9F, 0x00);
pub(crate) const SHADE_ALPHA: f64 = 0.15;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Circle,
    Square,
    TriangleUp,
    Diamond,
    TriangleDown,
    Cross,
}

const SHAPES: [Shape; 6] =
    [Shape::Circle, Shape::Square, Shape::TriangleUp, Shape::Diamond, Shape::TriangleDown, Shape::Cross];

/// Dash patterns as (dash, gap) in line widths; `None` is solid. Series drawn later get shorter dashes,
/// so a line drawn over an equal one lets it show through the gaps.
const DASHES: [Option<(f64, f64)>; 6] =
    [None, Some((6.0, 3.0)), Some((2.0, 2.5)), Some((10.0, 3.0)), Some((4.0, 4.0)), Some((1.5, 4.0))];

/// How series `i` is drawn: colour, marker, dash pattern and marker size (in units of the base
/// marker radius). Markers shrink over each three series (series are drawn in order), so markers of
/// equal points sit inside one another and every series stays visible.
pub(crate) struct SeriesStyle {
    pub(crate) color: RGBColor,
    pub(crate) shape: Shape,
    pub(crate) dash: Option<(f64, f64)>,
    pub(crate) marker_scale: f64,
    /// Outlined markers for the second three series (e.g. the same routers in another condition).
    pub(crate) hollow: bool,
}

pub(crate) fn series_style(i: usize) -> SeriesStyle {
    SeriesStyle {
        color: PALETTE[i % PALETTE.len()],
        shape: SHAPES[i % SHAPES.len()],
        dash: DASHES[i % DASHES.len()],
        marker_scale: 1.0 - 0.2 * (i % 3) as f64,
        hollow: (i / 3) % 2 == 1,
    }
}

/// Sizes in pixels for a canvas of `width` x `height`.
pub(crate) struct Sizes {
    pub(crate) title: f64,
    pub(crate) label: f64,
    pub(crate) tick: f64,
    pub(crate) pad: i32,
    pub(crate) line: u32,
    pub(crate) marker: f64,
}

pub(crate) fn sizes(width: u32, height: u32) -> Sizes {
    let k = (f64::from(width).min(f64::from(height) * 1.6) / 900.0).clamp(0.5, 3.0);
    Sizes {
        title: 22.0 * k,
        label: 19.0 * k,
        tick: 17.0 * k,
        pad: (8.0 * k).round() as i32,
        line: (2.0 * k).round().max(1.0) as u32,
        marker: (7.5 * k).max(2.5),
    }
}

/// The one font family, in the SVGs and (embedded) in the PNGs. The name is also what the SVGs
/// write as `font-family`, with a generic fallback for viewers without DejaVu Sans.
pub(crate) const FONT: &str = "DejaVu Sans, sans-serif";

pub(crate) static FONT_BYTES: &[u8] = include_bytes!("fonts/DejaVuSans.ttf");

/// Registers the embedded font with plotters (once per process).
pub(crate) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for name in [FONT, "sans-serif"] {
            // The bytes are a valid TrueType font, checked by the tests.
            let _ = plotters::style::register_font(name, FontStyle::Normal, FONT_BYTES);
        }
    });
}
