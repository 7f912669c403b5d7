//! Carving caller buffers into per-pod (or per-queue) parts: the one check that a buffer has
//! exactly `parts` x `each` elements, for every structure that borrows an equal share.

use super::error::{Buffer, Error};

/// `buf` as `parts` chunks of `each` elements; an error naming `name` unless `buf` has exactly
/// `parts * each` elements and `each > 0`.
pub fn chunks<'a, T>(
    buf: &'a mut [T],
    parts: usize,
    each: usize,
    name: Buffer,
) -> Result<core::slice::ChunksExactMut<'a, T>, Error> {
    let expected = parts.saturating_mul(each);
    if each == 0 || buf.len() != expected {
        return Err(Error::BufferSize { buffer: name, expected, got: buf.len() });
    }
    Ok(buf.chunks_exact_mut(each))
}
