//! The `brokerlab` command line.

use std::process::ExitCode;

use brokerlab::error::{CliError, EXIT_BAD_INPUT};
use clap::{Parser, Subcommand};

/// brokerlab: a fleet simulator for prefix-aware routing and a durable task runner.
#[derive(Debug, Parser)]
#[command(name = "brokerlab", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The fleet simulator: replay traces, benchmarks.
    #[command(subcommand)]
    Fleet(brokerlab::fleet::FleetCmd),
    /// The durable task runner.
    #[command(subcommand)]
    Task(brokerlab::task::TaskCmd),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_BAD_INPUT } else { 0 };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let result = match cli.cmd {
        Cmd::Fleet(cmd) => brokerlab::fleet::main(cmd),
        Cmd::Task(cmd) => brokerlab::task::main(cmd),
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(CliError { code, msg }) => {
            eprintln!("brokerlab: error: {msg}");
            ExitCode::from(code as u8)
        }
    }
}
