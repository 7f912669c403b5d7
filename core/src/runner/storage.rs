//! Where the log lives: the [`LogStorage`] trait and two implementations, a caller-provided RAM
//! buffer ([`RamLog`]) and NOR flash through `embedded-storage` ([`FlashLog`]).
//!
//! # Contract
//!
//! Each method says what is durable when it returns, in the style of redb's `StorageBackend`:
//!
//! | method           | after `Ok` returns                                   | after `Err` or power loss during the call |
//! |------------------|------------------------------------------------------|-------------------------------------------|
//! | `append_frame`   | the frame is durable: every later open reads it      | the frame is read whole or not at all; earlier frames are untouched |
//! | `read_record`    | nothing changes; returns only whole, CRC-valid frames | nothing changes                           |
//! | `open` (ctor)    | the log is the longest run of whole frames written;   | —                                         |
//! |                  | torn bytes are skipped and never read as a record     |                                           |
//!
//! "Durable" means: survives a power cut (flash) / the process keeping the buffer (RAM). The RAM
//! log is as durable as the memory the caller hands in (e.g. battery-backed SRAM, or a test).
//!
//! # Flash layout
//!
//! Frames ([`super::frame`]) are written back to back from the start of the region, each padded
//! with erased bytes (`0xFF`, never written) to `WRITE_SIZE`. Recovery ([`FlashLog::open`]) walks the
//! frames; at a position that is not a whole valid frame it skips to the next erase-page boundary
//! (a torn write leaves garbage that cannot be rewritten without erasing), and the log ends at the
//! first erased header after which the whole region is erased. A new append after a torn write
//! therefore starts on a fresh page boundary past the garbage. Writes only ever go to erased
//! bytes, each `WRITE_SIZE` word once.

use embedded_storage::nor_flash::NorFlash;

use super::error::StorageError;
use super::frame::{self, FrameError, HEADER_LEN, MAX_FRAME_LEN};
use super::machine::TaskState;
use super::record::{Record, TaskId};

/// A position in a log (byte offset from the start of the storage).
pub type Cursor = u32;

/// Largest flash `WRITE_SIZE` supported (a frame is padded in a stack buffer).
pub const MAX_WRITE_SIZE: usize = 32;

/// An append-only log of frames. See the module docs for the durability contract.
pub trait LogStorage {
    /// The backend's error.
    type Error: core::fmt::Debug;

    /// Appends one frame (as produced by [`frame::emit`]).
    ///
    /// Durable after `Ok`: every later `open`/`read_record` sees it. After `Err` or a power loss
    /// inside the call, recovery sees the frame either whole or not at all, and the frames before
    /// it unchanged. After an `Err` the log may refuse further appends until reopened.
    fn append_frame(&mut self, frame: &[u8]) -> Result<(), StorageError<Self::Error>>;

    /// Reads the first whole record at or after `cursor`; returns it and the cursor after it, or
    /// `None` at the end of the log. Never returns a torn or corrupt frame as a record (a frame
    /// whose CRC matches but whose record does not decode is an error, not a skip).
    fn read_record(&mut self, cursor: Cursor) -> Result<Option<(Record, Cursor)>, StorageError<Self::Error>>;

    /// The cursor of the first record.
    fn first(&self) -> Cursor;

    /// Bytes still free for appends.
    fn free(&self) -> usize;
}

/// Encodes `rec` and appends it (durable on `Ok`, see [`LogStorage::append_frame`]).
pub fn append_record<S: LogStorage + ?Sized>(log: &mut S, rec: &Record) -> Result<(), StorageError<S::Error>> {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let n = frame::emit(rec, &mut buf)?;
    match buf.get(..n) {
        Some(f) => log.append_frame(f),
        None => Err(StorageError::Frame(FrameError::TooLarge)),
    }
}

/// Calls `f` on every record in order.
pub fn for_each_record<S: LogStorage + ?Sized, F: FnMut(&Record)>(
    log: &mut S,
    mut f: F,
) -> Result<(), StorageError<S::Error>> {
    let mut cur = log.first();
    while let Some((rec, next)) = log.read_record(cur)? {
        f(&rec);
        cur = next;
    }
    Ok(())
}

