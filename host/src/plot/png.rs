//! A minimal PNG encoder: 8-bit RGB, one IDAT, zlib stream compressed by a small LZ77 + fixed-Huffman
//! deflate written here (charts are mostly flat colour, so this gets within a small factor of zlib
//! without any dependency). Output is a pure function of the pixels: no timestamps, no text chunks.

/// CRC-32 (ISO-HDLC, as PNG uses) of `data`.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (n, slot) in t.iter_mut().enumerate() {
            let mut c = n as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            }
            *slot = c;
        }
        t
    });
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c = table[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

/// Adler-32 of `data` (the zlib trailer).
pub(crate) fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += x as u32;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl BitWriter {
    /// Appends the low `len` bits of `bits`, least significant first.
    fn put(&mut self, bits: u32, len: u32) {
        self.acc |= (bits as u64) << self.n;
        self.n += len;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// Appends a Huffman code (defined most significant bit first).
    fn code(&mut self, code: u32, len: u32) {
        let rev = code.reverse_bits() >> (32 - len);
        self.put(rev, len);
    }

    fn finish(mut self) -> Vec<u8> {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

const LEN_BASE: [u16; 29] =
    [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258];
const LEN_EXTRA: [u8; 29] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145,
    8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] =
    [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13];

fn put_litlen(w: &mut BitWriter, sym: u32) {
    match sym {
        0..=143 => w.code(0x30 + sym, 8),
        144..=255 => w.code(0x190 + sym - 144, 9),
        256..=279 => w.code(sym - 256, 7),
        _ => w.code(0xC0 + sym - 280, 8),
    }
}

fn put_match(w: &mut BitWriter, len: usize, dist: usize) {
    let li = LEN_BASE.iter().rposition(|&b| b as usize <= len).unwrap_or(0);
    put_litlen(w, 257 + li as u32);
    w.put((len - LEN_BASE[li] as usize) as u32, LEN_EXTRA[li] as u32);
    let di = DIST_BASE.iter().rposition(|&b| b as usize <= dist).unwrap_or(0);
    w.code(di as u32, 5);
    w.put((dist - DIST_BASE[di] as usize) as u32, DIST_EXTRA[di] as u32);
}

/// Raw deflate (RFC 1951) of `data`: one final block with the fixed Huffman codes, greedy LZ77 over a
/// 32 KiB window with hash chains. Deterministic.
pub(crate) fn deflate(data: &[u8]) -> Vec<u8> {
    const WINDOW: usize = 32 * 1024;
    const HASH_BITS: u32 = 15;
    const MAX_CHAIN: usize = 48;
    const MAX_LEN: usize = 258;
    let mut w = BitWriter { out: Vec::with_capacity(data.len() / 8 + 16), acc: 0, n: 0 };
    w.put(1, 1); // BFINAL
    w.put(1, 2); // BTYPE = 01, fixed Huffman
    let hash = |i: usize| -> usize {
        let v = (data[i] as u32) | (data[i + 1] as u32) << 8 | (data[i + 2] as u32) << 16;
        (v.wrapping_mul(0x9E37_79B1) >> (32 - HASH_BITS)) as usize
    };
    let mut head = vec![usize::MAX; 1 << HASH_BITS];
    let mut prev = vec![usize::MAX; WINDOW];
    let insert = |i: usize, head: &mut [usize], prev: &mut [usize]| {
        if i + 2 < data.len() {
            let h = hash(i);
            prev[i % WINDOW] = head[h];
            head[h] = i;
        }
    };
    let mut i = 0;
    while i < data.len() {
        let mut best_len = 0;
        let mut best_dist = 0;
        if i + 2 < data.len() {
            let max_len = MAX_LEN.min(data.len() - i);
            let mut cand = head[hash(i)];
            let mut steps = 0;
            while cand != usize::MAX && i - cand < WINDOW && steps < MAX_CHAIN {
                if data[cand + best_len.min(max_len - 1)] == data[i + best_len.min(max_len - 1)] {
                    let mut l = 0;
                    while l < max_len && data[cand + l] == data[i + l] {
                        l += 1;
                    }
                    if l > best_len {
                        best_len = l;
                        best_dist = i - cand;
                        if l == max_len {
                            break;
                        }
                    }
                }
                let p = prev[cand % WINDOW];
                if p == usize::MAX || p >= cand {
                    break;
                }
                cand = p;
                steps += 1;
            }
        }
        if best_len >= 3 {
            put_match(&mut w, best_len, best_dist);
            for k in i..i + best_len {
                insert(k, &mut head, &mut prev);
            }
            i += best_len;
        } else {
            put_litlen(&mut w, data[i] as u32);
            insert(i, &mut head, &mut prev);
            i += 1;
        }
    }
    put_litlen(&mut w, 256);
    w.finish()
}

/// A zlib stream (RFC 1950) around [`deflate`].
pub(crate) fn zlib(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    out.extend(deflate(data));
    out.extend(adler32(data).to_be_bytes());
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], body: &[u8]) {
    out.extend((body.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend(kind);
    out.extend(body);
    let crc = crc32(&out[start..]);
    out.extend(crc.to_be_bytes());
}

/// Encodes `rgb` (row-major, 3 bytes per pixel, `width * height` pixels) as a PNG file.
pub(crate) fn encode_rgb(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    let stride = width as usize * 3;
    let mut raw = Vec::with_capacity((stride + 1) * height as usize);
    for row in rgb.chunks(stride.max(1)).take(height as usize) {
        raw.push(0); // filter: none (LZ77 already matches the row above at distance `stride`)
        raw.extend(row);
    }
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend(width.to_be_bytes());
    ihdr.extend(height.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]); // 8-bit, truecolour, deflate, adaptive filters, no interlace
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &zlib(&raw));
    chunk(&mut out, b"IEND", &[]);
    out
}

/// Test support: an inflater for stored and fixed-Huffman blocks (all this encoder emits).
#[cfg(test)]
pub(crate) fn inflate(data: &[u8]) -> Result<Vec<u8>, String> {
    struct R<'a> {
        d: &'a [u8],
        pos: usize,
    }
    impl R<'_> {
        fn bit(&mut self) -> Result<u32, String> {
            let byte = *self.d.get(self.pos / 8).ok_or("truncated")?;
            let b = (byte >> (self.pos % 8)) & 1;
            self.pos += 1;
            Ok(b as u32)
        }
        fn bits(&mut self, n: u32) -> Result<u32, String> {
            let mut v = 0;
            for k in 0..n {
                v |= self.bit()? << k;
            }
            Ok(v)
        }
        fn code(&mut self, n: u32) -> Result<u32, String> {
            let mut v = 0;
            for _ in 0..n {
                v = (v << 1) | self.bit()?;
            }
            Ok(v)
        }
    }
    let mut r = R { d: data, pos: 0 };
    let mut out = Vec::new();
    loop {
        let last = r.bits(1)?;
        match r.bits(2)? {
            0 => {
                r.pos = r.pos.div_ceil(8) * 8;
                let len = r.bits(16)? as usize;
                let nlen = r.bits(16)? as usize;
                if len != !nlen & 0xFFFF {
                    return Err("bad stored length".into());
                }
                for _ in 0..len {
                    out.push(r.bits(8)? as u8);
                }
            }
            1 => loop {
                let mut c = r.code(7)?;
                let sym = if c <= 23 {
                    256 + c
                } else {
                    c = (c << 1) | r.bit()?;
                    if (0x30..=0xBF).contains(&c) {
                        c - 0x30
                    } else if (0xC0..=0xC7).contains(&c) {
                        280 + c - 0xC0
                    } else {
                        c = (c << 1) | r.bit()?;
                        144 + c - 0x190
                    }
                };
                match sym {
                    0..=255 => out.push(sym as u8),
                    256 => break,
                    _ => {
                        let li = (sym - 257) as usize;
                        let len = LEN_BASE[li] as usize + r.bits(LEN_EXTRA[li] as u32)? as usize;
                        let di = r.code(5)? as usize;
                        let dist = DIST_BASE[di] as usize + r.bits(DIST_EXTRA[di] as u32)? as usize;
                        if dist > out.len() {
                            return Err("distance too far".into());
                        }
                        for _ in 0..len {
                            out.push(out[out.len() - dist]);
                        }
                    }
                }
            },
            t => return Err(format!("unsupported block type {t}")),
        }
        if last == 1 {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_and_adler_known_values() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b"IEND"), 0xAE42_6082);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }

    #[test]
    fn deflate_round_trips() {
        let mut inputs: Vec<Vec<u8>> = vec![vec![], vec![7], b"abcabcabcabcabcabc".to_vec(), vec![255; 100_000]];
        let mut x = 12345u32;
        inputs.push(
            (0..70_000)
                .map(|i| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    if i % 3 == 0 { (x >> 24) as u8 } else { (i % 7) as u8 }
                })
                .collect(),
        );
        for input in inputs {
            let packed = deflate(&input);
            assert_eq!(inflate(&packed).unwrap(), input);
        }
    }
}
