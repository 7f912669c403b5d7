//! The `fleet` command line: clap arguments of every subcommand and their value parsers
//! (`args`), value parsers shared with other rooms (`flag`), `--router-config` files, and the
//! dispatch of each command (`commands`, `replay`).

pub mod args;
pub mod commands;
pub mod compare;
pub mod engine_args;
pub mod flag;
pub mod import;
pub mod replay;
pub mod router_config;
pub mod scale_args;
pub mod tables;
