//! The memory budget: before a run allocates, the bytes it needs (per structure, from the audit's
//! formulas: [`crate::fleet::run::sizes::fleet_rows`]) are compared with `--max-memory` (default: the memory
//! this process can still get, less a margin). Over budget is exit 2 naming each structure and the
//! flag or scenario key that lowers it; an allocation that fails anyway is an error, not an abort.

use std::sync::OnceLock;

use crate::error::{CliError, CliResult};

/// The budget and where it comes from (for messages).
#[derive(Debug, Clone)]
pub struct Budget {
    /// Bytes a run may allocate.
    pub bytes: u64,
    /// Where the figure comes from.
    pub source: String,
}

static BUDGET: OnceLock<Budget> = OnceLock::new();

/// Fallback when the available memory cannot be read (not Linux, not Unix): 4 GiB.
pub const FALLBACK_BYTES: u64 = 4 << 30;
/// The default keeps this share of the available memory free (1/8), and at least
/// [`MIN_MARGIN_BYTES`]: threads, stacks, the allocator's own arenas, the trace reader.
pub const MARGIN_DIVISOR: u64 = 8;
/// Smallest margin of the default budget: 256 MiB.
pub const MIN_MARGIN_BYTES: u64 = 256 << 20;

/// Sets the budget from `--max-memory` (None: the default). The first call wins.
pub fn set_budget(max_memory: Option<u64>) {
    let b = match max_memory {
        Some(bytes) => Budget { bytes, source: format!("--max-memory {bytes}") },
        None => default_budget(),
    };
    let _ = BUDGET.set(b);
}

/// The budget in force (the default when none was set).
pub fn budget() -> &'static Budget {
    BUDGET.get_or_init(default_budget)
}

fn default_budget() -> Budget {
    let (avail, from) = match available_bytes() {
        Some(v) => v,
        None => (FALLBACK_BYTES, "a fixed fallback (the available memory could not be read)".to_string()),
    };
    let margin = (avail / MARGIN_DIVISOR).max(MIN_MARGIN_BYTES);
    Budget {
        bytes: avail.saturating_sub(margin),
        source: format!(
            "default: {} B available ({from}) less a margin of {} B; set --max-memory to change it",
            group(avail),
            group(margin)
        ),
    }
}

/// Memory this process can still allocate: the smaller of the system's available memory and the
/// address-space limit (`ulimit -v`), with where each figure came from.
pub fn available_bytes() -> Option<(u64, String)> {
    let sys = system_available();
    let lim = address_space_limit();
    match (sys, lim) {
        (Some(s), Some(l)) if l < s.0 => Some((l, "the address-space limit, ulimit -v".into())),
        (Some(s), _) => Some(s),
        (None, Some(l)) => Some((l, "the address-space limit, ulimit -v".into())),
        (None, None) => None,
    }
}

/// Linux: `MemAvailable` of /proc/meminfo (free memory plus what the kernel can reclaim).
/// Other Unix: physical pages x page size (sysconf). Elsewhere: None.
fn system_available() -> Option<(u64, String)> {
    if let Ok(text) = std::fs::read_to_string("/proc/meminfo") {
        let kb = text
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
        if let Some(kb) = kb {
            return Some((kb.saturating_mul(1024), "MemAvailable in /proc/meminfo".into()));
        }
    }
    sys::physical_bytes().map(|b| (b, "physical memory, sysconf".into()))
}

fn address_space_limit() -> Option<u64> {
    sys::address_space_limit()
}

#[cfg(unix)]
#[allow(unsafe_code)]
mod sys {
    /// Physical memory (sysconf pages x page size).
    pub fn physical_bytes() -> Option<u64> {
        // SAFETY: sysconf has no preconditions; it returns -1 for unsupported names.
        let (pages, size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        (pages > 0 && size > 0).then(|| (pages as u64).saturating_mul(size as u64))
    }

    /// The soft RLIMIT_AS, when finite.
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every Unix
    pub fn address_space_limit() -> Option<u64> {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `r` is a valid, writable rlimit for the duration of the call.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } == 0;
        (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur as u64)
    }
}

