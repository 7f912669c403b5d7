//! Workloads generated from a scenario: held in memory for sweeps ([`Generated`]), streamed for
//! one run ([`Streamed`]), or written as a Mooncake trace.

use brokerlab_core::fleet::limits::BLOCK_TOKENS;
use brokerlab_core::fleet::workload::{Workload, WorkloadSpec};
use brokerlab_core::fleet::{Request, keys};
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::fleet::run::RequestSource;
use crate::mem::{Need, try_grow, try_vec};

/// A workload generated once and kept in memory (keys of every request), so sweeps over fleet
/// parameters reuse it.
pub struct Generated {
    /// The spec.
    pub spec: WorkloadSpec,
    /// (arrival ns, L, O, tenant, key range) per request.
    pub requests: Vec<(u64, u64, u64, u32, std::ops::Range<usize>)>,
    /// All keys.
    pub keys: Vec<u64>,
    /// The scenario file it came from, for messages ("workload" when unknown).
    pub origin: String,
}

/// Bytes per request of [`Generated::requests`].
const GEN_REQUEST_BYTES: u64 = std::mem::size_of::<(u64, u64, u64, u32, std::ops::Range<usize>)>() as u64;

impl Generated {
    /// Runs the core generator and hashes every prompt.
    pub fn new(spec: WorkloadSpec) -> CliResult<Self> {
        Self::with_origin(spec, "workload")
    }

    /// Same, naming the scenario file in messages. Checks the memory budget first (at most
    /// `requests x (48 + 8 x longest prompt / 16)` bytes) and never aborts on a failed allocation.
    pub fn with_origin(spec: WorkloadSpec, origin: &str) -> CliResult<Self> {
        crate::mem::check(&format!("{origin}: the generated workload"), &Self::needs(&spec))?;
        let mut stream = Streamed::new(spec, origin)?;
        let mut reqs = Vec::new();
        try_grow(&mut reqs, spec.requests as usize, "the generated requests")?;
        let mut keys: Vec<u64> = Vec::new();
        let mut err = None;
        stream.each(&mut |r, k| {
            if let Err(e) = try_grow(&mut keys, k.len(), "the generated block keys") {
                err = Some(e);
                return false;
            }
            let start = keys.len();
            keys.extend_from_slice(k);
            reqs.push((r.arrival_ns, r.input_tokens, r.output_tokens, r.tenant, start..start + k.len()));
            true
        })?;
        match err {
            Some(e) => Err(e),
            None => Ok(Generated { spec, requests: reqs, keys, origin: origin.to_string() }),
        }
    }

    /// What [`Self::with_origin`] allocates, at most.
    pub fn needs(spec: &WorkloadSpec) -> Vec<Need> {
        let keys = spec.requests.saturating_mul(spec.max_prompt_tokens() / BLOCK_TOKENS as u64).saturating_mul(8);
        vec![
            Need {
                what: "generated requests".into(),
                bytes: spec.requests.saturating_mul(GEN_REQUEST_BYTES),
                lowered_by: "workload.requests".into(),
            },
            Need {
                what: "generated block keys (at most)".into(),
                bytes: keys,
                lowered_by: "workload.requests, or shorter prompts (prefix_tokens, suffix_tokens, rag)".into(),
            },
        ]
    }

    /// Bytes it holds.
    pub fn bytes(&self) -> u64 {
        self.requests.capacity() as u64 * GEN_REQUEST_BYTES + self.keys.capacity() as u64 * 8
    }

    /// Distinct blocks over the whole workload: the capacity at which nothing is ever evicted.
    pub fn distinct_blocks(&self) -> usize {
        let mut set = std::collections::HashSet::with_capacity(self.keys.len());
        self.keys.iter().filter(|k| set.insert(**k)).count()
    }
}

/// Maps an error of the core on request `i` of a generated workload to a message naming the
/// scenario file and the keys that cause it (exit 2: the scenario asks for it).
fn request_error(origin: &str, i: usize, e: brokerlab_core::fleet::Error) -> CliError {
    CliError::bad_input(request_error_message(origin, i, e))
}

