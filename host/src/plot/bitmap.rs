//! plotters' bitmap backend with text drawn by ab_glyph at exact glyph positions.
//!
//! plotters 0.3.7 draws ab_glyph text itself, but places each glyph at the pen position without its
//! side bearing and rounded down to whole pixels, so words look unevenly spaced ("hi t rate"). This
//! wrapper draws everything else with [`BitMapBackend`] and lays text out the usual way: advance
//! and kerning in fractional pixels, each glyph's outline at its own bounds.

use plotters::prelude::{BitMapBackend, DrawingBackend};
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind};

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};

pub(crate) struct Bitmap<'a> {
    inner: BitMapBackend<'a>,
    font: FontRef<'static>,
}

impl<'a> Bitmap<'a> {
    pub(crate) fn new(buf: &'a mut [u8], size: (u32, u32)) -> Bitmap<'a> {
        let font = FontRef::try_from_slice(super::style::FONT_BYTES).expect("the embedded font parses");
        Bitmap { inner: BitMapBackend::with_buffer(buf, size), font }
    }

    /// Glyphs of `text` at `size` px: (glyph, pen x), and the total advance.
    fn layout(&self, text: &str, size: f64) -> (Vec<ab_glyph::Glyph>, f32) {
        let f = self.font.as_scaled(PxScale::from(size as f32));
        let mut x = 0.0f32;
        let mut prev = None;
        let mut glyphs = Vec::new();
        for c in text.chars() {
            let id = f.glyph_id(c);
            if let Some(p) = prev {
                x += f.kern(p, id);
            }
            glyphs.push(id.with_scale_and_position(f.scale(), point(x, f.ascent())));
            x += f.h_advance(id);
            prev = Some(id);
        }
        (glyphs, x)
    }
}

type Res<E> = Result<(), DrawingErrorKind<E>>;

impl DrawingBackend for Bitmap<'_> {
    type ErrorType = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> Res<Self::ErrorType> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Res<Self::ErrorType> {
        self.inner.present()
    }
    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Res<Self::ErrorType> {
        self.inner.draw_pixel(point, color)
    }
    fn draw_line<S: BackendStyle>(&mut self, from: BackendCoord, to: BackendCoord, style: &S) -> Res<Self::ErrorType> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Res<Self::ErrorType> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Res<Self::ErrorType> {
        self.inner.draw_path(path, style)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Res<Self::ErrorType> {
        self.inner.draw_circle(center, radius, style, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Res<Self::ErrorType> {
        self.inner.fill_polygon(vert, style)
    }
    fn blit_bitmap(&mut self, pos: BackendCoord, (w, h): (u32, u32), src: &[u8]) -> Res<Self::ErrorType> {
        self.inner.blit_bitmap(pos, (w, h), src)
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        let (_, w) = self.layout(text, style.size());
        Ok((w.ceil() as u32, style.size().ceil() as u32))
    }

    fn draw_text<T: BackendTextStyle>(&mut self, text: &str, style: &T, pos: BackendCoord) -> Res<Self::ErrorType> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let (glyphs, width) = self.layout(text, style.size());
        let height = style.size() as f32;
        let dx = match style.anchor().h_pos {
            HPos::Left => 0.0,
            HPos::Center => -width / 2.0,
            HPos::Right => -width,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0.0,
            VPos::Center => -height / 2.0,
            VPos::Bottom => -height,
        };
        let trans = style.transform();
        let (w, h) = self.get_size();
        let mut pixels = Vec::new();
        for g in glyphs {
            if let Some(outline) = self.font.outline_glyph(g) {
                let b = outline.px_bounds();
                outline.draw(|x, y, cov| {
                    let (gx, gy) = ((b.min.x + x as f32 + dx).round() as i32, (b.min.y + y as f32 + dy).round() as i32);
                    pixels.push((gx, gy, cov));
                });
            }
        }
        for (x, y, cov) in pixels {
            let (x, y) = trans.transform(x, y);
            let (x, y) = (pos.0 + x, pos.1 + y);
            if cov > 0.0 && x >= 0 && y >= 0 && (x as u32) < w && (y as u32) < h {
                let c = BackendColor { alpha: color.alpha * f64::from(cov.min(1.0)), rgb: color.rgb };
                self.inner.draw_pixel((x, y), c)?;
            }
        }
        Ok(())
    }
}
