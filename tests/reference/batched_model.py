#!/usr/bin/env python3
"""Deliberately naive, independent reference of brokerlab's batched engine (docs/MODEL.md, "The
batched engine"), written from the specification alone, without the Rust code.

Every step is simulated one at a time (no fast-forward). Block identities are Python's own
(interned chains of (hash_id, sub) pairs, so no hash), the free queue is an OrderedDict of block
ids (head = least recently released), the cache map a dict key -> block id.

`host/tests/reference_batched.rs` compares `brokerlab fleet replay --engine batched --outcomes F
--json` with it, request by request.
Usage:
  batched_model.py --trace F [--trace-block-size 512] --pods N --capacity C --router R [--alpha A]
      [--max-num-seqs 1024] [--max-num-batched-tokens 8192] [--profile P]
      [--t-overhead-ns X] [--t-prefill-token-ns X] [--t-decode-seq-ns X] [--t-kv-token-ns X]
Prints one JSON object {"requests": [...], "totals": {...}}, or an error line
"ERROR line=<n>: msg" (or "ERROR: msg") with exit code 2. A request is {index, pod, arrival_ns,
queue_len (of its pod when routed), hit_tokens (first admission), prefill_tokens (recompute
included), ttft_ns, e2e_ns, preemptions}, the fields of `--outcomes`; totals carry the run's
counters, makespan_ns, per-pod KV utilization (mean, peak) and mean_waiting.
Reading choices where docs/MODEL.md was ambiguous: MODEL.md, "Ambiguities found by the reference".
"""
import argparse
import json
import sys
from collections import OrderedDict, deque

B = 16
MAX_OUTPUT_TOKENS = 1 << 24

PROFILES = {
    # t_overhead_ns, t_prefill_token_ns, t_decode_seq_ns, t_kv_token_ns
    "qwen3-32b-h100x2": (12_601_270, 61_244, 66_844, 0),
    "llama-3.1-8b-h100": (5_752_710, 17_251, 5_999, 0),
    "seed": (1, 50_000, 0, 0),
}