#[cfg(not(unix))]
mod sys {
    pub fn physical_bytes() -> Option<u64> {
        None
    }
    pub fn address_space_limit() -> Option<u64> {
        None
    }
}

/// Parses a byte count: `1000000`, or with a binary suffix `K`, `M`, `G`, `T` (also `KiB`, `MB`,
/// ...: all powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("expected a byte count like 500000000, 512M or 4G, got {s:?}")),
    };
    let n: u64 = num.parse().map_err(|_| format!("expected a byte count like 500000000, 512M or 4G, got {s:?}"))?;
    n.checked_mul(1 << shift).ok_or_else(|| format!("{s:?} is more than 2^64 bytes"))
}

/// One structure a run allocates.
#[derive(Debug, Clone)]
pub struct Need {
    /// The structure.
    pub what: String,
    /// Its bytes.
    pub bytes: u64,
    /// The flag or scenario key that lowers it.
    pub lowered_by: String,
}

/// Fails with exit 2 when `needs` add up to more than the budget; the message lists every
/// non-empty structure, its bytes and what lowers it. `context` says what is being run. Returns
/// the total (the fixed part of a [`Growth`]).
pub fn check(context: &str, needs: &[Need]) -> CliResult<u64> {
    let total = needs.iter().fold(0u64, |a, n| a.saturating_add(n.bytes));
    let b = budget();
    if total <= b.bytes {
        return Ok(total);
    }
    let mut msg = format!(
        "{context} needs {} bytes of memory, more than the budget of {} bytes ({}):",
        group(total),
        group(b.bytes),
        b.source
    );
    for n in needs.iter().filter(|n| n.bytes > 0) {
        msg += &format!("\n  {:<28} {:>22} B   lowered by {}", n.what, group(n.bytes), n.lowered_by);
    }
    Err(CliError::bad_input(msg))
}

/// The structures that grow while a run streams (per-request latencies, outcomes, labels,
/// completions; a held trace), counted as they grow and checked against the budget together with
/// the fixed structures [`check`] counted before the run: the budget binds a replay of any
/// length, not only what could be counted beforehand. Clones share the count (a request source
/// and the run's sink grow into the same budget).
#[derive(Clone, Debug)]
pub struct Growth(std::sync::Arc<GrowthShared>);

