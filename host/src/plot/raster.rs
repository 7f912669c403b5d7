//! Renders a [`Scene`] into an RGB pixel buffer. Every shape is a signed distance function sampled at
//! pixel centres, with a one-pixel linear ramp for anti-aliasing.

use super::font;
use super::scene::{Anchor, Prim, Rgb, Scene, Shape};

pub(crate) struct Canvas {
    pub(crate) w: usize,
    pub(crate) h: usize,
    pub(crate) px: Vec<u8>,
}

fn cover(d: f64) -> f64 {
    (0.5 - d).clamp(0.0, 1.0)
}

impl Canvas {
    fn new(w: usize, h: usize, bg: Rgb) -> Canvas {
        let mut px = Vec::with_capacity(w * h * 3);
        for _ in 0..w * h {
            px.extend([bg.0, bg.1, bg.2]);
        }
        Canvas { w, h, px }
    }

    fn blend(&mut self, x: usize, y: usize, c: Rgb, a: f64) {
        if a <= 0.0 {
            return;
        }
        let i = (y * self.w + x) * 3;
        for (k, s) in [c.0, c.1, c.2].into_iter().enumerate() {
            let d = self.px[i + k] as f64;
            self.px[i + k] = (d + (s as f64 - d) * a.min(1.0)).round().clamp(0.0, 255.0) as u8;
        }
    }

    /// Pixel index ranges covering `[x0, x1] x [y0, y1]`, clamped to the canvas.
    fn range(&self, x0: f64, y0: f64, x1: f64, y1: f64) -> Option<(usize, usize, usize, usize)> {
        let cx0 = x0.floor().max(0.0);
        let cy0 = y0.floor().max(0.0);
        let cx1 = x1.ceil().min(self.w as f64);
        let cy1 = y1.ceil().min(self.h as f64);
        if !(cx0 < cx1 && cy0 < cy1) {
            return None;
        }
        Some((cx0 as usize, cy0 as usize, cx1 as usize, cy1 as usize))
    }

    /// Fills where `sdf < 0`, anti-aliased, within the box `[x0, x1] x [y0, y1]`.
    fn fill(&mut self, bbox: (f64, f64, f64, f64), c: Rgb, sdf: impl Fn(f64, f64) -> f64) {
        let Some((x0, y0, x1, y1)) = self.range(bbox.0 - 1.0, bbox.1 - 1.0, bbox.2 + 1.0, bbox.3 + 1.0) else {
            return;
        };
        for y in y0..y1 {
            for x in x0..x1 {
                let a = cover(sdf(x as f64 + 0.5, y as f64 + 0.5));
                self.blend(x, y, c, a);
            }
        }
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, c: Rgb) {
        let (cx, cy, hw, hh) = (x + w / 2.0, y + h / 2.0, w / 2.0, h / 2.0);
        self.fill((x, y, x + w, y + h), c, |px, py| ((px - cx).abs() - hw).max((py - cy).abs() - hh));
    }

    /// A polyline of width `width`, round joins and caps; each pixel is blended once.
    fn polyline(&mut self, pts: &[(f64, f64)], width: f64, c: Rgb) {
        if pts.is_empty() {
            return;
        }
        let r = width / 2.0 + 1.0;
        let (mut bx0, mut by0, mut bx1, mut by1) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
        for &(x, y) in pts {
            bx0 = bx0.min(x - r);
            by0 = by0.min(y - r);
            bx1 = bx1.max(x + r);
            by1 = by1.max(y + r);
        }
        let Some((ox, oy, ex, ey)) = self.range(bx0, by0, bx1, by1) else { return };
        let bw = ex - ox;
        let mut cov = vec![0f32; bw * (ey - oy)];
        let segs: Vec<((f64, f64), (f64, f64))> =
            if pts.len() == 1 { vec![(pts[0], pts[0])] } else { pts.windows(2).map(|p| (p[0], p[1])).collect() };
        for (a, b) in segs {
            let Some((x0, y0, x1, y1)) =
                self.range(a.0.min(b.0) - r, a.1.min(b.1) - r, a.0.max(b.0) + r, a.1.max(b.1) + r)
            else {
                continue;
            };
            let (dx, dy) = (b.0 - a.0, b.1 - a.1);
            let len2 = dx * dx + dy * dy;
            for y in y0..y1 {
                for x in x0..x1 {
                    let (px, py) = (x as f64 + 0.5 - a.0, y as f64 + 0.5 - a.1);
                    let t = if len2 > 0.0 { ((px * dx + py * dy) / len2).clamp(0.0, 1.0) } else { 0.0 };
                    let d = (px - t * dx).hypot(py - t * dy) - width / 2.0;
                    let k = (y - oy) * bw + (x - ox);
                    cov[k] = cov[k].max(cover(d) as f32);
                }
            }
        }
        for y in oy..ey {
            for x in ox..ex {
                self.blend(x, y, c, cov[(y - oy) * bw + (x - ox)] as f64);
            }
        }
    }

