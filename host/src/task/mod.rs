//! `brokerlab task ...`: the durable task runner on the host (SQLite log, tools, CLI).

use clap::Subcommand;

use crate::error::CliResult;

/// `brokerlab task` subcommands.
#[derive(Debug, Subcommand)]
pub enum TaskCmd {}

/// Runs one `task` subcommand; returns the process exit code on success.
pub fn main(cmd: TaskCmd) -> CliResult<i32> {
    match cmd {}
}