/// [`request_error`]'s message.
fn request_error_message(origin: &str, i: usize, e: brokerlab_core::fleet::Error) -> String {
    use brokerlab_core::fleet::{Error as E, Quantity};
    let hint = match e {
        E::Overflow { what: Quantity::ServiceTime | Quantity::FinishTime } => {
            ": lower `fleet.t_prefill_ns`, `fleet.t_decode_ns` or `fleet.t_cpu_ns` (ns per token)"
        }
        E::Overflow { .. } => ": lower `fleet.autoscale.interval_s` or `fleet.autoscale.startup_s`",
        _ => "",
    };
    let e = crate::fleet::run::fields::request_message(&e);
    format!("{origin}: request {i}: {e}{hint}")
}

impl RequestSource for &Generated {
    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> CliResult<()> {
        for (i, (arrival_ns, input, output, _, range)) in self.requests.iter().enumerate() {
            let req = Request {
                arrival_ns: *arrival_ns,
                input_tokens: *input,
                output_tokens: *output,
                keys: &self.keys[range.clone()],
            };
            sink(&req).map_err(|e| request_error(&self.origin, i, e))?;
        }
        Ok(())
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.requests.len() as u64)
    }
}

/// A workload generated on the fly, request by request (the generator is seeded and
/// sequential): memory is the generator's buffers, whatever `requests` is. Feeding it again
/// generates the same requests.
pub struct Streamed {
    spec: WorkloadSpec,
    origin: String,
    cdf: Vec<u64>,
    tokens: Vec<u32>,
    kbuf: Vec<u64>,
    /// Keep each tenant's prefix keys ([`PrefixKeys`]); false: every prompt written and hashed
    /// whole (the reference path, for the tests).
    cache_prefixes: bool,
    /// Generate and hash on a thread of its own, the requests fed on the calling one
    /// ([`crate::fleet::run::pipeline`]; the same requests in the same order).
    pipelined: bool,
}

/// At most this many bytes of kept prefix keys (4,096 tenants of 128 blocks: 4 MiB); a larger
/// workload hashes every prompt whole.
const PREFIX_KEYS_MAX_BYTES: u64 = 64 << 20;

/// Each tenant's shared-prefix block keys, kept from its first request: the prefix is the
/// same tokens at the same place (the prompt's start) in every request of a tenant, and a block's
/// key chains on the keys before it, so the first `blocks` keys of every request of the tenant
/// are the same. A later request's prefix is neither written ([`Workload::next_request_prefix_unwritten`])
/// nor hashed: its keys are copied and the rest is hashed from the last of them.
struct PrefixKeys {
    blocks: usize,
    keys: Vec<u64>,
    known: Vec<bool>,
}

impl PrefixKeys {
    /// For `wl`'s workload, when its prefix starts the prompt, fills a block at least and its
    /// tenants' keys fit [`PREFIX_KEYS_MAX_BYTES`]; None otherwise.
    fn new(wl: &Workload<'_>) -> CliResult<Option<Self>> {
        let ((start, len), tenants) = (wl.prefix_span(), wl.spec().tenants as u64);
        let blocks = len / BLOCK_TOKENS;
        if start != 0 || blocks == 0 || tenants.saturating_mul(blocks as u64).saturating_mul(8) > PREFIX_KEYS_MAX_BYTES
        {
            return Ok(None);
        }
        Ok(Some(PrefixKeys {
            blocks,
            keys: try_vec(tenants as usize * blocks, 0u64, "the tenants' prefix keys")?,
            known: try_vec(tenants as usize, false, "the tenants' prefix keys")?,
        }))
    }
}

