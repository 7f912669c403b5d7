//! Value parsers of flags that the clap arguments of several files share (`cli/args.rs`, the token
//! hash's flags in `input/formats/tokens.rs`).

/// A whole number of type `T` for a flag; the message says the accepted range (clap names the
/// flag and the value). Negative numbers reach it (`allow_negative_numbers`) instead of being
/// taken for a flag.
pub fn whole<T: TryFrom<u64> + num_max::Max>(s: &str) -> Result<T, String> {
    s.trim()
        .parse::<u64>()
        .ok()
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| format!("expected a whole number between 0 and {}", T::MAX_STR))
}

pub mod num_max {
    /// The largest value of an integer type, for messages.
    pub trait Max {
        const MAX_STR: &'static str;
    }
    impl Max for u32 {
        const MAX_STR: &'static str = "4294967295";
    }
    impl Max for u64 {
        const MAX_STR: &'static str = "18446744073709551615";
    }
    impl Max for usize {
        const MAX_STR: &'static str = "18446744073709551615";
    }
}

/// A number of 16-token blocks per pod, at least `min` (0 for a CPU tier, 1 for GPU KV).
pub fn parse_blocks(min: usize, s: &str) -> Result<usize, String> {
    let max = brokerlab_core::fleet::limits::MAX_POD_BLOCKS;
    match s.trim().parse::<i128>() {
        Ok(v) if v >= min as i128 && v <= max as i128 => Ok(v as usize),
        _ => Err(format!(
            "expected a number of 16-token blocks per pod, {min}..={max} (MAX_POD_BLOCKS: slot indices are u32)"
        )),
    }
}

/// A pod's GPU KV capacity in blocks (`--capacity`).
pub fn parse_capacity(s: &str) -> Result<usize, String> {
    parse_blocks(1, s)
}

/// A pod's CPU-tier capacity in blocks (`--cpu-capacity`; 0 = no tier).
pub fn parse_cpu_capacity(s: &str) -> Result<usize, String> {
    parse_blocks(0, s)
}