/// Replays the first `limit` records of `task` (all of them with `usize::MAX`) into its state.
/// An inconsistent log is an error ([`StorageError::Runner`]), never a guess.
pub fn replay_prefix<S: LogStorage + ?Sized>(
    log: &mut S,
    task: &TaskId,
    limit: usize,
) -> Result<TaskState, StorageError<S::Error>> {
    let mut state = TaskState::new(task.clone());
    let mut cur = log.first();
    let mut n = 0usize;
    while n < limit {
        let Some((rec, next)) = log.read_record(cur)? else { break };
        cur = next;
        if rec.task_id == *task {
            state.apply(&rec)?;
            n += 1;
        }
    }
    Ok(state)
}

/// Replays all records of `task`.
pub fn replay<S: LogStorage + ?Sized>(log: &mut S, task: &TaskId) -> Result<TaskState, StorageError<S::Error>> {
    replay_prefix(log, task, usize::MAX)
}

// ---------------------------------------------------------------------------------------------
// RAM

/// A log in a caller-provided RAM buffer.
#[derive(Debug)]
pub struct RamLog<'a> {
    buf: &'a mut [u8],
    end: usize,
}

/// The RAM log never fails on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RamError {}

impl<'a> RamLog<'a> {
    /// An empty log: erases (fills with `0xFF`) the whole buffer.
    pub fn format(buf: &'a mut [u8]) -> Self {
        buf.fill(0xFF);
        RamLog { buf, end: 0 }
    }

    /// Recovers the log in `buf` (e.g. after a simulated crash): keeps the longest run of whole
    /// valid frames from the start and erases everything after it (RAM can be rewritten).
    pub fn open(buf: &'a mut [u8]) -> Self {
        let mut end = 0usize;
        while let Some(rest) = buf.get(end..) {
            match frame::parse_raw(rest) {
                Ok((_, n)) => end += n,
                Err(_) => break,
            }
        }
        if let Some(tail) = buf.get_mut(end..) {
            tail.fill(0xFF);
        }
        RamLog { buf, end }
    }

    /// Bytes in use.
    pub fn len(&self) -> usize {
        self.end
    }

    /// Whether no frame was appended.
    pub fn is_empty(&self) -> bool {
        self.end == 0
    }

    /// Fault injection: writes only the first `n` bytes of `frame` and does not advance the end,
    /// as if power were cut mid-write. Reopen with [`RamLog::open`] to recover. Test support
    /// (feature `harness`).
    #[cfg(feature = "harness")]
    pub fn append_torn(&mut self, frame: &[u8], n: usize) {
        let n = n.min(frame.len());
        let end = self.end;
        if let (Some(dst), Some(src)) = (self.buf.get_mut(end..end + n), frame.get(..n)) {
            dst.copy_from_slice(src);
        }
    }

    /// Gives the buffer back (to reopen it after a simulated crash).
    pub fn into_inner(self) -> &'a mut [u8] {
        self.buf
    }
}

impl LogStorage for RamLog<'_> {
    type Error = RamError;

    fn append_frame(&mut self, f: &[u8]) -> Result<(), StorageError<RamError>> {
        let free = self.buf.len().saturating_sub(self.end);
        let end = self.end;
        match self.buf.get_mut(end..end + f.len()) {
            Some(dst) => {
                dst.copy_from_slice(f);
                self.end += f.len();
                debug_assert!(self.end <= self.buf.len(), "the log's end stays inside its buffer");
                Ok(())
            }
            None => Err(StorageError::Full { needed: f.len(), free }),
        }
    }

    fn read_record(&mut self, cursor: Cursor) -> Result<Option<(Record, Cursor)>, StorageError<RamError>> {
        let pos = cursor as usize;
        if pos >= self.end {
            return Ok(None);
        }
        let Some(rest) = self.buf.get(pos..self.end) else { return Ok(None) };
        let (rec, n) = frame::parse(rest)?;
        Ok(Some((rec, (pos + n) as Cursor)))
    }

    fn first(&self) -> Cursor {
        0
    }

    fn free(&self) -> usize {
        self.buf.len().saturating_sub(self.end)
    }
}

