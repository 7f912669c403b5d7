//! The per-pod FIFO single server: start, finish and queue length, in integer nanoseconds.

use crate::fleet::base::error::{Buffer, Error, Limit, Quantity};

/// A pod's server: the finish times of requests not yet finished, oldest first, in a ring.
#[derive(Debug)]
pub struct FifoServer<'a> {
    finishes: &'a mut [u64],
    head: usize,
    len: usize,
    last_finish_ns: u64,
}

impl<'a> FifoServer<'a> {
    /// An idle server that can track up to `finishes.len()` queued requests.
    pub fn new(finishes: &'a mut [u64]) -> Result<Self, Error> {
        if finishes.is_empty() {
            return Err(Error::BufferSize { buffer: Buffer::Queue, expected: 1, got: 0 });
        }
        Ok(FifoServer { finishes, head: 0, len: 0, last_finish_ns: 0 })
    }

    /// Forgets requests finished by `now_ns`; returns the queue length at `now_ns` (requests with
    /// finish > now). `now_ns` must not decrease between calls.
    pub fn queue_len_at(&mut self, now_ns: u64) -> u32 {
        // FIFO service makes finish times non-decreasing, so finished ones are at the front.
        while self.len > 0 && self.finishes[self.head] <= now_ns {
            self.head = (self.head + 1) % self.finishes.len();
            self.len -= 1;
        }
        self.debug_check();
        self.len as u32
    }

    /// Queues a request arriving at `arrival_ns` needing `service_ns`; returns (start, finish).
    pub fn admit(&mut self, arrival_ns: u64, service_ns: u64) -> Result<(u64, u64), Error> {
        let start = arrival_ns.max(self.last_finish_ns);
        let finish = start.checked_add(service_ns).ok_or(Error::Overflow { what: Quantity::FinishTime })?;
        if finish > arrival_ns {
            if self.len == self.finishes.len() {
                return Err(Error::CapacityExceeded { limit: Limit::QueuePerPod, capacity: self.finishes.len() });
            }
            let tail = (self.head + self.len) % self.finishes.len();
            self.finishes[tail] = finish;
            self.len += 1;
        }
        debug_assert!(finish >= self.last_finish_ns, "FIFO: finishes never go back in time");
        self.last_finish_ns = finish;
        self.debug_check();
        Ok((start, finish))
    }

    /// Debug builds: the ring's invariants. At most `finishes.len()` queued, the head inside the
    /// ring, and the queued finish times in order (FIFO service), the last one the latest.
    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            let n = self.finishes.len();
            debug_assert!(self.len <= n && self.head < n, "ring bounds");
            let mut prev = 0;
            for i in 0..self.len {
                let f = self.finishes[(self.head + i) % n];
                debug_assert!(f >= prev, "queued finish times are in FIFO order");
                prev = f;
            }
            debug_assert!(self.len == 0 || prev == self.last_finish_ns, "the newest queued finish is the last");
        }
    }

    /// Forgets everything: an idle server, as new.
    pub fn reset(&mut self) {
        self.head = 0;
        self.len = 0;
        self.last_finish_ns = 0;
    }

    /// Finish time of the last admitted request (0 when idle since the start).
    pub fn last_finish_ns(&self) -> u64 {
        self.last_finish_ns
    }
}