impl Streamed {
    /// The generator's buffers for `spec` (Zipf CDF, one prompt's tokens and keys).
    pub fn new(spec: WorkloadSpec, origin: &str) -> CliResult<Self> {
        spec.validate().map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
        let tokens_len = spec.max_prompt_tokens() as usize;
        Ok(Streamed {
            spec,
            origin: origin.to_string(),
            cdf: try_vec(Workload::cdf_len(&spec), 0u64, "the workload's Zipf CDF")?,
            tokens: try_vec(tokens_len, 0u32, "the prompt tokens buffer")?,
            kbuf: try_vec(tokens_len / BLOCK_TOKENS, 0u64, "the block keys buffer")?,
            cache_prefixes: true,
            pipelined: false,
        })
    }

    /// Generates and hashes on a thread of its own when `on` ([`crate::fleet::run::pipeline`]).
    pub fn set_pipelined(&mut self, on: bool) {
        self.pipelined = on;
    }

    /// How many requests the workload generates: `requests` unless arrival stages end first
    /// (a ramp stops at its last stage's end), counted by generating arrivals without keys.
    pub fn count_requests(&mut self) -> CliResult<u64> {
        if self.spec.stages_len == 0 {
            return Ok(self.spec.requests);
        }
        let origin = &self.origin;
        let mut wl =
            Workload::new(self.spec, &mut self.cdf).map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
        let mut n = 0u64;
        while wl
            .next_request(&mut self.tokens)
            .map_err(|e| CliError::failure(format!("{origin}: workload: {e}")))?
            .is_some()
        {
            n += 1;
        }
        Ok(n)
    }

    /// Generates every request from the start and calls `f` with it and its block keys; `f`
    /// returns false to stop.
    pub fn each(
        &mut self,
        f: &mut dyn FnMut(&brokerlab_core::fleet::workload::GenRequest, &[u64]) -> bool,
    ) -> CliResult<()> {
        let origin = &self.origin;
        let mut wl =
            Workload::new(self.spec, &mut self.cdf).map_err(|e| CliError::bad_input(format!("{origin}: {e}")))?;
        let Some(mut pk) = (if self.cache_prefixes { PrefixKeys::new(&wl)? } else { None }) else {
            while let Some(r) =
                wl.next_request(&mut self.tokens).map_err(|e| CliError::failure(format!("{origin}: workload: {e}")))?
            {
                let n = keys::token_keys(&self.tokens[..r.input_tokens as usize], &mut self.kbuf)
                    .map_err(|e| CliError::failure(format!("{origin}: workload: {e}")))?;
                if !f(&r, &self.kbuf[..n]) {
                    break;
                }
            }
            return Ok(());
        };
        let (b, len) = (pk.blocks, wl.prefix_span().1);
        while let Some(r) = wl
            .next_request_prefix_unwritten(&mut self.tokens)
            .map_err(|e| CliError::failure(format!("{origin}: workload: {e}")))?
        {
            let tenant = r.tenant as usize;
            let kept = &mut pk.keys[tenant * b..(tenant + 1) * b];
            let tokens = &mut self.tokens[..r.input_tokens as usize];
            let n = if pk.known[tenant] {
                if len > b * BLOCK_TOKENS {
                    // The prefix ends inside a block: that block's tokens are needed.
                    wl.fill_prefix(r.tenant, &mut tokens[..len]);
                }
                self.kbuf[..b].copy_from_slice(kept);
                b + keys::token_keys_from(kept[b - 1], &tokens[b * BLOCK_TOKENS..], &mut self.kbuf[b..])
                    .map_err(|e| CliError::failure(format!("{origin}: workload: {e}")))?
            } else {
                wl.fill_prefix(r.tenant, &mut tokens[..len]);
                let n = keys::token_keys(tokens, &mut self.kbuf)
                    .map_err(|e| CliError::failure(format!("{origin}: workload: {e}")))?;
                kept.copy_from_slice(&self.kbuf[..b]);
                pk.known[tenant] = true;
                n
            };
            if !f(&r, &self.kbuf[..n]) {
                break;
            }
        }
        Ok(())
    }
}

/// A generated request with its keys, as the fleet takes it.
fn fleet_request<'k>(r: &brokerlab_core::fleet::workload::GenRequest, keys: &'k [u64]) -> Request<'k> {
    Request { arrival_ns: r.arrival_ns, input_tokens: r.input_tokens, output_tokens: r.output_tokens, keys }
}