// ---------------------------------------------------------------------------------------------
// NOR flash

/// A log in a region of NOR flash (`embedded-storage`), robust to a write torn at any byte.
#[derive(Debug)]
pub struct FlashLog<F> {
    flash: F,
    base: u32,
    limit: u32,
    end: u32,
    poisoned: bool,
}

const fn align_up(x: u32, a: u32) -> u32 {
    x.div_ceil(a) * a
}

impl<F: NorFlash> FlashLog<F> {
    fn check(flash: &F, base: u32, size: u32) -> Result<(), StorageError<F::Error>> {
        let (r, w, e) = (F::READ_SIZE, F::WRITE_SIZE, F::ERASE_SIZE);
        if r == 0 || w == 0 || e == 0 || !w.is_multiple_of(r) || !e.is_multiple_of(w) {
            return Err(StorageError::Config("READ_SIZE | WRITE_SIZE | ERASE_SIZE must divide"));
        }
        if w > MAX_WRITE_SIZE || r > MAX_WRITE_SIZE {
            return Err(StorageError::Config("WRITE_SIZE larger than MAX_WRITE_SIZE"));
        }
        let e = e as u32;
        if !base.is_multiple_of(e) || !size.is_multiple_of(e) || size == 0 {
            return Err(StorageError::Config("region must be whole erase pages"));
        }
        match base.checked_add(size) {
            Some(end) if end as usize <= flash.capacity() => Ok(()),
            _ => Err(StorageError::Config("region beyond the flash capacity")),
        }
    }

    /// Erases the region `[base, base + size)` and returns an empty log on it.
    pub fn format(mut flash: F, base: u32, size: u32) -> Result<Self, StorageError<F::Error>> {
        Self::check(&flash, base, size)?;
        flash.erase(base, base + size).map_err(StorageError::Backend)?;
        Ok(FlashLog { flash, base, limit: base + size, end: base, poisoned: false })
    }

    /// Opens (recovers) the log in `[base, base + size)`: whole frames are kept, torn bytes are
    /// skipped to the next erase page, and the end is placed where the rest of the region is
    /// erased. Reads the whole region once.
    pub fn open(flash: F, base: u32, size: u32) -> Result<Self, StorageError<F::Error>> {
        Self::check(&flash, base, size)?;
        let mut log = FlashLog { flash, base, limit: base + size, end: base + size, poisoned: false };
        let mut pos = base;
        let mut buf = [0u8; MAX_FRAME_LEN + MAX_WRITE_SIZE];
        while pos < log.limit {
            match log.frame_at(pos, &mut buf)? {
                Probe::Frame(n) => pos = align_up(pos + n, F::WRITE_SIZE as u32),
                Probe::Erased if log.erased_from(pos)? => {
                    log.end = pos;
                    break;
                }
                Probe::Erased | Probe::Garbage => pos = log.next_page(pos),
            }
        }
        if pos >= log.limit {
            log.end = log.limit;
        }
        Ok(log)
    }

    fn next_page(&self, pos: u32) -> u32 {
        let e = F::ERASE_SIZE as u32;
        self.base + ((pos - self.base) / e + 1) * e
    }

    fn read(&mut self, pos: u32, buf: &mut [u8]) -> Result<(), StorageError<F::Error>> {
        self.flash.read(pos, buf).map_err(StorageError::Backend)
    }

