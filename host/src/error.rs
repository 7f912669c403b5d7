//! The CLI's errors: one enum per command family, each variant deciding its exit code, so a
//! message that says what to fix always leaves with the code its kind calls for.

use std::path::PathBuf;

use brokerlab_core::fleet::{Field, Limit, Quantity};

use crate::fleet::run::fields;

pub use crate::exit::{EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_NEEDS_REVIEW};

/// An error the CLI prints on stderr before exiting with [`CliError::code`].
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input, said in words that name the file, line, field or flag (exit 2).
    #[error("{0}")]
    BadInput(String),
    /// Any other failure (exit 1).
    #[error("{0}")]
    Failure(String),
    /// The `fleet` commands.
    #[error(transparent)]
    Fleet(#[from] FleetError),
    /// `brokerlab audit`.
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The `task` commands.
    #[error(transparent)]
    Task(#[from] crate::task::error::TaskError),
}

impl CliError {
    /// Bad input: exit code 2.
    pub fn bad_input(msg: impl Into<String>) -> Self {
        CliError::BadInput(msg.into())
    }

    /// Any other failure: exit code 1.
    pub fn failure(msg: impl Into<String>) -> Self {
        CliError::Failure(msg.into())
    }

    /// The process exit code for this error.
    pub fn code(&self) -> i32 {
        match self {
            CliError::BadInput(_) => EXIT_BAD_INPUT,
            CliError::Failure(_) => EXIT_FAILURE,
            CliError::Fleet(e) => e.code(),
            CliError::Audit(e) => e.code(),
            CliError::Task(e) => e.code(),
        }
    }
}

/// Errors of the `fleet` commands with a structure of their own (the rest are
/// [`CliError::BadInput`] messages naming their trace line or scenario key).
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A flag's value the core rejects.
    #[error("{}: expected {expected}", fields::flag(*field))]
    Flag {
        /// The field, named by its flag.
        field: Field,
        /// What is accepted.
        expected: &'static str,
    },
    /// A scenario key's value the core rejects.
    #[error("{origin}: `{}`: expected {expected}", fields::key(*field))]
    Key {
        /// The scenario file (or built-in name).
        origin: String,
        /// The field, named by its key.
        field: Field,
        /// What is accepted.
        expected: &'static str,
    },
    /// A bound the retry loops do not grow was reached (a bug, or a limit to raise).
    #[error("internal limit `{0}` exceeded")]
    Limit(Limit),
    /// The batched engine's times overflow 64-bit nanoseconds.
    #[error(
        "the batched engine's {0} overflows 64-bit integer ns: lower the step costs (--t-overhead-ns, \
         --t-prefill-token-ns, --t-decode-seq-ns, --t-kv-token-ns, or [fleet.engine] t_*_ns)"
    )]
    EngineOverflow(Quantity),
    /// An output directory could not be created.
    #[error("{}: cannot create: {source}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An output file could not be written.
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl FleetError {
    /// Exit 2 for what the user's input decides, 1 for the rest.
    pub fn code(&self) -> i32 {
        match self {
            FleetError::Flag { .. } | FleetError::Key { .. } | FleetError::EngineOverflow(_) => EXIT_BAD_INPUT,
            FleetError::Limit(_) | FleetError::CreateDir { .. } | FleetError::Write { .. } => EXIT_FAILURE,
        }
    }
}

/// Errors of `brokerlab audit`'s firmware part.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// No figures file: `cargo xtask fw` has not run in this checkout (or this is no checkout).
    #[error(
        "the firmware figures come from `cargo xtask fw`, run in a brokerlab checkout (it builds the firmware \
         for thumbv7m-none-eabi and boots it in qemu-system-arm), which writes {}; there is none: run it \
         first, name the file with --firmware-figures, or pass --no-firmware",
        path.display()
    )]
    FiguresMissing {
        /// Where they were looked for.
        path: PathBuf,
    },
    /// The figures file could not be read.
    #[error("{}: cannot read the firmware figures: {source}", path.display())]
    FiguresUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The figures file is not what `cargo xtask fw` writes.
    #[error("{}: not the firmware figures `cargo xtask fw` writes: {source}", path.display())]
    FiguresInvalid {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
}

impl AuditError {
    /// Exit 2 for a file the user named that is wrong, 1 for figures not produced yet.
    pub fn code(&self) -> i32 {
        match self {
            AuditError::FiguresMissing { .. } => EXIT_FAILURE,
            AuditError::FiguresUnreadable { .. } | AuditError::FiguresInvalid { .. } => EXIT_BAD_INPUT,
        }
    }
}

/// Result alias used across the host crate.
pub type CliResult<T> = Result<T, CliError>;
