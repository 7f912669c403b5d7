//! The framed envelope around each postcard record.
//!
//! ```text
//!  0        1        2                 4                                   8
//!  +--------+--------+--------+--------+--------+--------+--------+--------+----------------//---+
//!  | magic  | format |   len (u16 LE)  |       crc (u32 LE, CRC-32C)       | record (len bytes)  |
//!  |  0xB7  |  0x01  |                 |  over bytes 0..4 ++ record bytes  | postcard(Record)    |
//!  +--------+--------+--------+--------+--------+--------+--------+--------+----------------//---+
//! ```
//!
//! * `magic` is never `0xFF`, so an erased (all-`0xFF`) flash word is never mistaken for a frame;
//!   a header that reads `0xFF` is "end of log".
//! * `len` is `1..=MAX_RECORD_BYTES`; anything else is rejected before any allocation or read.
//! * `crc` covers the header's first four bytes too, so a torn `len` cannot pass.
//! * Frames are concatenated; the flash backend pads each frame with `0xFF` up to its
//!   `WRITE_SIZE` (the padding is never written, so it stays erased).
//!
//! [`parse`] never panics on any input (it only uses checked slicing); it returns the record and the
//! frame length, or a [`FrameError`] saying why the bytes are not a whole, valid frame.

use core::fmt;

use super::crc::Crc32c;
use super::limits::MAX_RECORD_BYTES;
use super::record::Record;

/// First byte of every frame.
pub const MAGIC: u8 = 0xB7;
/// Envelope/record format version written by this crate.
pub const FORMAT_VERSION: u8 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 8;
/// Largest frame (header + largest record).
pub const MAX_FRAME_LEN: usize = HEADER_LEN + MAX_RECORD_BYTES;

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FrameError {
    /// Fewer bytes than the header or the announced length: a torn or missing tail.
    Truncated,
    /// The header is erased flash (`0xFF`): the end of the log.
    Erased,
    /// The first byte is not [`MAGIC`].
    BadMagic(u8),
    /// A format version this reader does not know.
    UnsupportedVersion(u8),
    /// `len` is 0 or larger than [`MAX_RECORD_BYTES`].
    BadLength(u16),
    /// The CRC does not match (torn or corrupted frame).
    BadCrc {
        /// CRC stored in the header.
        stored: u32,
        /// CRC computed over the bytes.
        computed: u32,
    },
    /// The CRC matched but postcard could not decode the record (a writer bug or a newer format).
    BadRecord,
    /// The record does not fit the output buffer / [`MAX_RECORD_BYTES`] (emit side).
    TooLarge,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Truncated => f.write_str("truncated frame"),
            FrameError::Erased => f.write_str("erased space (end of log)"),
            FrameError::BadMagic(b) => write!(f, "bad frame magic 0x{b:02x} (expected 0x{MAGIC:02x})"),
            FrameError::UnsupportedVersion(v) => {
                write!(f, "unsupported log format version {v} (this build reads {FORMAT_VERSION})")
            }
            FrameError::BadLength(l) => {
                write!(f, "bad record length {l} (expected 1..={MAX_RECORD_BYTES})")
            }
            FrameError::BadCrc { stored, computed } => {
                write!(f, "CRC-32C mismatch: stored {stored:08x}, computed {computed:08x}")
            }
            FrameError::BadRecord => f.write_str("record does not decode (postcard)"),
            FrameError::TooLarge => {
                write!(f, "record larger than {MAX_RECORD_BYTES} bytes or the buffer")
            }
        }
    }
}

impl core::error::Error for FrameError {}

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Record length.
    pub len: u16,
    /// Stored CRC.
    pub crc: u32,
}

impl Header {
    /// Whole frame length (header + record).
    pub const fn frame_len(&self) -> usize {
        HEADER_LEN + self.len as usize
    }
}

/// Parses the 8-byte header at the start of `buf` (checks magic, version, length bounds; not CRC).
pub fn parse_header(buf: &[u8]) -> Result<Header, FrameError> {
    let Some(&[magic, version, l0, l1, c0, c1, c2, c3]) = buf.first_chunk::<HEADER_LEN>() else {
        return Err(if buf.first() == Some(&0xFF) { FrameError::Erased } else { FrameError::Truncated });
    };
    if magic == 0xFF && version == 0xFF {
        return Err(FrameError::Erased);
    }
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    if version != FORMAT_VERSION {
        return Err(FrameError::UnsupportedVersion(version));
    }
    let len = u16::from_le_bytes([l0, l1]);
    if len == 0 || len as usize > MAX_RECORD_BYTES {
        return Err(FrameError::BadLength(len));
    }
    Ok(Header { len, crc: u32::from_le_bytes([c0, c1, c2, c3]) })
}

/// Checks a whole frame at the start of `buf` and returns the record bytes and the frame length.
pub fn parse_raw(buf: &[u8]) -> Result<(&[u8], usize), FrameError> {
    let h = parse_header(buf)?;
    let total = h.frame_len();
    let (Some(head), Some(body)) = (buf.get(..4), buf.get(HEADER_LEN..total)) else {
        return Err(FrameError::Truncated);
    };
    let computed = Crc32c::new().update(head).update(body).finish();
    if computed != h.crc {
        return Err(FrameError::BadCrc { stored: h.crc, computed });
    }
    Ok((body, total))
}