    /// Reads `want` bytes at `pos` (rounded up to READ_SIZE, clipped to the region) into `buf`.
    fn read_clipped<'b>(
        &mut self,
        pos: u32,
        want: usize,
        buf: &'b mut [u8],
    ) -> Result<&'b [u8], StorageError<F::Error>> {
        let room = (self.limit - pos) as usize;
        let n = (align_up(want as u32, F::READ_SIZE as u32) as usize).min(room).min(buf.len());
        let Some(dst) = buf.get_mut(..n) else { return Err(StorageError::Config("read buffer")) };
        self.read(pos, dst)?;
        Ok(dst)
    }

    fn frame_at(&mut self, pos: u32, buf: &mut [u8]) -> Result<Probe, StorageError<F::Error>> {
        let head = self.read_clipped(pos, HEADER_LEN, buf)?;
        let h = match frame::parse_header(head) {
            Ok(h) => h,
            Err(FrameError::Erased) => return Ok(Probe::Erased),
            Err(_) => return Ok(Probe::Garbage),
        };
        let n = h.frame_len();
        if n > (self.limit - pos) as usize {
            return Ok(Probe::Garbage);
        }
        let whole = self.read_clipped(pos, n, buf)?;
        Ok(match frame::parse_raw(whole) {
            Ok(_) => Probe::Frame(n as u32),
            Err(_) => Probe::Garbage,
        })
    }

    fn erased_from(&mut self, mut pos: u32) -> Result<bool, StorageError<F::Error>> {
        let mut chunk = [0u8; 64];
        while pos < self.limit {
            let want = chunk.len().min((self.limit - pos) as usize);
            let got = self.read_clipped(pos, want, &mut chunk)?;
            if got.iter().any(|&b| b != 0xFF) {
                return Ok(false);
            }
            if got.is_empty() {
                break;
            }
            pos += got.len() as u32;
        }
        Ok(true)
    }

    /// Offset where the next frame will be written.
    pub fn end(&self) -> u32 {
        self.end
    }

    /// Gives the flash back.
    pub fn into_inner(self) -> F {
        self.flash
    }
}

enum Probe {
    Frame(u32),
    Erased,
    Garbage,
}

impl<F: NorFlash> LogStorage for FlashLog<F> {
    type Error = F::Error;

    fn append_frame(&mut self, f: &[u8]) -> Result<(), StorageError<F::Error>> {
        if self.poisoned {
            return Err(StorageError::Poisoned);
        }
        let padded = align_up(f.len() as u32, F::WRITE_SIZE as u32);
        let free = self.limit.saturating_sub(self.end);
        if padded > free {
            return Err(StorageError::Full { needed: padded as usize, free: free as usize });
        }
        let mut buf = [0xFFu8; MAX_FRAME_LEN + MAX_WRITE_SIZE];
        let Some(dst) = buf.get_mut(..f.len()) else {
            return Err(StorageError::Frame(FrameError::TooLarge));
        };
        dst.copy_from_slice(f);
        let Some(data) = buf.get(..padded as usize) else {
            return Err(StorageError::Frame(FrameError::TooLarge));
        };
        if let Err(e) = self.flash.write(self.end, data) {
            self.poisoned = true;
            return Err(StorageError::Backend(e));
        }
        self.end += padded;
        // Frames are written whole, inside [base, limit).
        debug_assert!(self.base <= self.end && self.end <= self.limit, "the log's end stays in its region");
        Ok(())
    }

    fn read_record(&mut self, cursor: Cursor) -> Result<Option<(Record, Cursor)>, StorageError<F::Error>> {
        let mut pos = cursor.max(self.base);
        let mut buf = [0u8; MAX_FRAME_LEN + MAX_WRITE_SIZE];
        while pos < self.end {
            match self.frame_at(pos, &mut buf)? {
                Probe::Frame(n) => {
                    let Some(bytes) = buf.get(..n as usize) else {
                        return Err(StorageError::Frame(FrameError::Truncated));
                    };
                    let (rec, _) = frame::parse(bytes)?;
                    return Ok(Some((rec, align_up(pos + n, F::WRITE_SIZE as u32))));
                }
                Probe::Erased | Probe::Garbage => pos = self.next_page(pos),
            }
        }
        Ok(None)
    }

    fn first(&self) -> Cursor {
        self.base
    }

    fn free(&self) -> usize {
        self.limit.saturating_sub(self.end) as usize
    }
}

// ---------------------------------------------------------------------------------------------
// A mock NOR flash with power cuts
// (test support: feature `harness`)

#[cfg(feature = "harness")]
pub use mock::{MockFlash, MockFlashError};

#[cfg(feature = "harness")]
mod mock {
    use embedded_storage::nor_flash::{NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash};

    /// Errors of [`MockFlash`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[cfg_attr(feature = "defmt", derive(defmt::Format))]
    pub enum MockFlashError {
        /// Misaligned or out of bounds.
        Geometry(#[cfg_attr(feature = "defmt", defmt(Debug2Format))] NorFlashErrorKind),
        /// The power was cut during this operation (some bytes may have been written).
        PowerCut,
    }

