//! Integer fixed-point math for the workload generator: identical results on every
//! architecture (no floating point, no libm).

/// `2^(-2^-i)` for i = 1..=32 in Q0.64.
const EXP2_NEG: [u64; 32] = [
    0xb504f333f9de6484,
    0xd744fccad69d6af4,
    0xeac0c6e7dd24392e,
    0xf5257d152486cc2c,
    0xfa83b2db722a033a,
    0xfd3e0c0cf486c174,
    0xfe9e115c7b8f884b,
    0xff4ecb59511ec8a5,
    0xffa756521c8daed1,
    0xffd3a751c0f7e10b,
    0xffe9d2b2f7db2755,
    0xfff4e91bff1b8c3d,
    0xfffa747ea0040664,
    0xfffd3a3b7814eb53,
    0xfffe9d1cc60ddab1,
    0xffff4e8e25879bfa,
    0xffffa7470363f451,
    0xffffd3a37dda0313,
    0xffffe9d1bdf703ae,
    0xfffff4e8debe025e,
    0xfffffa746f4fa150,
    0xfffffd3a37a3f8b0,
    0xfffffe9d1bd1065a,
    0xffffff4e8de845ad,
    0xffffffa746f41376,
    0xffffffd3a37a05e3,
    0xffffffe9d1bd01fb,
    0xfffffff4e8de80c0,
    0xfffffffa746f4050,
    0xfffffffd3a37a024,
    0xfffffffe9d1bd011,
    0xffffffff4e8de808,
];

/// ln 2 in Q32.32.
pub const LN2_Q32: u64 = 0xb172_17f7;

/// log2(y) in Q32.32 for y >= 1 (32 fractional bits, truncated).
pub fn log2_q32(y: u64) -> u64 {
    let y = y.max(1);
    let n = 63 - y.leading_zeros() as u64;
    // Mantissa in [1, 2) as Q1.63.
    let mut m: u128 = (y as u128) << (63 - n);
    let mut frac = 0u64;
    for i in 0..32 {
        m = (m * m) >> 63;
        if m >= 1u128 << 64 {
            frac |= 1 << (31 - i);
            m >>= 1;
        }
    }
    (n << 32) | frac
}

/// 2^(-x) in Q0.64 for x in Q32.32 (saturates to 0 for x >= 64).
pub fn exp2_neg_q32(x: u64) -> u64 {
    let ip = x >> 32;
    if ip >= 64 {
        return 0;
    }
    let mut r: u128 = u64::MAX as u128; // ~1.0 in Q0.64
    for (i, &c) in EXP2_NEG.iter().enumerate() {
        if x & (1 << (31 - i)) != 0 {
            r = (r * c as u128) >> 64;
        }
    }
    (r >> ip) as u64
}

/// -ln(U) in Q32.32 for U = (x >> 11 + 1) / 2^53, a uniform draw in (0, 1] from 53 random bits.
pub fn neg_ln_uniform_q32(x: u64) -> u64 {
    let y = (x >> 11) + 1;
    let neg_log2 = (53u64 << 32) - log2_q32(y);
    ((neg_log2 as u128 * LN2_Q32 as u128) >> 32) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_and_exp2_are_accurate() {
        for (y, want) in [(1u64, 0.0f64), (2, 1.0), (3, 1.584962500721156), (1000, 9.965784284662087), (u64::MAX, 64.0)]
        {
            let got = log2_q32(y) as f64 / 4294967296.0;
            assert!((got - want).abs() < 1e-8, "log2({y}) = {got}");
        }
        for (x, want) in
            [(0.0f64, 1.0f64), (0.5, core::f64::consts::FRAC_1_SQRT_2), (1.0, 0.5), (3.3, 0.10153154954452942)]
        {
            let got = exp2_neg_q32((x * 4294967296.0) as u64) as f64 / 18446744073709551616.0;
            assert!((got - want).abs() < 1e-8, "2^-{x} = {got}");
        }
        let e = neg_ln_uniform_q32(u64::MAX) as f64 / 4294967296.0;
        assert!(e.abs() < 1e-8);
        let half = neg_ln_uniform_q32(1u64 << 63) as f64 / 4294967296.0;
        assert!((half - core::f64::consts::LN_2).abs() < 1e-8);
    }
}
