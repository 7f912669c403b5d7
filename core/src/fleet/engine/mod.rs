//! The engines: what one pod does with the requests routed to it, in time. The FIFO single
//! server ([`server`]) and vLLM-style continuous batching ([`batched`]).

pub mod batched;
pub mod server;
