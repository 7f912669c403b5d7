//! Opening a trace file: plain text, gzip or zstd, told apart by the file's first bytes (never by
//! its name), and decompressed as it is read. Memory stays bounded whatever the file's size: the
//! line buffer, the read buffers and, for zstd, the frame's window (at most 128 MiB, the limit
//! `zstd -d` applies by default; `zstd -19` on a 3 MB trace declares 3 MB).
//!
//! A run that reads its trace twice (a buffer grew, see `run::simulate`) opens the file again and
//! decompresses it again from the start.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

use crate::error::{CliError, CliResult};

/// How a trace file is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain text.
    Plain,
    /// gzip (RFC 1952), one or more members.
    Gzip,
    /// Zstandard (RFC 8878), one or more frames, skippable frames allowed.
    Zstd,
}

impl Compression {
    /// The format a file starting with `head` is in (`head`: up to its first 4 bytes).
    pub fn detect(head: &[u8]) -> Compression {
        if head.starts_with(&GZIP_MAGIC) {
            Compression::Gzip
        } else if head.starts_with(&ZSTD_MAGIC) || head.len() == 4 && is_skippable(head) {
            Compression::Zstd
        } else {
            Compression::Plain
        }
    }

    fn name(self) -> &'static str {
        match self {
            Compression::Plain => "plain",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// A zstd skippable frame: magic 0x184D2A50..=0x184D2A5F, little-endian.
fn is_skippable(head: &[u8]) -> bool {
    head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18]
}

/// Read buffer of the decompressed text (as the plain reader has always used).
const TEXT_BUFFER: usize = 1 << 20;
/// Read buffer of the compressed bytes.
const COMPRESSED_BUFFER: usize = 1 << 16;

/// Opens `path` (named `--trace PATH` in messages) for reading lines, decompressing it when its
/// first bytes are a gzip or zstd magic number.
///
/// A compressed regular file is first decompressed once to the end and checked (gzip's CRC-32 and
/// length, zstd's content checksum): damaged compressed data often decompresses to plausible text
/// up to the point where it turns to garbage, and the reader would then report a JSON error on some
/// line instead of the damage. So a corrupt file is refused up front, with a message that says so.
/// A pipe cannot be read twice: it is checked as it is read, and damage shows up as an error at the
/// first garbage line or, at the latest, at the end of the stream (never as a finished run).
pub fn open(path: &Path) -> CliResult<Box<dyn BufRead>> {
    Ok(open_sized(path)?.0)
}

/// [`open`], and for a compressed regular file the length of its text (known from the check),
/// so that progress counts text read out of text in the file, not out of its compressed size.
pub fn open_sized(path: &Path) -> CliResult<(Box<dyn BufRead>, Option<u64>)> {
    let (kind, mut text) = open_once(path)?;
    let regular = std::fs::metadata(path).is_ok_and(|m| m.is_file());
    if kind == Compression::Plain || !regular {
        return Ok((text, None));
    }
    let len = io::copy(&mut text, &mut io::sink())
        .map_err(|e| CliError::bad_input(format!("--trace {}: {e}", path.display())))?;
    Ok((open_once(path)?.1, Some(len)))
}

fn open_once(path: &Path) -> CliResult<(Compression, Box<dyn BufRead>)> {
    let f =
        File::open(path).map_err(|e| CliError::bad_input(format!("--trace {}: cannot open: {e}", path.display())))?;
    reader(f).map_err(|e| CliError::bad_input(format!("--trace {}: cannot read: {e}", path.display())))
}

/// Wraps any byte stream (a file, a pipe): reads its first bytes to detect the format, then
/// returns the format and a reader of the decompressed text. Decompression errors come out of
/// the reader as `InvalidData` errors that say the data is corrupt or truncated.
pub fn reader(mut src: impl Read + 'static) -> io::Result<(Compression, Box<dyn BufRead>)> {
    let mut head = [0u8; 4];
    let mut n = 0;
    while n < head.len() {
        match src.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let kind = Compression::detect(&head[..n]);
    let whole = io::Cursor::new(head).take(n as u64).chain(src);
    let text: Box<dyn BufRead> = match kind {
        Compression::Plain => Box::new(BufReader::with_capacity(TEXT_BUFFER, whole)),
        Compression::Gzip => {
            let gz = flate2::bufread::MultiGzDecoder::new(BufReader::with_capacity(COMPRESSED_BUFFER, whole));
            Box::new(BufReader::with_capacity(TEXT_BUFFER, Corrupt { kind, inner: gz }))
        }
        Compression::Zstd => {
            let zs = ZstdFrames::new(BufReader::with_capacity(COMPRESSED_BUFFER, whole));
            Box::new(BufReader::with_capacity(TEXT_BUFFER, Corrupt { kind, inner: zs }))
        }
    };
    Ok((kind, text))
}

/// Says which format a decoder error comes from, and that the data is at fault.
struct Corrupt<R> {
    kind: Compression,
    inner: R,
}

impl<R: Read> Read for Corrupt<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            if e.kind() == io::ErrorKind::Interrupted {
                return e;
            }
            io::Error::new(io::ErrorKind::InvalidData, format!("corrupt or truncated {} data: {e}", self.kind.name()))
        })
    }
}

/// A zstd stream of any number of frames (`cat a.zst b.zst` is valid zstd), skippable frames
/// skipped, each frame's content checksum verified when it has one. ruzstd's `StreamingDecoder`
/// reads one frame and does not compare the checksum, hence this loop over its `FrameDecoder`.
struct ZstdFrames<R> {
    src: R,
    dec: FrameDecoder,
    in_frame: bool,
}