#[derive(Debug)]
struct GrowthShared {
    context: String,
    fixed: u64,
    /// Bytes held per structure, in the order first grown.
    held: std::sync::Mutex<Vec<(&'static str, u64)>>,
}

/// The smallest growth step of a per-request vector, elements (then it doubles).
pub const GROWTH_MIN_ELEMENTS: usize = 1024;

impl Growth {
    /// Growth on top of `fixed` bytes (what [`check`] returned for the run's fixed structures);
    /// `context` says what runs, for messages.
    pub fn new(context: &str, fixed: u64) -> Self {
        Growth(std::sync::Arc::new(GrowthShared {
            context: context.to_string(),
            fixed,
            held: std::sync::Mutex::new(Vec::new()),
        }))
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, u64)>> {
        self.0.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes counted so far, fixed and grown.
    pub fn total(&self) -> u64 {
        self.held().iter().fold(self.0.fixed, |a, (_, b)| a.saturating_add(*b))
    }

    /// Room for one more element in `v` (the structure `what`): when full, `v` grows (doubling,
    /// at least [`GROWTH_MIN_ELEMENTS`], at most what the budget leaves) and the bytes are
    /// counted. While it grows, the old buffer and the new one are both held (a reallocation
    /// copies), so the budget must hold both; no room left is exit 2 naming `what` and the budget.
    pub fn reserve_one<T>(&self, v: &mut Vec<T>, what: &'static str) -> CliResult<()> {
        if v.len() < v.capacity() {
            return Ok(());
        }
        let size = std::mem::size_of::<T>().max(1) as u64;
        let old = v.capacity() as u64 * size;
        let room = budget().bytes.saturating_sub(self.total()).saturating_sub(old) / size;
        let want = v.capacity().max(GROWTH_MIN_ELEMENTS) as u64;
        let extra = want.min(room);
        if extra == 0 {
            // the smallest growth: one element more, while the old buffer is copied
            return Err(self.over(what, old + size));
        }
        let before = v.capacity();
        try_grow_exact(v, extra as usize, what)?;
        self.count(what, (v.capacity() - before) as u64 * size);
        Ok(())
    }

    /// Sets the bytes `what` holds (a structure that grows its own way, counted by the caller);
    /// over the budget is exit 2 naming it.
    pub fn set(&self, what: &'static str, bytes: u64) -> CliResult<()> {
        {
            let mut held = self.held();
            match held.iter_mut().find(|(w, _)| *w == what) {
                Some((_, b)) => *b = bytes,
                None => held.push((what, bytes)),
            }
        }
        if self.total() > budget().bytes {
            return Err(self.over(what, 0));
        }
        Ok(())
    }

    fn count(&self, what: &'static str, bytes: u64) {
        let mut held = self.held();
        match held.iter_mut().find(|(w, _)| *w == what) {
            Some((_, b)) => *b = b.saturating_add(bytes),
            None => held.push((what, bytes)),
        }
    }

    /// The error of a run whose `what` cannot grow (needing `need` more bytes at once) within
    /// the budget.
    fn over(&self, what: &str, need: u64) -> CliError {
        let b = budget();
        let mut msg = match need {
            0 => format!(
                "{}: the {what} outgrew the memory budget of {} bytes ({}): {} bytes held",
                self.0.context,
                group(b.bytes),
                b.source,
                group(self.total())
            ),
            _ => format!(
                "{}: the {what} would grow past the memory budget of {} bytes ({}): {} bytes held, {} more \
                 needed to grow it",
                self.0.context,
                group(b.bytes),
                b.source,
                group(self.total()),
                group(need)
            ),
        };
        let fixed = "fixed structures (counted before the run)";
        let held = self.held();
        let width = held.iter().map(|(w, _)| w.len()).chain([fixed.len()]).max().unwrap_or(0);
        msg += &format!("\n  {fixed:<width$} {:>16} B", group(self.0.fixed));
        for (w, bytes) in held.iter() {
            msg += &format!("\n  {w:<width$} {:>16} B", group(*bytes));
        }
        msg += "\n  lowered by a shorter trace (or fewer requests); or raise --max-memory";
        CliError::bad_input(msg)
    }
}

/// Reserves room for exactly `extra` more elements in `v`, or an error naming `what`.
fn try_grow_exact<T>(v: &mut Vec<T>, extra: usize, what: &str) -> CliResult<()> {
    v.try_reserve_exact(extra).map_err(|e| {
        let bytes = (v.len() as u128 + extra as u128) * std::mem::size_of::<T>() as u128;
        CliError::bad_input(format!(
            "cannot allocate {what} ({} bytes): {e}; lower the sizes that drive it or free memory",
            group_u128(bytes)
        ))
    })
}

/// A vector of `n` copies of `value`, or an error naming `what` when the allocation fails (never
/// an abort).
pub fn try_vec<T: Clone>(n: usize, value: T, what: &str) -> CliResult<Vec<T>> {
    let mut v: Vec<T> = Vec::new();
    try_grow(&mut v, n, what)?;
    let bytes = v.capacity().saturating_mul(std::mem::size_of::<T>());
    if bytes >= HUGE_PAGES_FROM {
        // before the first touch: the pages are backed as they are written below
        crate::sys::advise_huge_pages(v.as_ptr().cast(), bytes);
    }
    v.resize(n, value);
    Ok(v)
}

/// Element types whose all-zero bytes are a value (so zeroed memory is an initialized buffer of
/// them).
///
/// # Safety
/// Every bit of the type's representation may be zero: integers, not references, `NonZero*`,
/// enums without a zero discriminant or `char`-like niches.
#[allow(unsafe_code)]
pub unsafe trait ZeroValid: Copy {}
// SAFETY: any bit pattern is a u32 / u64.
#[allow(unsafe_code)]
unsafe impl ZeroValid for u32 {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl ZeroValid for u64 {}
// SAFETY: a run of the core's run LRU is a u64 key and five u32 fields (cache/runs.rs), any bit
// pattern of which is a value (the LRU writes a run before it reads it).
#[allow(unsafe_code)]
unsafe impl ZeroValid for brokerlab_core::fleet::Run {}

/// A vector of `n` zeros that writes none of its memory: it comes from the allocator's zeroed
/// allocation (`calloc`: for a large buffer, fresh pages that the kernel maps and clears only
/// when first touched), so a buffer of which a run touches a part (the pods' prompt-key rings,
/// their waiting queues: each pod uses the start of its own) costs memory and clearing for that
/// part only. No huge pages (one touch would clear 2 MiB). Equal to `try_vec(n, 0, what)`; an
/// allocation failure is an error naming `what`.
#[allow(unsafe_code)]
pub fn try_vec_zeroed<T: ZeroValid>(n: usize, what: &str) -> CliResult<Vec<T>> {
    let size = std::mem::size_of::<T>();
    if n == 0 || size == 0 {
        return Ok(Vec::new());
    }
    let fail = |e: &dyn std::fmt::Display| {
        CliError::bad_input(format!(
            "cannot allocate {what} ({} bytes): {e}; lower the sizes that drive it or free memory",
            group_u128(n as u128 * size as u128)
        ))
    };
    let layout = std::alloc::Layout::array::<T>(n).map_err(|e| fail(&e))?;
    // SAFETY: `layout` has a non-zero size (n > 0, size > 0).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return Err(fail(&"the allocator returned no memory"));
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `n` T's (what a
    // `Vec<T>` of capacity `n` holds and frees), and its `n` elements are zero bytes, which
    // `T: ZeroValid` makes initialized values.
    Ok(unsafe { Vec::from_raw_parts(ptr, n, n) })
}

/// Buffers of at least this many bytes ask for huge pages ([`crate::sys::advise_huge_pages`]):
/// 2 huge pages of 2 MiB, so that at most a few MiB of a buffer's rounding is wasted.
const HUGE_PAGES_FROM: usize = 4 << 20;

/// Reserves room for `extra` more elements in `v`, or an error naming `what`.
pub fn try_grow<T>(v: &mut Vec<T>, extra: usize, what: &str) -> CliResult<()> {
    v.try_reserve(extra).map_err(|e| {
        let bytes = (v.len() as u128 + extra as u128) * std::mem::size_of::<T>() as u128;
        CliError::bad_input(format!(
            "cannot allocate {what} ({} bytes): {e}; lower the sizes that drive it or free memory",
            group_u128(bytes)
        ))
    })
}

/// `1234567` as `1,234,567`.
pub fn group(v: u64) -> String {
    group_u128(v as u128)
}

fn group_u128(v: u128) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes_and_reject_junk() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("3TB"), Ok(3 << 40));
        for bad in ["", "-1", "1.5G", "G", "12X", "99999999999999999999", "20000000000T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zeroed_vectors_equal_filled_ones() {
        for n in [0usize, 1, 7, 4096, 3 << 20] {
            let z: Vec<u64> = try_vec_zeroed(n, "test").unwrap();
            assert_eq!(z, try_vec(n, 0u64, "test").unwrap(), "{n}");
            assert_eq!(z.capacity(), n);
            let z: Vec<u32> = try_vec_zeroed(n, "test").unwrap();
            assert!(z.len() == n && z.iter().all(|&v| v == 0), "{n}");
        }
        let err = try_vec_zeroed::<u64>(usize::MAX / 4, "the huge test buffer").unwrap_err();
        assert!(format!("{err}").contains("the huge test buffer"), "{err}");
    }

    #[test]
    fn groups_digits() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(35184372088832), "35,184,372,088,832");
    }

    #[test]
    fn available_memory_is_read_here() {
        // This crate's CI runs on Linux, where /proc/meminfo must give a figure.
        if cfg!(target_os = "linux") {
            let (b, from) = available_bytes().expect("available memory on Linux");
            assert!(b > 0, "{from}");
        }
    }
}