/// Decodes the frame at the start of `buf`: the record and the frame length. Never panics.
pub fn parse(buf: &[u8]) -> Result<(Record, usize), FrameError> {
    let (body, total) = parse_raw(buf)?;
    // exactly one record: bytes left over inside `len` make the frame malformed
    let rec = match postcard::take_from_bytes::<Record>(body) {
        Ok((rec, [])) => rec,
        _ => return Err(FrameError::BadRecord),
    };
    // and only its canonical encoding (postcard also reads over-long varints): a frame is accepted
    // only if it is exactly what `emit` writes for the record it decodes to
    match postcard::serialize_with_flavor(&rec, Same { want: body, at: 0 }) {
        Ok(()) => Ok((rec, total)),
        Err(_) => Err(FrameError::BadRecord),
    }
}

/// A postcard output that stores nothing: it checks that the bytes serialized are `want`.
struct Same<'a> {
    want: &'a [u8],
    at: usize,
}

impl postcard::ser_flavors::Flavor for Same<'_> {
    type Output = ();
    fn try_push(&mut self, b: u8) -> postcard::Result<()> {
        if self.want.get(self.at) != Some(&b) {
            return Err(postcard::Error::SerializeBufferFull);
        }
        self.at += 1;
        Ok(())
    }
    fn finalize(self) -> postcard::Result<()> {
        if self.at == self.want.len() { Ok(()) } else { Err(postcard::Error::SerializeBufferFull) }
    }
}

/// Encodes `rec` as a frame at the start of `out`; returns the frame length.
pub fn emit(rec: &Record, out: &mut [u8]) -> Result<usize, FrameError> {
    let limit = out.len().min(MAX_FRAME_LEN);
    let Some(body_buf) = out.get_mut(HEADER_LEN..limit) else {
        return Err(FrameError::TooLarge);
    };
    let len = match postcard::to_slice(rec, body_buf) {
        Ok(used) => used.len(),
        Err(_) => return Err(FrameError::TooLarge),
    };
    let len16 = len as u16; // len <= MAX_RECORD_BYTES < u16::MAX
    let l = len16.to_le_bytes();
    let head = [MAGIC, FORMAT_VERSION, l[0], l[1]];
    let total = HEADER_LEN + len;
    let crc = match out.get(HEADER_LEN..total) {
        Some(body) => Crc32c::new().update(&head).update(body).finish(),
        None => return Err(FrameError::TooLarge),
    };
    let c = crc.to_le_bytes();
    let Some(h) = out.get_mut(..HEADER_LEN) else {
        return Err(FrameError::TooLarge);
    };
    h.copy_from_slice(&[head[0], head[1], head[2], head[3], c[0], c[1], c[2], c[3]]);
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::super::record::{Event, Record, TaskId};
    use super::*;

    fn rec() -> Record {
        Record::new(TaskId::try_from("t1").unwrap(), 3, Event::Completed)
    }

    #[test]
    fn roundtrip_and_every_corruption() {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = emit(&rec(), &mut buf).unwrap();
        let (r, m) = parse(&buf[..n]).unwrap();
        assert_eq!((r, m), (rec(), n));
        for cut in 0..n {
            assert!(parse(&buf[..cut]).is_err(), "prefix {cut} must not parse");
        }
        for i in 0..n {
            for bit in 0..8 {
                let mut b = buf;
                b[i] ^= 1 << bit;
                assert!(parse(&b[..n]).is_err(), "flip byte {i} bit {bit}");
            }
        }
    }

    /// A CRC-valid frame whose body holds the record plus a byte more, or the record with an
    /// over-long varint, is malformed, not read as the record (postcard alone accepts both; the
    /// property test `mutated_bodies_decode_canonically_or_not_at_all` found the second).
    #[test]
    fn trailing_bytes_in_a_frame_are_rejected() {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let n = emit(&rec(), &mut buf).unwrap();
        let len = (n - HEADER_LEN + 1) as u16;
        let l = len.to_le_bytes();
        buf[2..4].copy_from_slice(&l);
        buf[n] = 0;
        let crc = Crc32c::new().update(&buf[..4]).update(&buf[HEADER_LEN..n + 1]).finish();
        buf[4..8].copy_from_slice(&crc.to_le_bytes());
        assert!(parse_raw(&buf[..n + 1]).is_ok(), "the frame itself is whole");
        assert_eq!(parse(&buf[..n + 1]), Err(FrameError::BadRecord));
        // seq 3 as the over-long varint 0x83 0x00: same record, not the canonical bytes
        let n = emit(&rec(), &mut buf).unwrap();
        let body = &buf[HEADER_LEN..n];
        let at = body.iter().position(|&b| b == 3).unwrap();
        let mut long = [0u8; MAX_FRAME_LEN];
        let k = HEADER_LEN + at;
        long[..k].copy_from_slice(&buf[..k]);
        long[k..k + 2].copy_from_slice(&[0x83, 0x00]);
        long[k + 2..n + 1].copy_from_slice(&body[at + 1..]);
        let long = &mut long[..n + 1];
        let len = (n + 1 - HEADER_LEN) as u16;
        long[2..4].copy_from_slice(&len.to_le_bytes());
        let crc = Crc32c::new().update(&long[..4]).update(&long[HEADER_LEN..]).finish();
        long[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(postcard::from_bytes::<Record>(&long[HEADER_LEN..]).unwrap(), rec(), "postcard reads it");
        assert_eq!(parse(long), Err(FrameError::BadRecord));
    }

    #[test]
    fn erased_is_end() {
        assert_eq!(parse(&[0xFF; 16]), Err(FrameError::Erased));
        assert_eq!(parse(&[0xFF]), Err(FrameError::Erased));
        assert_eq!(parse(&[]), Err(FrameError::Truncated));
    }

    #[test]
    fn emit_too_small() {
        let mut buf = [0u8; 10];
        assert_eq!(emit(&rec(), &mut buf), Err(FrameError::TooLarge));
        let mut tiny = [0u8; 3];
        assert_eq!(emit(&rec(), &mut tiny), Err(FrameError::TooLarge));
    }
}