    fn marker(&mut self, x: f64, y: f64, r: f64, shape: Shape, c: Rgb, hollow: bool) {
        let bbox = (x - r * 1.6, y - r * 1.6, x + r * 1.6, y + r * 1.6);
        if hollow {
            let t = (r / 4.0).max(1.5);
            self.fill(bbox, c, |px, py| ((px - x).hypot(py - y) - r).abs() - t / 2.0);
            return;
        }
        // A white halo first keeps markers readable where lines cross.
        let halo = 1.5;
        self.fill(bbox, Rgb(255, 255, 255), |px, py| shape_sdf(shape, px - x, py - y, r) - halo);
        self.fill(bbox, c, |px, py| shape_sdf(shape, px - x, py - y, r));
    }

    fn text(&mut self, t: &TextSpec<'_>) {
        let s = t.scale;
        let (glyphs, width) = font::layout(t.text);
        let width = width * s;
        let along = match t.anchor {
            Anchor::Start => 0.0,
            Anchor::Middle => -width / 2.0,
            Anchor::End => -width,
        };
        // (u, v): u along the text, v down from the top of the caps.
        let (ox, oy) = (t.x.round(), t.y.round());
        let u0 = (along).round();
        let v0 = -(font::CAP * s / 2.0).round();
        let extra = if t.bold { (s / 2.0).max(1.0) } else { 0.0 };
        for (g, off) in glyphs {
            for (row, bits) in g.iter().enumerate() {
                for col in 0..5 {
                    if bits & (1 << (4 - col)) == 0 {
                        continue;
                    }
                    let u = u0 + (off + col as f64) * s;
                    let v = v0 + row as f64 * s;
                    let (w_u, w_v) = (s + extra, s);
                    if t.vertical {
                        // Rotated -90 degrees: u runs up the screen, v runs right.
                        self.rect(ox + v, oy - u - w_u, w_v, w_u, t.color);
                    } else {
                        self.rect(ox + u, oy + v, w_u, w_v, t.color);
                    }
                }
            }
        }
    }
}

struct TextSpec<'a> {
    x: f64,
    y: f64,
    scale: f64,
    anchor: Anchor,
    vertical: bool,
    bold: bool,
    color: Rgb,
    text: &'a str,
}

/// Signed distance (negative inside) from a marker of nominal radius `r` centred at the origin.
pub(crate) fn shape_sdf(shape: Shape, dx: f64, dy: f64, r: f64) -> f64 {
    const S3: f64 = 0.866_025_403_784_438_6;
    match shape {
        Shape::Circle => dx.hypot(dy) - r,
        Shape::Square => dx.abs().max(dy.abs()) - r * 0.85,
        Shape::Diamond => (dx.abs() + dy.abs() - r * 1.25) * std::f64::consts::FRAC_1_SQRT_2,
        Shape::TriangleUp | Shape::TriangleDown => {
            let (dy, rr) = (if shape == Shape::TriangleUp { dy } else { -dy }, r * 1.25);
            let dy = dy - rr * 0.15;
            (dy - rr / 2.0).max(S3 * dx - 0.5 * dy - rr / 2.0).max(-S3 * dx - 0.5 * dy - rr / 2.0)
        }
        Shape::Cross => {
            let (u, v) = ((dx + dy) * std::f64::consts::FRAC_1_SQRT_2, (dx - dy) * std::f64::consts::FRAC_1_SQRT_2);
            let (len, t) = (r * 1.15, r * 0.38);
            ((u.abs() - len).max(v.abs() - t)).min((v.abs() - len).max(u.abs() - t))
        }
    }
}

/// Rasterizes `scene` to RGB bytes.
pub(crate) fn render(scene: &Scene) -> Canvas {
    let mut c = Canvas::new(scene.width as usize, scene.height as usize, scene.background);
    for p in &scene.prims {
        match p {
            Prim::Rect { x, y, w, h, color } => c.rect(*x, *y, *w, *h, *color),
            Prim::Line { pts, width, color } => c.polyline(pts, *width, *color),
            Prim::Marker { x, y, r, shape, color, hollow } => c.marker(*x, *y, *r, *shape, *color, *hollow),
            Prim::Text { x, y, scale, anchor, vertical, bold, color, text } => c.text(&TextSpec {
                x: *x,
                y: *y,
                scale: *scale,
                anchor: *anchor,
                vertical: *vertical,
                bold: *bold,
                color: *color,
                text,
            }),
        }
    }
    c
}
