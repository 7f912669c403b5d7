//! The runner core's error types.

use core::fmt;

use super::frame::FrameError;
use super::record::Kind;

/// A record that cannot be folded into a task's state (the log is inconsistent, or a caller tried
/// to append something impossible).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RunnerError {
    /// The record belongs to another task.
    WrongTask {
        /// Its sequence number.
        seq: u32,
    },
    /// A gap or a repeat in the sequence numbers.
    BadSeq {
        /// The sequence number expected next.
        expected: u32,
        /// The one found.
        got: u32,
    },
    /// The status column does not match the kind.
    BadStatus {
        /// Sequence number.
        seq: u32,
    },
    /// An event that is impossible in the current phase.
    Unexpected {
        /// Sequence number.
        seq: u32,
        /// The record's kind.
        kind: Kind,
        /// What is wrong.
        what: &'static str,
    },
    /// A lease with an epoch not above the current one (fencing).
    StaleEpoch {
        /// The epoch in force.
        current: u64,
        /// The epoch offered.
        got: u64,
    },
}

impl fmt::Display for RunnerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunnerError::WrongTask { seq } => write!(f, "record seq {seq} belongs to another task"),
            RunnerError::BadSeq { expected, got } => {
                write!(f, "sequence gap: expected seq {expected}, found {got}")
            }
            RunnerError::BadStatus { seq } => {
                write!(f, "record seq {seq}: status does not match its kind")
            }
            RunnerError::Unexpected { seq, kind, what } => {
                write!(f, "record seq {seq} ({}): {what}", kind.name())
            }
            RunnerError::StaleEpoch { current, got } => {
                write!(f, "stale lease epoch {got} (current epoch is {current})")
            }
        }
    }
}

impl core::error::Error for RunnerError {}

/// An error of a [`crate::runner::LogStorage`] backend or of the log on top of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum StorageError<E> {
    /// No room for the frame.
    Full {
        /// Bytes needed.
        needed: usize,
        /// Bytes left.
        free: usize,
    },
    /// A frame could not be encoded or decoded.
    Frame(FrameError),
    /// A record did not fold (inconsistent log).
    Runner(RunnerError),
    /// The backend's geometry is unusable (alignment, region bounds).
    Config(&'static str),
    /// A previous write failed; reopen (recover) the log before appending again.
    Poisoned,
    /// The backend failed.
    Backend(E),
}

impl<E: fmt::Debug> fmt::Display for StorageError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Full { needed, free } => {
                write!(f, "log full: {needed} bytes needed, {free} free")
            }
            StorageError::Frame(e) => write!(f, "{e}"),
            StorageError::Runner(e) => write!(f, "{e}"),
            StorageError::Config(what) => write!(f, "bad storage geometry: {what}"),
            StorageError::Poisoned => f.write_str("a write failed; reopen the log to recover"),
            StorageError::Backend(e) => write!(f, "storage backend error: {e:?}"),
        }
    }
}

impl<E: fmt::Debug> core::error::Error for StorageError<E> {}

impl<E> From<FrameError> for StorageError<E> {
    fn from(e: FrameError) -> Self {
        StorageError::Frame(e)
    }
}

impl<E> From<RunnerError> for StorageError<E> {
    fn from(e: RunnerError) -> Self {
        StorageError::Runner(e)
    }
}
