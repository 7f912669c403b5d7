//! The fleet simulator core: chained block keys, fixed-capacity LRU pods, the block index with a
//! stale-evict delay, the routers and the engines (FIFO single servers, vLLM-style batching).
//!
//! The model is specified in `docs/MODEL.md`; every rule lives here once and the host, the
//! firmware and the tests call it. Every buffer is provided by the caller ("bring your own
//! storage", as in smoltcp), so the host can run pods of millions of blocks while this crate never
//! allocates. [`FifoLayout`] and [`BatchedLayout`] say how large each buffer must be.
//!
//! Layers, each importing only those below it (docs/ARCHITECTURE.md):
//!
//! * [`base`]: errors, limits, integer math, percentiles, load signals, pod bitmasks;
//! * [`keys`]: block keys of trace ids and token ids (the model's hash, vLLM's);
//! * [`cache`]: the LRU pods, the run-length LRU, the exact and approximate indexes;
//! * [`route`]: the routers; [`cost`]: step costs; [`engine`]: the engines (above the costs,
//!   beside the routers);
//! * [`sim`]: the fleet that drives engines behind a router, its configuration and defaults;
//! * [`workload`]: the seeded workload generator; [`loadgen`]: the client that sends it
//!   (inference-perf's stages, caps, closed loop).
//!
//! This file only names the layers and re-exports their public types.

pub mod base;
pub mod cache;
pub mod conversation;
pub mod cost;
pub mod engine;
pub mod keys;
pub mod loadgen;
pub mod route;
pub mod sim;
pub mod slo;
pub mod workload;

pub use base::error::{Buffer, Error, Field, Invariant, Limit, Quantity, RequestField, Rule};
pub use base::load::PodLoad;
pub use base::mask::PodSet;
pub use base::{fixmath, limits, stats};
pub use cache::CacheEvents;
pub use cache::approx::ApproxIndex;
pub use cache::fused::{FusedLru, FusedSlot, Side as FusedSide};
pub use cache::heads::HeadIndex;
pub use cache::index::{BlockIndex, IndexEntry, PendingEntry, PendingEvicts, PendingRecord};
pub use cache::lru::{Homed, LruPod, Slot};
pub use cache::runs::{Run, RunLru};
pub use cost::{BatchShape, LinearCost, Physics, PhysicsProfile, Profile, StepCost, StepProfile};
pub use engine::batched::{BatchedConfig, BatchedEngine, BatchedStats, KvBlock, PodBuffers, ReqSlot};
pub use engine::fifo::{CacheMode, FifoConfig, FifoEngine, Outcome, PodStats, TouchOrder};
pub use engine::server::FifoServer;
pub use engine::{Completion, Engine, EngineEvents, Request, Routed};
pub use keys::{hash, vllm};
pub use route::kind::{AnyRouter, RouterKind};
pub use route::shipped::{Evaluation, ShippedRouter};
pub use route::spec::{
    FilterKind, MAX_FILTERS, MAX_SCORERS, MAX_WEIGHT, PickerKind, Policy, PrefixSource, RouterBuffers, RouterKey,
    RouterLayout, RouterParams, RouterSpec, ScorerKind, WeightedScorer,
};
pub use route::{Holders, KeyHolders, Route, RouteView, Router};
pub use sim::batched::{BatchedBuffers, BatchedFleet, BatchedLayout, KEY_LOG_PER_POD, head_index_possible};
pub use sim::config::{EngineConfig, FleetConfig};
pub use sim::defaults;
pub use sim::fifo::{FifoBuffers, FifoFleet, FifoLayout};
pub use sim::pools::{Pool, PoolRole};
pub use sim::scale::{ScaleAction, ScalePolicy, ScaleState};
pub use sim::view::{IndexKind, ViewConfig};
pub use sim::wva::{Sample as WvaSample, ScaleEvent, ScaleEventKind, WvaPod, WvaState, WvaThresholds};
pub use sim::{Exact, Fleet, FleetEngine, FleetTotals};
