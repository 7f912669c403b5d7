//! `brokerlab fleet ...`: the fleet simulator on the host.

pub mod bench;
pub mod run;
pub mod trace;

use std::path::PathBuf;

use brokerlab_core::fleet::{FleetConfig, RouterKind, TouchOrder};
use clap::{Args, Subcommand};

use crate::error::{CliError, CliResult};
use run::{TraceSource, render_table, simulate};

/// `brokerlab fleet` subcommands.
#[derive(Debug, Subcommand)]
pub enum FleetCmd {
    /// Replay a Mooncake JSONL trace through N pods and a router; print the metrics.
    Replay(ReplayArgs),
    /// Measure core throughput (requests/s, block touches/s) and memory per cached block.
    Bench(BenchArgs),
}

fn parse_router(s: &str) -> Result<RouterKind, String> {
    RouterKind::parse(s).ok_or_else(|| "expected one of round-robin, least-loaded, prefix-aware".to_string())
}

fn parse_order(s: &str) -> Result<TouchOrder, String> {
    TouchOrder::parse(s).ok_or_else(|| "expected tail-first or in-order".to_string())
}

/// The fleet and model parameters shared by replay and the scenario commands.
#[derive(Debug, Args, Clone)]
pub struct FleetArgs {
    /// Number of pods N (1..=64).
    #[arg(long)]
    pub pods: usize,
    /// Blocks (16 tokens each) per pod C.
    #[arg(long)]
    pub capacity: usize,
    /// round-robin | least-loaded | prefix-aware
    #[arg(long, value_parser = parse_router)]
    pub router: RouterKind,
    /// Load penalty of prefix-aware: blocks per queued request.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub alpha: f64,
    /// Stale-evict delay k, in requests (0 = exact index).
    #[arg(long, default_value_t = 0)]
    pub stale: u32,
    /// tail-first | in-order
    #[arg(long, default_value = "tail-first", value_parser = parse_order)]
    pub order: TouchOrder,
    /// Prefill cost, ns per uncached prompt token.
    #[arg(long, default_value_t = 50_000)]
    pub t_prefill_ns: u64,
    /// Decode cost, ns per output token.
    #[arg(long, default_value_t = 0)]
    pub t_decode_ns: u64,
}

impl FleetArgs {
    /// The core configuration.
    pub fn config(&self) -> FleetConfig {
        FleetConfig {
            pods: self.pods,
            capacity_blocks: self.capacity,
            router: self.router,
            alpha: self.alpha,
            stale_delay: self.stale,
            order: self.order,
            t_prefill_ns: self.t_prefill_ns,
            t_decode_ns: self.t_decode_ns,
        }
    }
}

/// `fleet replay` arguments.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Mooncake JSONL trace (timestamp ms, input_length, output_length, hash_ids).
    #[arg(long)]
    pub trace: PathBuf,
    /// Tokens per trace hash id S (a multiple of 16).
    #[arg(long, default_value_t = 512)]
    pub trace_block_size: u32,
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `fleet bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Trace to replay.
    #[arg(long, default_value = "../shared/traces/conversation_trace.jsonl")]
    pub trace: PathBuf,
    /// Tokens per trace hash id S.
    #[arg(long, default_value_t = 512)]
    pub trace_block_size: u32,
    /// Pods.
    #[arg(long, default_value_t = 8)]
    pub pods: usize,
    /// Blocks per pod.
    #[arg(long, default_value_t = 16384)]
    pub capacity: usize,
    /// Repeats per router; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn check_trace_block(s: u32) -> CliResult<()> {
    brokerlab_core::fleet::keys::check_trace_block_tokens(s).map_err(|_| {
        CliError::bad_input(format!("--trace-block-size {s}: expected a non-zero multiple of 16, at most 1048576"))
    })
}

/// Runs one `fleet` subcommand; returns the exit code.
pub fn main(cmd: FleetCmd) -> CliResult<i32> {
    match cmd {
        FleetCmd::Replay(a) => {
            check_trace_block(a.trace_block_size)?;
            let cfg = a.fleet.config();
            cfg.validate().map_err(run::config_error)?;
            let mut src = TraceSource { path: a.trace.clone(), trace_block_tokens: a.trace_block_size };
            let res = simulate(cfg, &mut src, false)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&res.summary).expect("summary serializes"));
            } else {
                println!("trace {}", a.trace.display());
                print!("{}", render_table(&res.summary));
            }
            Ok(0)
        }
        FleetCmd::Bench(a) => {
            check_trace_block(a.trace_block_size)?;
            let r = bench::run(a.trace, a.trace_block_size, a.pods, a.capacity, a.repeats)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&r).expect("report serializes"));
            } else {
                print!("{}", bench::render(&r));
            }
            Ok(0)
        }
    }
}
