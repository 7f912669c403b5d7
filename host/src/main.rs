//! The `brokerlab` command line.

use std::process::ExitCode;

use brokerlab::error::EXIT_BAD_INPUT;
use clap::{Parser, Subcommand};

/// Counts heap allocations for `fleet bench --route` (one relaxed atomic add per allocation).
#[global_allocator]
static GLOBAL: brokerlab::fleet::bench::route::CountingAlloc = brokerlab::fleet::bench::route::CountingAlloc;

/// brokerlab: a fleet simulator for prefix-aware routing and a durable task runner.
#[derive(Debug, Parser)]
#[command(name = "brokerlab", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// parsed once per process: the size of the largest variant does not matter
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Cmd {
    /// The fleet simulator: replay traces, benchmarks.
    #[command(subcommand)]
    Fleet(brokerlab::fleet::FleetCmd),
    /// The durable task runner.
    #[command(subcommand)]
    Task(brokerlab::task::TaskCmd),
    /// Memory audit of the fixed-memory core for a scenario, and the firmware's measured figures.
    Audit(AuditArgs),
}

#[derive(Debug, clap::Args)]
struct AuditArgs {
    /// Scenario: a built-in name (multi-tenant, alpha, llm-d, rag) or a TOML file.
    #[arg(default_value = "multi-tenant")]
    scenario: String,
    /// Queued requests tracked per pod.
    #[arg(long, default_value_t = 4096)]
    queue_per_pod: usize,
    /// Evictions in flight tracked for a stale index.
    #[arg(long, default_value_t = 4096)]
    pending: usize,
    /// Leave the firmware's figures out.
    #[arg(long)]
    no_firmware: bool,
    /// The firmware's figures, as `cargo xtask fw` writes them in a checkout (default:
    /// $CARGO_TARGET_DIR/firmware/figures.json, else target/firmware/figures.json).
    #[arg(long, value_name = "FILE", conflicts_with = "no_firmware")]
    firmware_figures: Option<std::path::PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn audit(a: AuditArgs) -> brokerlab::error::CliResult<i32> {
    use brokerlab::fleet::scenario::{Scenario, builtin};
    let sc = if builtin::BUILTIN.iter().any(|(n, _)| *n == a.scenario) {
        builtin::builtin(&a.scenario)?
    } else {
        Scenario::load(std::path::Path::new(&a.scenario))?.without_load("audit")?
    };
    let mut au = brokerlab::audit::audit(&sc, a.queue_per_pod, a.pending)?;
    if !a.no_firmware {
        let path = a.firmware_figures.unwrap_or_else(brokerlab::audit::default_figures_path);
        au.firmware = Some(brokerlab::audit::firmware(&path)?);
    }
    if a.json {
        brokerlab::print_stdout(&format!("{}\n", serde_json::to_string_pretty(&au).expect("audit serializes")));
    } else {
        brokerlab::print_stdout(&brokerlab::audit::render(&au));
    }
    let fw_ok = au.firmware.as_ref().is_none_or(|f| f.exit_code == 0 && f.allocator_symbols.is_empty());
    Ok(if fw_ok { 0 } else { 1 })
}

/// Stack of the thread that runs a `fleet` command: a fleet value holds its pods inline (about
/// 430 KB at MAX_PODS = 1,024, more with P/D buffers), and an unoptimized build keeps several
/// copies on the stack while building one, which overflowed the main thread's 8 MiB. Address
/// space only: the pages a run does not touch are never committed. The task runner stays on the
/// main thread (its crash and pause injection and its chaos tests assume the process's own thread).
const FLEET_STACK_BYTES: usize = 256 << 20;

/// Runs a `fleet` command on a thread of [`FLEET_STACK_BYTES`]; a panic there is re-raised here
/// (exit 101 as before); a thread that cannot start is an error exit.
fn fleet_on_big_stack(cmd: brokerlab::fleet::FleetCmd) -> Result<brokerlab::error::CliResult<i32>, ExitCode> {
    let spawned = std::thread::Builder::new()
        .name("brokerlab-fleet".into())
        .stack_size(FLEET_STACK_BYTES)
        .spawn(move || brokerlab::fleet::main(cmd));
    match spawned {
        Ok(handle) => handle.join().map_err(|panic| std::panic::resume_unwind(panic)),
        Err(e) => {
            brokerlab::print_stderr(&format!("brokerlab: error: cannot start the fleet command's thread: {e}"));
            Err(ExitCode::from(brokerlab::error::EXIT_FAILURE as u8))
        }
    }
}

fn main() -> ExitCode {
    // a write past `ulimit -f` must fail with EFBIG and be reported, not kill us silently
    brokerlab::sys::ignore_file_size_signal();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_BAD_INPUT } else { 0 };
            // `--help > /dev/full` fails like any other output; a closed pipe ends quietly
            if let Err(err) = e.print()
                && code == 0
                && err.kind() != std::io::ErrorKind::BrokenPipe
            {
                brokerlab::print_stderr(&format!("brokerlab: error: cannot write to stdout: {err}"));
                return ExitCode::from(brokerlab::error::EXIT_FAILURE as u8);
            }
            return ExitCode::from(code as u8);
        }
    };
    let result = match cli.cmd {
        Cmd::Fleet(cmd) => match fleet_on_big_stack(cmd) {
            Ok(result) => result,
            Err(code) => return code,
        },
        Cmd::Task(cmd) => brokerlab::task::main(cmd),
        Cmd::Audit(a) => audit(a),
    };
    // an output cut short by a full disk or an I/O error is a failure, not a result
    let result = result.and_then(|code| match brokerlab::stdout_failure() {
        Some(msg) => Err(brokerlab::error::CliError::failure(msg)),
        None => Ok(code),
    });
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            // files staged for a set that will not be complete
            brokerlab::outfile::discard();
            let (code, msg) = (e.code(), e.to_string());
            brokerlab::print_stderr(&format!("brokerlab: error: {msg}"));
            ExitCode::from(code as u8)
        }
    }
}
