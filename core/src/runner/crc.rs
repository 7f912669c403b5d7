//! CRC-32C (Castagnoli, reflected polynomial `0x82F63B78`), table-driven, the table built by a
//! `const fn` at compile time (1 KiB of flash, no runtime initialisation).
//!
//! Check value: `crc32c(b"123456789") == 0xE306_9283`.

/// The reflected CRC-32C polynomial.
pub const POLY: u32 = 0x82F6_3B78;

const fn make_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

/// The 256-entry lookup table.
pub const TABLE: [u32; 256] = make_table();

/// An incremental CRC-32C: `Crc32c::new().update(a).update(b).finish() == crc32c(a ++ b)`.
#[derive(Debug, Clone, Copy)]
pub struct Crc32c(u32);

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32c {
    /// A fresh digest.
    pub const fn new() -> Self {
        Crc32c(0xFFFF_FFFF)
    }
    /// Feeds `bytes`.
    pub const fn update(mut self, bytes: &[u8]) -> Self {
        let mut i = 0;
        while i < bytes.len() {
            self.0 = TABLE[((self.0 ^ bytes[i] as u32) & 0xFF) as usize] ^ (self.0 >> 8);
            i += 1;
        }
        self
    }
    /// The final value.
    pub const fn finish(self) -> u32 {
        !self.0
    }
}

/// CRC-32C of `bytes`.
pub const fn crc32c(bytes: &[u8]) -> u32 {
    Crc32c::new().update(bytes).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(Crc32c::new().update(b"1234").update(b"56789").finish(), 0xE306_9283);
    }
}