impl RequestSource for Streamed {
    fn feed(
        &mut self,
        sink: &mut dyn FnMut(&Request<'_>) -> Result<(), brokerlab_core::fleet::Error>,
    ) -> CliResult<()> {
        let origin = self.origin.clone();
        if self.pipelined {
            let this = &mut *self;
            return crate::fleet::run::pipeline::feed_pipelined(
                move |s| {
                    // fails only when the consumer has stopped (it reports its own error)
                    this.each(&mut |r, keys| s(&fleet_request(r, keys), r.index as usize).is_ok())
                },
                sink,
                |i, e| request_error_message(&origin, i, *e),
            );
        }
        let mut err = None;
        self.each(&mut |r, keys| match sink(&fleet_request(r, keys)) {
            Ok(()) => true,
            Err(e) => {
                err = Some(request_error(&origin, r.index as usize, e));
                false
            }
        })?;
        err.map_or(Ok(()), Err)
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.spec.requests)
    }
}

/// One line of a Mooncake trace, in its field order.
#[derive(Serialize)]
struct TraceLine<'a> {
    timestamp: u64,
    input_length: u64,
    output_length: u64,
    hash_ids: &'a [u64],
}

/// serde_json's compact layout with a space after every `:` and `,` (`{"timestamp": 0, ...}`):
/// the layout of the Mooncake traces and of every trace this command has written.
struct Spaced;

impl serde_json::ser::Formatter for Spaced {
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }
}

/// Writes the workload as a Mooncake JSONL trace with trace block size 16: `hash_ids[j]` is a
/// dense id of block j's chained key (ids are prefix-consistent by construction), plus a fresh id
/// for a trailing partial block. Replaying it with `--trace-block-size 16` gives exactly the
/// direct run's results.
pub fn write_trace(g: &Generated, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    write_trace_from(&mut &*g, out)
}