impl<R: BufRead> ZstdFrames<R> {
    fn new(src: R) -> Self {
        ZstdFrames { src, dec: FrameDecoder::new(), in_frame: false }
    }

    /// Between frames: `false` at the end of the stream, else starts the next data frame
    /// (skipping skippable ones) and returns `true`.
    fn next_frame(&mut self) -> io::Result<bool> {
        loop {
            if self.src.fill_buf()?.is_empty() {
                return Ok(false);
            }
            match self.dec.reset(&mut self.src) {
                Ok(()) => return Ok(true),
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame { length, .. })) => {
                    let skipped = io::copy(&mut (&mut self.src).take(u64::from(length)), &mut io::sink())?;
                    if skipped < u64::from(length) {
                        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "skippable frame cut short"));
                    }
                }
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::BadMagicNumber(m))) => {
                    return Err(io::Error::other(format!(
                        "after a complete frame: {m:#010x} is not a zstd frame's magic number (trailing garbage?)"
                    )));
                }
                Err(e) => return Err(io::Error::other(e)),
            }
        }
    }
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.in_frame {
                if !self.next_frame()? {
                    return Ok(0);
                }
                self.in_frame = true;
            }
            if self.dec.can_collect() == 0 && !self.dec.is_finished() {
                self.dec
                    .decode_blocks(&mut self.src, BlockDecodingStrategy::UptoBlocks(1))
                    .map_err(io::Error::other)?;
                continue;
            }
            let n = self.dec.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            // The frame is finished and drained: every byte went through the hash.
            if let Some(stored) = self.dec.get_checksum_from_data() {
                let computed = self.dec.get_calculated_checksum();
                if computed != Some(stored) {
                    return Err(io::Error::other(format!(
                        "content checksum mismatch (stored {stored:#010x}, computed {:#010x})",
                        computed.unwrap_or(0)
                    )));
                }
            }
            self.in_frame = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(bytes: Vec<u8>) -> (Compression, io::Result<String>) {
        let (kind, mut r) = reader(io::Cursor::new(bytes)).unwrap();
        let mut s = String::new();
        let res = r.read_to_string(&mut s).map(|_| s);
        (kind, res)
    }

    fn gzip(text: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        io::Write::write_all(&mut e, text).unwrap();
        e.finish().unwrap()
    }

    fn zstd(text: &[u8]) -> Vec<u8> {
        ruzstd::encoding::compress_to_vec(text, ruzstd::encoding::CompressionLevel::Fastest)
    }

    fn sample() -> String {
        (0..2000).map(|i| format!("{{\"timestamp\": {i}, \"hash_ids\": [{}, {}]}}\n", i % 7, i)).collect()
    }

    #[test]
    fn detects_by_magic_and_round_trips() {
        let t = sample();
        assert_eq!(text_of(t.clone().into_bytes()).0, Compression::Plain);
        for (bytes, kind) in [(gzip(t.as_bytes()), Compression::Gzip), (zstd(t.as_bytes()), Compression::Zstd)] {
            let (k, got) = text_of(bytes);
            assert_eq!(k, kind);
            assert_eq!(got.unwrap(), t);
        }
        // Empty and tiny inputs are plain text.
        assert_eq!(text_of(vec![]).1.unwrap(), "");
        assert_eq!(text_of(b"{}".to_vec()).1.unwrap(), "{}");
        assert_eq!(text_of(vec![0x1f]).0, Compression::Plain);
    }

    #[test]
    fn several_members_and_frames_and_skippable_frames() {
        let t = sample();
        let (a, b) = t.split_at(t.len() / 3);
        let mut gz = gzip(a.as_bytes());
        gz.extend(gzip(b.as_bytes()));
        assert_eq!(text_of(gz).1.unwrap(), t);

        let mut skip = vec![0x5a, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 9, 9, 9];
        let mut zs = skip.clone();
        zs.extend(zstd(a.as_bytes()));
        zs.extend(&skip);
        zs.extend(zstd(b.as_bytes()));
        let (kind, got) = text_of(zs);
        assert_eq!(kind, Compression::Zstd);
        assert_eq!(got.unwrap(), t);

        // A skippable frame cut short is an error, not the end of the stream.
        skip.truncate(9);
        let mut zs = zstd(a.as_bytes());
        zs.extend(&skip);
        assert!(text_of(zs).1.is_err());
    }

    #[test]
    fn corrupt_truncated_and_trailing_data_are_errors_that_say_so() {
        let t = sample();
        for (kind, bytes) in [("gzip", gzip(t.as_bytes())), ("zstd", zstd(t.as_bytes()))] {
            let mut cut = bytes.clone();
            cut.truncate(bytes.len() / 2);
            let mut flipped = bytes.clone();
            let mid = bytes.len() / 2;
            for b in &mut flipped[mid..mid + 8] {
                *b ^= 0x55;
            }
            let mut trailing = bytes.clone();
            trailing.extend(b"junk after the end");
            let mut last = bytes.clone();
            *last.last_mut().unwrap() ^= 1; // in the checksum (zstd) or the size (gzip)
            for (what, b) in [("truncated", cut), ("flipped", flipped), ("trailing", trailing), ("last byte", last)] {
                let err = text_of(b).1.expect_err(&format!("{kind} {what}"));
                assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{kind} {what}: {err}");
                let msg = err.to_string();
                assert!(msg.contains(&format!("corrupt or truncated {kind} data")), "{kind} {what}: {msg}");
            }
        }
    }
}
