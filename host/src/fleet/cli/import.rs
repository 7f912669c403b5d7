//! `brokerlab fleet import`: other tools' workload configurations as scenario files.
//!
//! Today one format: inference-perf's YAML config (kubernetes-sigs/inference-perf; the rules
//! followed are in docs/MODEL.md, "inference-perf configs"). A key the importer does not model is
//! exit 2 naming it, never ignored.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::error::{CliError, CliResult};

/// `fleet import` subcommands.
#[derive(Debug, Subcommand)]
pub enum ImportCmd {
    /// An inference-perf config (YAML): its `load` and `data` sections as a scenario TOML (the
    /// fleet, which the config does not describe, from the flags).
    InferencePerf(InferencePerfArgs),
}

/// `fleet import inference-perf` arguments.
#[derive(Debug, Args)]
pub struct InferencePerfArgs {
    /// inference-perf config file (YAML).
    pub config: PathBuf,
    /// Write the scenario here (default: print it on stdout).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub fleet: crate::fleet::scenario::inference_perf::FleetFlags,
}

/// Runs `fleet import ...`; returns the exit code.
pub fn main(cmd: ImportCmd) -> CliResult<i32> {
    match cmd {
        ImportCmd::InferencePerf(a) => {
            if let Some(o) = &a.output {
                crate::outfile::check_output("-o", o, &[("the config", a.config.as_path())])?;
            }
            let text = std::fs::read_to_string(&a.config)
                .map_err(|e| CliError::bad_input(format!("{}: cannot read: {e}", a.config.display())))?;
            let imported =
                crate::fleet::scenario::inference_perf::import(&text, &a.config.display().to_string(), &a.fleet)?;
            for note in &imported.notes {
                crate::print_stderr(&format!("note: {note}"));
            }
            match &a.output {
                Some(o) => {
                    crate::outfile::write(o, imported.toml.as_bytes())
                        .map_err(|e| CliError::failure(format!("-o {}: cannot write: {e}", o.display())))?;
                    crate::print_stderr(&format!(
                        "wrote {} (run it with `brokerlab fleet run {}`)",
                        o.display(),
                        o.display()
                    ));
                }
                None => say_raw!("{}", imported.toml),
            }
            Ok(0)
        }
    }
}