/// [`write_trace`] from any request source (e.g. a [`Streamed`] workload: memory is one id per
/// distinct block, not the whole workload).
pub fn write_trace_from(src: &mut dyn RequestSource, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut ids: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let mut next_id = 0u64;
    let mut line: Vec<u8> = Vec::new();
    let mut hash_ids: Vec<u64> = Vec::new();
    let mut io_err = None;
    let fed = src.feed(&mut |req| {
        hash_ids.clear();
        for k in req.keys {
            let id = *ids.entry(*k).or_insert_with(|| {
                next_id += 1;
                next_id - 1
            });
            hash_ids.push(id);
        }
        if !req.input_tokens.is_multiple_of(BLOCK_TOKENS as u64) {
            hash_ids.push(next_id);
            next_id += 1;
        }
        let rec = TraceLine {
            timestamp: req.arrival_ns / 1_000_000,
            input_length: req.input_tokens,
            output_length: req.output_tokens,
            hash_ids: &hash_ids,
        };
        line.clear();
        let written = rec.serialize(&mut serde_json::Serializer::with_formatter(&mut line, Spaced));
        line.push(b'\n');
        written.map_err(std::io::Error::from).and_then(|()| out.write_all(&line)).map_err(|e| {
            io_err = Some(e);
            brokerlab_core::fleet::Error::CapacityExceeded {
                limit: brokerlab_core::fleet::Limit::CallerMemory,
                capacity: 0,
            }
        })
    });
    if let Some(e) = io_err {
        return Err(e);
    }
    fed.map_err(|e| std::io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ramp ends with its last stage, before the file's `requests` cap: the count (what
    /// `fleet run`'s progress bar counts to) is what the generator yields, not the cap.
    #[test]
    fn a_ramp_counts_the_requests_its_stages_generate() {
        // the llm-d ramp's stages as open-loop arrivals (the file runs them through `[load]`)
        let text = include_str!("../../../../scenarios/llm-d-ramp.toml")
            .replace("[load]\ntype = \"poisson\"\nrequest_timeout_s = 300\n", "")
            .replace("[[load.stages]]", "[[workload.stages]]")
            .replace("requests = 750\n", "requests = 40000\n");
        let mut sc = crate::fleet::scenario::Scenario::parse(&text, "llm-d-ramp.toml", "llm-d-ramp").unwrap();
        assert!(sc.load.is_none() && sc.workload.stages_len > 0, "the ramp's stages are open loop here");
        let n = sc.workload.stages_len as usize;
        for st in &mut sc.workload.stages[..n] {
            st.duration_ms /= 80;
        }
        let generated = Generated::new(sc.workload).unwrap().requests.len() as u64;
        let counted = Streamed::new(sc.workload, "t").unwrap().count_requests().unwrap();
        assert_eq!(counted, generated);
        assert!(counted > 0 && counted < sc.workload.requests, "{counted} of {}", sc.workload.requests);
        // Without stages the count is the file's.
        let rag = crate::fleet::scenario::builtin::builtin("rag").unwrap();
        assert_eq!(Streamed::new(rag.workload, "t").unwrap().count_requests().unwrap(), rag.workload.requests);
    }

    /// Every request and its keys, and the trace `fleet gen-trace` writes, with the tenants'
    /// prefix keys kept (the fast path) or every prompt written and hashed whole (the reference
    /// path, the generator as it was): the same, for the built-in scenarios, the scale bench's
    /// workload and variants of it (seeds, prefixes that end inside a block or fill none, a
    /// header first, RAG documents, Zipf and cycled tenants, per-user suffixes).
    #[test]
    fn kept_prefix_keys_give_the_same_requests_keys_and_trace() {
        use brokerlab_core::fleet::workload::{Layout, Popularity, SuffixScope};
        let scale = crate::fleet::bench::scale::scale_setup(3000, 1024).unwrap().0.workload;
        let mut specs = vec![scale];
        for (i, prefix) in [2048u32, 37, 15, 16, 0, 100].into_iter().enumerate() {
            let mut s = scale;
            s.seed = 1000 + i as u64;
            s.tenants = 1 + 50 * i as u32;
            s.prefix_tokens = prefix;
            s.requests = 700;
            specs.push(s);
        }
        let mut t = scale;
        t.requests = 500;
        t.layout = Layout::TimestampFirst;
        t.header_tokens = 16;
        specs.push(t);
        let mut z = scale;
        z.requests = 500;
        z.tenants = 40;
        z.popularity = Popularity::Zipf { s_milli: 1100 };
        z.suffix_scope = SuffixScope::User;
        specs.push(z);
        let mut c = z;
        c.popularity = Popularity::Cycle;
        specs.push(c);
        for name in ["multi-tenant", "alpha", "llm-d", "rag", "autoscale"] {
            let mut w = crate::fleet::scenario::builtin::builtin(name).unwrap().workload;
            w.requests = w.requests.min(2000);
            specs.push(w);
        }
        let mut kept_some = 0;
        for spec in specs {
            let run = |cache: bool| {
                let mut st = Streamed::new(spec, "t").unwrap();
                st.cache_prefixes = cache;
                let mut all = Vec::new();
                st.each(&mut |r, k| {
                    all.push((*r, k.to_vec()));
                    true
                })
                .unwrap();
                let mut trace = Vec::new();
                write_trace_from(&mut st, &mut trace).unwrap();
                (all, trace)
            };
            let (fast, reference) = (run(true), run(false));
            assert!(!reference.0.is_empty());
            assert!(
                fast.0 == reference.0,
                "requests and keys differ: seed {} prefix {}",
                spec.seed,
                spec.prefix_tokens
            );
            assert!(fast.1 == reference.1, "traces differ: seed {} prefix {}", spec.seed, spec.prefix_tokens);
            let mut cdf = vec![0; Workload::cdf_len(&spec)];
            let wl = Workload::new(spec, &mut cdf).unwrap();
            kept_some += PrefixKeys::new(&wl).unwrap().is_some() as u32;
        }
        assert!(kept_some >= 8, "the fast path ran: {kept_some} workloads");
    }
}