    impl NorFlashError for MockFlashError {
        fn kind(&self) -> NorFlashErrorKind {
            match self {
                MockFlashError::Geometry(k) => *k,
                MockFlashError::PowerCut => NorFlashErrorKind::Other,
            }
        }
    }

    /// NOR flash in a caller buffer with real NOR semantics (erase sets `0xFF`, a write can only clear
    /// bits: `cell &= data`) and a power cut after a budget of written bytes. `W` is `WRITE_SIZE`,
    /// `E` is `ERASE_SIZE`; `READ_SIZE` is 1.
    #[derive(Debug)]
    pub struct MockFlash<'a, const W: usize, const E: usize> {
        mem: &'a mut [u8],
        budget: Option<usize>,
        /// Bytes written since creation.
        pub written: usize,
        /// Writes that tried to set a bit back to 1 (a log bug: writing over non-erased bytes).
        pub overwrites: usize,
        /// Whether the power has been cut.
        pub dead: bool,
    }

    impl<'a, const W: usize, const E: usize> MockFlash<'a, W, E> {
        /// A flash over `mem` (its current content is the flash content).
        pub fn new(mem: &'a mut [u8]) -> Self {
            MockFlash { mem, budget: None, written: 0, overwrites: 0, dead: false }
        }
        /// Cuts the power after `n` more bytes are written: the write that crosses the budget writes
        /// its first bytes only and fails; every later operation fails.
        pub fn cut_after(&mut self, n: usize) {
            self.budget = Some(n);
        }
        /// Restores power (as after a reboot) and removes the budget.
        pub fn power_on(&mut self) {
            self.budget = None;
            self.dead = false;
        }
        /// The raw memory.
        pub fn mem(&self) -> &[u8] {
            self.mem
        }
    }

    impl<const W: usize, const E: usize> embedded_storage::nor_flash::ErrorType for MockFlash<'_, W, E> {
        type Error = MockFlashError;
    }

    impl<const W: usize, const E: usize> ReadNorFlash for MockFlash<'_, W, E> {
        const READ_SIZE: usize = 1;

        fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), MockFlashError> {
            if self.dead {
                return Err(MockFlashError::PowerCut);
            }
            let o = offset as usize;
            match self.mem.get(o..o + bytes.len()) {
                Some(src) => {
                    bytes.copy_from_slice(src);
                    Ok(())
                }
                None => Err(MockFlashError::Geometry(NorFlashErrorKind::OutOfBounds)),
            }
        }

        fn capacity(&self) -> usize {
            self.mem.len()
        }
    }

    impl<const W: usize, const E: usize> NorFlash for MockFlash<'_, W, E> {
        const WRITE_SIZE: usize = W;
        const ERASE_SIZE: usize = E;

        fn erase(&mut self, from: u32, to: u32) -> Result<(), MockFlashError> {
            if self.dead {
                return Err(MockFlashError::PowerCut);
            }
            embedded_storage::nor_flash::check_erase(self, from, to).map_err(MockFlashError::Geometry)?;
            match self.mem.get_mut(from as usize..to as usize) {
                Some(m) => {
                    m.fill(0xFF);
                    Ok(())
                }
                None => Err(MockFlashError::Geometry(NorFlashErrorKind::OutOfBounds)),
            }
        }

        fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), MockFlashError> {
            if self.dead {
                return Err(MockFlashError::PowerCut);
            }
            embedded_storage::nor_flash::check_write(self, offset, bytes.len()).map_err(MockFlashError::Geometry)?;
            let o = offset as usize;
            for (i, &b) in bytes.iter().enumerate() {
                if let Some(left) = self.budget.as_mut() {
                    if *left == 0 {
                        self.dead = true;
                        return Err(MockFlashError::PowerCut);
                    }
                    *left -= 1;
                }
                if let Some(cell) = self.mem.get_mut(o + i) {
                    if *cell & b != b {
                        self.overwrites += 1;
                    }
                    *cell &= b;
                    self.written += 1;
                }
            }
            Ok(())
        }
    }
}