class InputError(Exception):
    def __init__(self, line, msg):
        super().__init__(msg)
        self.line = line


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def ceil_div(a, b):
    return -(-a // b)


def read_trace(path, S):
    """Returns a list of (lineno, arrival_ns, L, O, keys). Keys are interned ints: key_j identifies
    the whole chain (pair_0, ..., pair_j), pair = (hash_ids[16j // S], (16j % S) // 16)."""
    intern = {}
    reqs = []
    last_ts = None
    with open(path) as f:
        for lineno, raw in enumerate(f, start=1):
            if raw.strip() == "":
                continue
            try:
                obj = json.loads(raw)
            except Exception as e:
                raise InputError(lineno, f"bad json: {e}")
            if not isinstance(obj, dict):
                raise InputError(lineno, "not an object")
            for fld in ("timestamp", "input_length", "output_length", "hash_ids"):
                if fld not in obj:
                    raise InputError(lineno, f"missing {fld}")
            ts, L, O, ids = obj["timestamp"], obj["input_length"], obj["output_length"], obj["hash_ids"]
            if not is_int(ts) or ts < 0:
                raise InputError(lineno, "timestamp not a non-negative integer")
            if not is_int(L) or L < 0 or not is_int(O) or O < 0:
                raise InputError(lineno, "length not a non-negative integer")
            if not isinstance(ids, list) or not all(is_int(h) and h >= 0 for h in ids):
                raise InputError(lineno, "bad hash_ids")
            if last_ts is not None and ts < last_ts:
                raise InputError(lineno, "decreasing timestamp")
            last_ts = ts
            m = L // B
            if m > 0 and len(ids) <= (B * (m - 1)) // S:
                raise InputError(lineno, "too few hash_ids")
            keys = []
            parent = 0
            for j in range(m):
                node = (parent, ids[(B * j) // S], ((B * j) % S) // B)
                k = intern.get(node)
                if k is None:
                    k = len(intern) + 1
                    intern[node] = k
                keys.append(k)
                parent = k
            reqs.append((lineno, ts * 1_000_000, L, O, keys))
    return reqs


class Req:
    def __init__(self, idx, arrival, L, O, keys):
        self.idx = idx
        self.arrival = arrival
        self.L = L
        self.O = max(O, 1)  # O'
        self.keys = keys
        self.m = len(keys)
        self.c = 0  # tokens computed
        self.g = 0  # tokens generated
        self.hit_blocks = []  # block ids of the h hit blocks it holds (block order)
        self.own = []  # its own blocks, block order (block index h + i)
        self.considered = 0  # prompt blocks considered for caching since admission
        self.hit_tokens = None  # at first admission
        self.first = None
        self.finish = None
        self.preemptions = 0
        self.pod = None
        self.queue_len = None  # of its pod when it was routed
        self.prefill_tokens = 0  # computed for it, recompute included
        self.memo = None  # (pod version, h, hit blocks, hit blocks with count 0)

    def n_tok(self):
        return self.L + self.g


class Pod:
    def __init__(self, C, cfg):
        self.C = C
        self.cfg = cfg
        self.refcnt = [0] * C
        self.blkkey = [None] * C
        self.free = OrderedDict((b, None) for b in range(C))  # head = first
        self.cache = {}  # key -> block
        self.W = deque()
        self.R = []
        self.t_next = 0  # start of the next step = end of the last one (or an arrival)
        self.dispatched = []  # for queue_len
        self.steps = 0
        self.preemptions = 0
        self.prefill_tokens = 0
        self.peak_pinned = 0
        self.pinned_time = 0  # sum of pinned * t_step
        self.w_area = 0  # integral of |W| dt
        self.w_since = 0  # time of the last change of W
        self.version = 0  # bumped by every change of the cache map or of a reference count

    def w_changes_at(self, t):
        """Called just before W may change at t (an arrival or a step start)."""
        assert t >= self.w_since
        self.w_area += len(self.W) * (t - self.w_since)
        self.w_since = t

    def has_work(self):
        return bool(self.W) or bool(self.R)

    def queue_len(self, t):
        self.dispatched = [r for r in self.dispatched if r.finish is None or r.finish > t]
        return len(self.dispatched)

    def lookup(self, r):
        """Prefix hit of a request with c = 0: changes nothing. Returns the hit blocks (h of
        them) and how many of them have reference count 0 (in the free queue)."""
        h_max = min(r.m, (r.n_tok() - 1) // B)
        cache, refcnt, keys = self.cache, self.refcnt, r.keys
        hits = []
        zero = 0
        for j in range(h_max):
            blk = cache.get(keys[j])
            if blk is None:
                break
            hits.append(blk)
            if refcnt[blk] == 0:
                zero += 1
        return hits, zero

    def allocate(self, r, new):
        if new > 0:
            self.version += 1
        for _ in range(new):
            blk, _ = self.free.popitem(last=False)
            k = self.blkkey[blk]
            if k is not None:
                assert self.cache[k] == blk
                del self.cache[k]
                self.blkkey[blk] = None
            assert self.refcnt[blk] == 0
            self.refcnt[blk] = 1
            r.own.append(blk)

    def cache_prompt(self, r, n):
        """Right after r is given n tokens (r.c is still the value before)."""
        h = len(r.hit_blocks)
        upto = min(r.c + n, r.L) // B
        for j in range(max(r.considered, h), upto):
            k = r.keys[j]
            if k not in self.cache:
                self.version += 1
                blk = r.own[j - h]
                self.blkkey[blk] = k
                self.cache[k] = blk
        r.considered = max(r.considered, upto)

    def release(self, r):
        self.version += 1
        for blk in reversed(r.hit_blocks + r.own):
            self.refcnt[blk] -= 1
            assert self.refcnt[blk] >= 0
            if self.refcnt[blk] == 0:
                self.free[blk] = None  # tail
        r.hit_blocks = []
        r.own = []
        r.considered = 0

    def needed_new(self, r, n):
        return ceil_div(r.c + n, B) - (len(r.hit_blocks) + len(r.own))

    def step(self):
        cfg = self.cfg
        s = self.t_next
        self.w_changes_at(s)
        b = cfg["M"]
        preempted = False
        sched = []  # (req, n, c before, need before)
        R = self.R
        # 1. running requests, in R order
        i = 0
        while i < len(R):
            X = R[i]
            if b == 0:
                break
            need = X.n_tok() - X.c
            n = min(need, b)
            stop = False
            while self.needed_new(X, n) > len(self.free):
                V = R.pop()
                self.release(V)
                V.c = 0
                V.preemptions += 1
                self.preemptions += 1
                self.W.appendleft(V)
                preempted = True
                if V is X:
                    stop = True
                    break
            if stop:
                break
            self.allocate(X, self.needed_new(X, n))
            self.cache_prompt(X, n)
            b -= n
            sched.append((X, n, X.c, need))
            i += 1
        # 2. waiting requests, only if nothing was preempted
        if not preempted:
            while self.W and b > 0 and len(R) < cfg["S"]:
                Y = self.W[0]
                assert Y.c == 0 and not Y.hit_blocks and not Y.own
                # The lookup only reads the cache map and reference counts: memoized on the
                # pod's version (bumped by every change of either), so a head that cannot be
                # admitted for many steps is not looked up again each step.
                if Y.memo is not None and Y.memo[0] == self.version:
                    _, h, hits, zero = Y.memo
                else:
                    hits, zero = self.lookup(Y)
                    h = len(hits)
                    Y.memo = (self.version, h, hits, zero)
                c = B * h
                need = Y.n_tok() - c
                n = min(need, b)
                new = ceil_div(c + n, B) - h
                if new + zero > len(self.free):
                    break
                self.W.popleft()
                R.append(Y)
                self.version += 1
                Y.memo = None
                for blk in hits:
                    if self.refcnt[blk] == 0:
                        del self.free[blk]
                    self.refcnt[blk] += 1
                Y.hit_blocks = hits
                Y.c = c
                Y.considered = h
                self.allocate(Y, new)
                self.cache_prompt(Y, n)
                if Y.hit_tokens is None:
                    Y.hit_tokens = B * h
                b -= n
                sched.append((Y, n, c, need))
        assert sched, "a step with work schedules at least one token"
        pinned = self.C - len(self.free)
        if cfg["check"]:  # O(C) per step: only with --check
            assert sum(self.refcnt) == sum(len(r.hit_blocks) + len(r.own) for r in R)
            assert pinned == sum(1 for x in self.refcnt if x > 0)
            assert all(self.cache[self.blkkey[b]] == b for b in range(self.C) if self.blkkey[b] is not None)
            assert len(self.cache) <= self.C
        # 3. step time
        P = D = K = 0
        for X, n, c0, need in sched:
            if X.g >= 1 and need == 1:
                D += 1
            else:
                P += n
                X.prefill_tokens += n
            K += c0 + n
        t_step = cfg["t_overhead"] + cfg["t_prefill"] * P + cfg["t_decode"] * D + cfg["t_kv"] * K
        e = s + t_step
        self.prefill_tokens += P
        self.peak_pinned = max(self.peak_pinned, pinned)
        self.pinned_time += pinned * t_step
        # 4. outputs at e
        finished = []
        for X, n, c0, need in sched:
            X.c += n
            if X.c == X.n_tok():
                X.g += 1
                if X.g == 1:
                    X.first = e
                if X.g == X.O:
                    X.finish = e
                    finished.append(X)
        for X in finished:
            self.release(X)
            R.remove(X)
        self.steps += 1
        self.t_next = e


def simulate(trace, N, C, router, alpha, cfg):
    reqs = []
    for idx, (lineno, arr, L, O, keys) in enumerate(trace):
        if L == 0:
            raise InputError(lineno, "input_length 0")
        if max(O, 1) > MAX_OUTPUT_TOKENS:
            raise InputError(lineno, "output_length too large")
        if ceil_div(L + max(O, 1) - 1, B) > C:
            raise InputError(lineno, "input_length needs more blocks than --capacity")
        reqs.append(Req(idx, arr, L, O, keys))
    pods = [Pod(C, cfg) for _ in range(N)]
    per_pod = [0] * N
    for i, r in enumerate(reqs):
        t = r.arrival
        for pod in pods:
            while pod.has_work() and pod.t_next < t:
                pod.step()
        q = [pod.queue_len(t) for pod in pods]
        if router == "round-robin":
            p = i % N
        elif router == "least-loaded":
            p = min(range(N), key=lambda x: (q[x], x))
        elif router == "prefix-aware":
            best = None
            for x in range(N):
                match = 0
                for k in r.keys:
                    if k in pods[x].cache:
                        match += 1
                    else:
                        break
                score = float(match) - alpha * float(q[x])
                cand = (-score, q[x], x)
                if best is None or cand < best:
                    best = cand
            p = best[2]
        else:
            raise ValueError(router)
        pod = pods[p]
        if not pod.has_work():
            pod.t_next = max(t, pod.t_next)
        pod.w_changes_at(t)
        r.pod = p
        r.queue_len = q[p]
        pod.W.append(r)
        pod.dispatched.append(r)
        per_pod[p] += 1
    for pod in pods:
        while pod.has_work():
            pod.step()
    out = []
    for r in reqs:
        assert r.g == r.O and r.finish is not None
        out.append(
            {
                "index": r.idx,
                "pod": r.pod,
                "arrival_ns": r.arrival,
                "queue_len": r.queue_len,
                "hit_tokens": r.hit_tokens,
                "prefill_tokens": r.prefill_tokens,
                "ttft_ns": r.first - r.arrival,
                "e2e_ns": r.finish - r.arrival,
                "preemptions": r.preemptions,
            }
        )
    makespan = max((r.finish for r in reqs), default=0)
    totals = {
        "requests": len(reqs),
        "output_tokens": sum(r.O for r in reqs),
        "hit_tokens": sum(r.hit_tokens for r in reqs),
        "prefill_tokens": sum(p.prefill_tokens for p in pods),
        "preemptions": sum(p.preemptions for p in pods),
        "per_pod_preemptions": [p.preemptions for p in pods],
        "steps": sum(p.steps for p in pods),
        "per_pod_steps": [p.steps for p in pods],
        "per_pod_requests": per_pod,
        "makespan_ns": makespan,
        "mean_waiting": (sum(p.w_area for p in pods) / N / makespan) if makespan else None,
        "per_pod_kv_util_peak": [p.peak_pinned / C for p in pods],
        "per_pod_kv_util_mean": [(p.pinned_time / (C * makespan)) if makespan else None for p in pods],
    }
    return {"requests": out, "totals": totals}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True)
    ap.add_argument("--trace-block-size", type=int, default=512)
    ap.add_argument("--pods", type=int, required=True)
    ap.add_argument("--capacity", type=int, required=True)
    ap.add_argument("--router", required=True)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--max-num-seqs", type=int, default=1024)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--profile", default="qwen3-32b-h100x2")
    ap.add_argument("--t-overhead-ns", type=int)
    ap.add_argument("--t-prefill-token-ns", type=int)
    ap.add_argument("--t-decode-seq-ns", type=int)
    ap.add_argument("--t-kv-token-ns", type=int)
    ap.add_argument("--check", action="store_true", help="check the block invariants after every step (slow)")
    a = ap.parse_args()
    prof = PROFILES[a.profile]
    coef = [
        v if v is not None else d
        for v, d in zip((a.t_overhead_ns, a.t_prefill_token_ns, a.t_decode_seq_ns, a.t_kv_token_ns), prof)
    ]
    if a.max_num_seqs > a.max_num_batched_tokens or a.max_num_seqs < 1 or coef[0] < 1:
        print("ERROR: max_num_seqs must be <= max_num_batched_tokens; t_overhead_ns >= 1")
        sys.exit(2)
    cfg = {
        "S": a.max_num_seqs,
        "M": a.max_num_batched_tokens,
        "t_overhead": coef[0],
        "t_prefill": coef[1],
        "t_decode": coef[2],
        "t_kv": coef[3],
        "check": a.check,
    }
    try:
        trace = read_trace(a.trace, a.trace_block_size)
        out = simulate(trace, a.pods, a.capacity, a.router, a.alpha, cfg)
    except InputError as e:
        print(f"ERROR line={e.line}: {e}")
        sys.exit(2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
