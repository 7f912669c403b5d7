//! A request source read on its own thread: a producer thread reads (decompresses, parses) and
//! hashes the requests into batches of owned keys and sends them, in order, over a bounded
//! channel; the calling thread replays them. On two cores the run takes about the longer of the
//! two stages instead of their sum. The core sees exactly the requests of the sequential feed in
//! the same order, so every output is the same (tested: `host/tests/fleet_pipeline.rs`).
//!
//! Errors keep their order: the producer sends the requests before its error, then the error;
//! the consumer replays those requests and returns it (a request the fleet refuses first is
//! reported first, as sequentially). When the consumer stops (the fleet refused a request, or a
//! buffer filled up and the run starts over), it drops its end of the channel and the producer
//! stops at its next send. Memory is bounded: at most [`IN_FLIGHT`] batches wait in the channel,
//! one is filled and one replayed, and the consumer hands each replayed batch back for reuse, so
//! in the steady state nothing is allocated per request.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, TryRecvError, channel, sync_channel};
use std::time::Instant;

use brokerlab_core::fleet::{Error as CoreError, Request};

use crate::error::CliResult;

/// A batch is sent when it holds this many requests ...
pub const BATCH_REQUESTS: usize = 256;
/// ... or this many keys (256 KiB), whichever comes first (a request is never split).
pub const BATCH_KEYS: usize = 32 * 1024;
/// Batches waiting in the channel at most.
pub const IN_FLIGHT: usize = 2;

/// Nanoseconds the replaying thread waited for the producer's batches, summed over every
/// pipelined feed of the process: a measurement for `fleet bench` (the replay's own time is the
/// wall less this); no result depends on it.
pub static WAITED_NS: AtomicU64 = AtomicU64::new(0);

/// When a batch is sent, and how many may wait.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests per batch at most.
    pub requests: usize,
    /// A batch is sent once it holds this many keys.
    pub keys: usize,
    /// Batches waiting in the channel at most.
    pub in_flight: usize,
}

/// [`BATCH_REQUESTS`], [`BATCH_KEYS`], [`IN_FLIGHT`].
pub const LIMITS: Limits = Limits { requests: BATCH_REQUESTS, keys: BATCH_KEYS, in_flight: IN_FLIGHT };

/// One request of a batch: (arrival ns, input tokens, output tokens, its tag for messages (a trace
/// line, a request index), its range of the batch's keys).
type Held = (u64, u64, u64, usize, Range<usize>);

/// Requests with their keys, owned.
#[derive(Default)]
struct Batch {
    reqs: Vec<Held>,
    keys: Vec<u64>,
}

impl Batch {
    fn is_full(&self, l: Limits) -> bool {
        self.reqs.len() >= l.requests || self.keys.len() >= l.keys
    }

    fn clear(&mut self) {
        self.reqs.clear();
        self.keys.clear();
    }
}

/// What the producer sends, in order: batches, then how its feed ended.
enum Msg {
    Batch(Batch),
    End(CliResult<()>),
}

/// Whether a feed should run on two threads: `threads` as the `--threads` flag (0: every core,
/// 1: one thread), and the machine has a second core.
pub fn wanted(threads: usize) -> bool {
    match threads {
        0 => std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2),
        1 => false,
        _ => true,
    }
}

/// The producer's side: batches filled and sent in order, buffers taken back from the consumer.
struct Producer {
    limits: Limits,
    tx: SyncSender<Msg>,
    back: Receiver<Batch>,
    batch: Batch,
}

impl Producer {
    /// Sends the batch being filled (if any) and takes a recycled one; false when the consumer
    /// has stopped.
    fn flush(&mut self) -> bool {
        if self.batch.reqs.is_empty() {
            return true;
        }
        let next = match self.back.try_recv() {
            Ok(mut b) => {
                b.clear();
                b
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                Batch { reqs: Vec::with_capacity(self.limits.requests), keys: Vec::with_capacity(self.limits.keys) }
            }
        };
        let full = std::mem::replace(&mut self.batch, next);
        self.tx.send(Msg::Batch(full)).is_ok()
    }

    /// Adds `req` (tagged `tag`) to the batch, sending it when full.
    fn push(&mut self, req: &Request<'_>, tag: usize) -> Result<(), CoreError> {
        let b = &mut self.batch;
        let start = b.keys.len();
        b.keys.extend_from_slice(req.keys);
        b.reqs.push((req.arrival_ns, req.input_tokens, req.output_tokens, tag, start..b.keys.len()));
        if b.is_full(self.limits) && !self.flush() {
            // the consumer stopped: nothing after this is replayed; the error is not reported
            return Err(CoreError::Poisoned);
        }
        Ok(())
    }
}

/// Runs `produce` on a new thread, its requests (each with a tag: a trace line, a request index)
/// fed to `sink` on this one in the same order. A request `sink` refuses stops the run with a
/// bad-input error `message(tag, error)` (and the producer); an error of `produce` is returned
/// after every request it produced before it has been fed. `produce` must stop when its sink
/// fails (every source does: the sink's error is a refused request to it).
pub fn feed_pipelined<P>(
    produce: P,
    sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>,
    message: impl Fn(usize, &CoreError) -> String,
) -> CliResult<()>
where
    P: FnOnce(&mut dyn FnMut(&Request<'_>, usize) -> Result<(), CoreError>) -> CliResult<()> + Send,
{
    feed_pipelined_with(LIMITS, produce, sink, message)
}

/// [`feed_pipelined`] with batches and a channel of `limits` (the tests' small batches).
pub fn feed_pipelined_with<P>(
    limits: Limits,
    produce: P,
    sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>,
    message: impl Fn(usize, &CoreError) -> String,
) -> CliResult<()>
where
    P: FnOnce(&mut dyn FnMut(&Request<'_>, usize) -> Result<(), CoreError>) -> CliResult<()> + Send,
{
    let (tx, rx) = sync_channel::<Msg>(limits.in_flight);
    let (back_tx, back) = channel::<Batch>();
    std::thread::scope(|s| {
        let producer = std::thread::Builder::new()
            .name("trace-reader".into())
            .spawn_scoped(s, move || {
                let mut p = Producer { limits, tx, back, batch: Batch::default() };
                let r = produce(&mut |req, tag| p.push(req, tag));
                if p.flush() {
                    // a send fails only when the consumer has stopped: then no one reads it
                    let _ = p.tx.send(Msg::End(r));
                }
            })
            .map_err(|e| crate::error::CliError::failure(format!("cannot start the trace reader thread: {e}")))?;
        let consumed = consume(&rx, &back_tx, sink, &message);
        // the producer stops at its next send
        drop(rx);
        if let Err(panic) = producer.join() {
            std::panic::resume_unwind(panic);
        }
        // the channel closes without the producer's end only when it panicked (resumed above)
        consumed.unwrap_or(Ok(()))
    })
}

/// Feeds every batch received to `sink`, handing each back for reuse, until the producer's end
/// (Some of its result) or a refused request (Some of its error); None if the channel closed
/// without an end.
fn consume(
    rx: &Receiver<Msg>,
    back: &Sender<Batch>,
    sink: &mut dyn FnMut(&Request<'_>) -> Result<(), CoreError>,
    message: &dyn Fn(usize, &CoreError) -> String,
) -> Option<CliResult<()>> {
    let parts = |(arrival_ns, input, output, _, range): &Held| (*arrival_ns, *input, *output, range.clone());
    loop {
        let t = Instant::now();
        let msg = rx.recv();
        WAITED_NS.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let Ok(msg) = msg else { return None };
        match msg {
            Msg::Batch(b) => {
                let fed = super::source::feed_held(&b.reqs, &b.keys, parts, sink, |i, e| message(b.reqs[i].3, e));
                if fed.is_err() {
                    return Some(fed);
                }
                // the producer may have finished: then the buffer is dropped here
                let _ = back.send(b);
            }
            Msg::End(r) => return Some(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::error::CliError;

    /// A request as the sink saw it.
    type Seen = (u64, u64, u64, Vec<u64>);

    /// A source of `reqs` (each a key count) that fails with a bad-input error at `err_at` (as a
    /// trace's bad line) and maps a refused request `located`, as [`super::super::source`]'s do.
    fn produce(
        reqs: &[usize],
        err_at: Option<usize>,
        sink: &mut dyn FnMut(&Request<'_>, usize) -> Result<(), CoreError>,
    ) -> CliResult<()> {
        let mut keys = Vec::new();
        for (i, &n) in reqs.iter().enumerate() {
            if err_at == Some(i) {
                return Err(CliError::bad_input(format!("t:{i}: field `timestamp`: bad")));
            }
            keys.clear();
            keys.extend((0..n as u64).map(|k| (i as u64) << 32 | k));
            let req = Request { arrival_ns: i as u64 * 7, input_tokens: 16 * n as u64, output_tokens: 1, keys: &keys };
            sink(&req, i + 1).map_err(|e| CliError::bad_input(located(i + 1, &e)))?;
        }
        Ok(())
    }

    fn located(tag: usize, e: &CoreError) -> String {
        format!("t:{tag}: {e}")
    }

    /// A sink that records every request and refuses the `fail_at`-th (0-based).
    fn recording(seen: &mut Vec<Seen>, fail_at: Option<usize>) -> impl FnMut(&Request<'_>) -> Result<(), CoreError> {
        move |r| {
            if fail_at == Some(seen.len()) {
                return Err(CoreError::Poisoned);
            }
            seen.push((r.arrival_ns, r.input_tokens, r.output_tokens, r.keys.to_vec()));
            Ok(())
        }
    }

    fn outcome(r: CliResult<()>) -> Option<(i32, String)> {
        r.err().map(|e| (e.code(), e.to_string()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The pipelined feed gives the sink exactly the sequential feed's requests, in order, and
        /// ends with the same error (a bad line, a refused request: whichever comes first), for
        /// any batch size and channel depth.
        #[test]
        fn pipelined_feed_is_the_sequential_feed(
            reqs in proptest::collection::vec(0usize..40, 0..300),
            err_at in proptest::option::of(0usize..320),
            fail_at in proptest::option::of(0usize..320),
            batch_requests in 1usize..20,
            batch_keys in 1usize..200,
            in_flight in 0usize..4,
        ) {
            let mut seq = Vec::new();
            let mut sink = recording(&mut seq, fail_at);
            let seq_end = outcome(produce(&reqs, err_at, &mut |req, _| sink(req)));
            drop(sink);
            let mut piped = Vec::new();
            let limits = Limits { requests: batch_requests, keys: batch_keys, in_flight };
            let mut sink = recording(&mut piped, fail_at);
            let piped_end = outcome(feed_pipelined_with(limits, |s| produce(&reqs, err_at, s), &mut sink, located));
            drop(sink);
            prop_assert_eq!(&piped, &seq);
            prop_assert_eq!(piped_end, seq_end);
        }
    }

    /// A panic on the producer's thread is the caller's panic (not a silently short feed).
    #[test]
    #[should_panic(expected = "reader failed")]
    fn a_producer_panic_is_resumed() {
        let _ = feed_pipelined(|_| panic!("reader failed"), &mut |_| Ok(()), |_, _| String::new());
    }
}
