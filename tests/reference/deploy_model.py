#!/usr/bin/env python3
"""Deliberately naive, independent reference of the fleets people deploy on top of brokerlab's
batched engine: prefill/decode disaggregation, the KV offload tier and SLO goodput
(docs/MODEL.md, "Prefill/decode disaggregation" and "The KV offload tier"), written from that page
alone, without the Rust code (which does not exist yet when this is written).

It reuses batched_model.py's reading of the trace (`read_trace`, the profiles) and nothing else:
the engine is re-implemented here, one step at a time, with one event loop in time order over all
pods (arrivals, step starts, KV transfers and their deliveries). Python's big integers hold the
processor-sharing link's work exactly.

With `--prefill-pods 0` and `--cpu-capacity 0` (the defaults) the output is batched_model.py's,
byte for byte (test_deploy_model.py checks it on the vendored traces).

Usage: batched_model.py's flags, plus
  --prefill-pods NP --prefill-capacity C_P --prefill-profile P
  --pd-decider prefix-threshold|always|never --pd-threshold-tokens N
  --pd-link-bytes-per-s BW --pd-link-latency-ns NS --kv-bytes-per-token X
  --cpu-capacity C2 --pcie-bytes-per-s BW --pcie-latency-ns NS --cpu-tier-weight 0.8
  --slo-ttft-ms V --slo-tpot-ms V
  --check (block invariants after every step, slow) --coverage (adds the branches taken to totals)
Prints {"requests": [...], "totals": {...}} or "ERROR line=<n>: msg" / "ERROR: msg", exit 2.
Reading choices where docs/MODEL.md was ambiguous: MODEL.md, "Ambiguities found by the reference".
"""
import argparse
import json
import os
import sys
from collections import OrderedDict, deque
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batched_model import B, MAX_OUTPUT_TOKENS, PROFILES, InputError, ceil_div, read_trace  # noqa: E402

INF = float("inf")
# Branches taken, printed with --coverage (tests check that a case reaches the rule it is about).
COVERAGE = {}


def cover(name):
    COVERAGE[name] = COVERAGE.get(name, 0) + 1

# kv_bytes_per_token of each profile's model: 2 x layers x KV heads x head_dim x 2 bytes
KV_BYTES_PER_TOKEN = {
    "qwen3-32b-h100x2": 2 * 64 * 8 * 128 * 2,
    "llama-3.1-8b-h100": 2 * 32 * 8 * 128 * 2,
    "seed": 2 * 32 * 8 * 128 * 2,
}
MAX_LINK_BYTES_PER_S = 10**13
MAX_LINK_LATENCY_NS = 10**12
MAX_KV_BYTES_PER_TOKEN = 1 << 24


class Req:
    """One request as an engine sees it: a trace request served by one pod, or the prefill job of a
    disaggregated request (O' = 1, its parent the trace request)."""

    def __init__(self, idx, arrival, L, O, keys, parent=None):
        self.idx = idx
        self.arrival = arrival
        self.L = L
        self.O = max(O, 1)  # O'
        self.keys = keys
        self.m = len(keys)
        self.parent = parent
        self.c = 0
        self.g = 0
        self.hit_blocks = []
        self.own = []
        self.considered = 0
        self.hit_tokens = None  # at first admission
        self.offload_hit_tokens = None  # at first admission
        self.first = None
        self.finish = None
        self.preemptions = 0
        self.pod = None
        self.queue_len = None
        self.prefill_tokens = 0
        self.memo = None
        # P/D
        self.transferred = False  # delivered to a decode pod, not yet admitted there
        self.job = None  # the prefill job of a disaggregated request
        self.decode_hit_tokens = None
        self.transfer_bytes = 0
        self.transfer_ns = None
        # offload tier
        self.u = 0  # store index
        self.load_x = None  # end of its load while loading, else None
        self.loaded_from = 0  # h of the load (own blocks h .. h + h2 - 1 are the loaded ones)

    def n_tok(self):
        return self.L + self.g


class Pod:
    def __init__(self, index, C, cfg, coef):
        self.index = index
        self.C = C
        self.cfg = cfg
        self.t_overhead, self.t_prefill, self.t_decode, self.t_kv = coef
        self.refcnt = [0] * C
        self.blkkey = [None] * C
        self.free = OrderedDict((b, None) for b in range(C))
        self.cache = {}
        self.cpu = OrderedDict()  # CPU tier: key -> None, first = least recent
        self.C2 = cfg["C2"]
        self.pcie_free = 0
        self.W = deque()
        self.R = []
        self.t_next = 0
        self.waiting = False  # after a step that scheduled nothing, until the next step
        self.gap = None  # (s, pinned) of that step, for the KV-utilization integral
        self.dispatched = []
        self.steps = 0
        self.preemptions = 0
        self.prefill_tokens = 0
        self.peak_pinned = 0
        self.pinned_time = 0
        self.w_area = 0
        self.w_since = 0
        self.version = 0
        self.loads = 0
        self.load_blocks = 0
        self.stored = 0

    def w_changes_at(self, t):
        assert t >= self.w_since
        self.w_area += len(self.W) * (t - self.w_since)
        self.w_since = t

    def has_work(self):
        return bool(self.W) or bool(self.R)

    def queue_len(self, t):
        self.dispatched = [r for r in self.dispatched if r.finish is None or r.finish > t]
        return len(self.dispatched)

    def enqueue(self, r, t):
        """A request routed (or delivered) to this pod at t."""
        if not self.has_work():
            self.t_next = max(t, self.t_next)
        elif self.waiting and t < self.t_next:
            cover("wake")
            self.t_next = t
        self.w_changes_at(t)
        self.W.append(r)

    # --- matches the routers and the decider read ---
    def weighted_match(self, keys):
        """floor(sum of tier weights in thousandths / 1000) over the leading run held in either tier."""
        total = 0
        for k in keys:
            if k in self.cache:
                total += 1000
            elif k in self.cpu:
                total += self.cfg["w_cpu"]
            else:
                break
        return total // 1000

    def unweighted_match(self, keys):
        n = 0
        for k in keys:
            if k in self.cache or k in self.cpu:
                n += 1
            else:
                break
        return n

    # --- blocks ---
    def lookup(self, r):
        h_max = min(r.m, (r.n_tok() - 1) // B)
        hits = []
        zero = 0
        for j in range(h_max):
            blk = self.cache.get(r.keys[j])
            if blk is None:
                break
            hits.append(blk)
            if self.refcnt[blk] == 0:
                zero += 1
        return hits, zero, h_max

    def allocate(self, r, new):
        if new > 0:
            self.version += 1
        for _ in range(new):
            blk, _ = self.free.popitem(last=False)
            k = self.blkkey[blk]
            if k is not None:
                del self.cache[k]
                self.blkkey[blk] = None
            self.refcnt[blk] = 1
            r.own.append(blk)

    def cache_prompt(self, r, n):
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

    def store(self, r, n):
        """Store on compute into the CPU tier (r.c is still the value before the n tokens)."""
        if self.C2 == 0:
            return
        up = min(r.c + n, r.L) // B
        if up <= r.u:
            return
        inserted = 0
        for j in range(r.u, up):
            k = r.keys[j]
            if k not in self.cpu:
                if len(self.cpu) == self.C2:
                    self.cpu.popitem(last=False)
                self.cpu[k] = None
                inserted += 1
        if len(self.cpu) == self.C2 and inserted:
            cover("tier_full")
        if inserted:
            for j in reversed(range(up)):
                if r.keys[j] in self.cpu:
                    self.cpu.move_to_end(r.keys[j])
        self.stored += inserted
        r.u = up

    def release(self, r):
        self.version += 1
        for blk in reversed(r.hit_blocks + r.own):
            self.refcnt[blk] -= 1
            assert self.refcnt[blk] >= 0
            if self.refcnt[blk] == 0:
                self.free[blk] = None
        r.hit_blocks = []
        r.own = []
        r.considered = 0

    def needed_new(self, r, n):
        return ceil_div(r.c + n, B) - (len(r.hit_blocks) + len(r.own))

    def pin(self, r, hits):
        self.version += 1
        for blk in hits:
            if self.refcnt[blk] == 0:
                del self.free[blk]
            self.refcnt[blk] += 1
        r.hit_blocks = hits

    def ready(self, r):
        """A load has completed: its blocks get their keys (unless already cached)."""
        h = r.loaded_from
        upto = r.c // B  # = h + h2
        for j in range(h, upto):
            k = r.keys[j]
            if k not in self.cache:
                self.version += 1
                blk = r.own[j - h]
                self.blkkey[blk] = k
                self.cache[k] = blk
        r.considered = upto
        r.load_x = None

    def close_gap(self, s):
        if self.gap is not None:
            g0, pinned = self.gap
            self.pinned_time += pinned * (s - g0)
            self.gap = None

    # --- one step ---
    def step(self):
        """Runs the step starting at t_next; returns the requests it finished."""
        cfg = self.cfg
        s = self.t_next
        self.close_gap(s)
        self.w_changes_at(s)
        self.waiting = False
        R = self.R
        for X in R:
            if X.load_x is not None and X.load_x <= s:
                self.ready(X)
        b = cfg["M"]
        preempted = False
        sched = []
        # 1. running requests, in R order (loading ones skipped)
        i = 0
        while i < len(R):
            X = R[i]
            if X.load_x is not None:
                cover("skip_loading")
                i += 1
                continue
            if b == 0:
                break
            need = X.n_tok() - X.c
            n = min(need, b)
            stop = False
            while self.needed_new(X, n) > len(self.free):
                V = R.pop()
                cover("preempt_loading" if V.load_x is not None else "preempt")
                self.release(V)
                V.c = 0
                V.load_x = None
                V.preemptions += 1
                self.preemptions += 1
                self.W.appendleft(V)
                preempted = True
                if V is X:
                    cover("self_preempt")
                    stop = True
                    break
            if stop:
                break
            self.allocate(X, self.needed_new(X, n))
            self.cache_prompt(X, n)
            self.store(X, n)
            b -= n
            sched.append((X, n, X.c, need))
            i += 1
        # 2. waiting requests, only if nothing was preempted
        if not preempted:
            while self.W and b > 0 and len(R) < cfg["S"]:
                Y = self.W[0]
                assert Y.c == 0 and not Y.hit_blocks and not Y.own and Y.load_x is None
                if Y.memo is not None and Y.memo[0] == self.version:
                    _, hits, zero, h_max = Y.memo
                else:
                    hits, zero, h_max = self.lookup(Y)
                    Y.memo = (self.version, hits, zero, h_max)
                h = len(hits)
                if Y.transferred:
                    cover("transferred_admission")
                    c = Y.L - 1
                    need = Y.n_tok() - c
                    n = min(need, b)
                    new = ceil_div(c + n, B) - h
                    if new + zero > len(self.free):
                        cover("transferred_blocked")
                        break
                    self.W.popleft()
                    R.append(Y)
                    Y.memo = None
                    self.pin(Y, hits)
                    Y.c = c
                    Y.considered = h
                    self.allocate(Y, new)
                    self.cache_prompt(Y, n)
                    self.store(Y, n)
                    Y.transferred = False
                    if Y.decode_hit_tokens is None:
                        Y.decode_hit_tokens = B * h
                    b -= n
                    sched.append((Y, n, c, need))
                    continue
                h2 = 0
                if self.C2 > 0:
                    for j in reversed(range(Y.m)):
                        if Y.keys[j] in self.cpu:
                            self.cpu.move_to_end(Y.keys[j])
                    while h + h2 < h_max and Y.keys[h + h2] in self.cpu:
                        h2 += 1
                if h2 > 0:
                    if h2 + zero > len(self.free):
                        cover("load_blocked")
                        break
                    self.W.popleft()
                    R.append(Y)
                    Y.memo = None
                    self.pin(Y, hits)
                    self.allocate(Y, h2)
                    Y.c = B * (h + h2)
                    Y.considered = h
                    Y.u = h + h2
                    Y.loaded_from = h
                    nbytes = h2 * B * cfg["kv_bytes"]
                    start = max(s, self.pcie_free)
                    Y.load_x = start + cfg["pcie_lat"] + ceil_div(nbytes * 10**9, cfg["pcie_bw"])
                    self.pcie_free = Y.load_x
                    self.loads += 1
                    self.load_blocks += h2
                    if Y.hit_tokens is None:
                        Y.hit_tokens = B * h
                        Y.offload_hit_tokens = B * h2
                    continue
                c = B * h
                need = Y.n_tok() - c
                n = min(need, b)
                new = ceil_div(c + n, B) - h
                if new + zero > len(self.free):
                    break
                self.W.popleft()
                R.append(Y)
                Y.memo = None
                self.pin(Y, hits)
                Y.c = c
                Y.considered = h
                self.allocate(Y, new)
                self.cache_prompt(Y, n)
                self.store(Y, n)
                if Y.hit_tokens is None:
                    Y.hit_tokens = B * h
                    Y.offload_hit_tokens = 0
                b -= n
                sched.append((Y, n, c, need))
        pinned = self.C - len(self.free)
        self.peak_pinned = max(self.peak_pinned, pinned)
        if cfg["check"]:
            assert sum(self.refcnt) == sum(len(r.hit_blocks) + len(r.own) for r in R)
            assert pinned == sum(1 for x in self.refcnt if x > 0)
            assert len(self.cpu) <= self.C2
        if not sched:
            # nothing scheduled: the pod waits for its earliest load (or an arrival)
            loads = [X.load_x for X in R if X.load_x is not None]
            assert loads, "a step that schedules nothing has a loading request"
            self.t_next = min(loads)
            assert self.t_next > s
            cover("wait")
            self.waiting = True
            self.gap = (s, pinned)
            return []
        # 3. step time
        P = D = K = 0
        for X, n, c0, need in sched:
            if X.g >= 1 and need == 1:
                D += 1
            else:
                P += n
                X.prefill_tokens += n
            K += c0 + n
        t_step = self.t_overhead + self.t_prefill * P + self.t_decode * D + self.t_kv * K
        e = s + t_step
        self.prefill_tokens += P
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
        return finished


class Link:
    """A decode pod's incoming link: processor sharing, in integers (MODEL.md, "KV transfer")."""

    def __init__(self, bw):
        self.bw = bw
        self.tau = 0
        self.active = []  # [req, remaining work]

    def next_completion(self):
        if not self.active:
            return INF
        n = len(self.active)
        r_min = min(a[1] for a in self.active)
        return self.tau + ceil_div(r_min * n, self.bw)

    def advance(self, T):
        """Returns [(completion time, req)] of the transfers done by T."""
        done = []
        while self.active:
            n = len(self.active)
            r_min = min(a[1] for a in self.active)
            dt = ceil_div(r_min * n, self.bw)
            if self.tau + dt <= T:
                q = (dt * self.bw) // n
                for a in self.active:
                    a[1] -= q
                self.tau += dt
                finished = sorted((a for a in self.active if a[1] <= 0), key=lambda a: a[0].idx)
                self.active = [a for a in self.active if a[1] > 0]
                if n > 1:
                    cover("shared_link")
                done.extend((self.tau, a[0]) for a in finished)
            else:
                q = ((T - self.tau) * self.bw) // n
                for a in self.active:
                    a[1] -= q
                    assert a[1] > 0
                break
        self.tau = T
        return done

    def join(self, T, req, work):
        done = self.advance(T)
        self.active.append([req, work])
        return done


def pick(router, candidates, q, keys, pods, alpha, rr):
    """The router's rule over `candidates` (global pod indices); rr = the round-robin counter."""
    if router == "round-robin":
        return candidates[rr % len(candidates)]
    if router == "least-loaded":
        return min(candidates, key=lambda x: (q[x], x))
    if router == "prefix-aware":
        best = None
        for x in candidates:
            match = pods[x].weighted_match(keys)
            score = float(match) - alpha * float(q[x])
            cand = (-score, q[x], x)
            if best is None or cand < best:
                best = cand
        return best[2]
    raise ValueError(router)


def simulate(trace, N, C, router, alpha, cfg, pd):
    NP = pd["NP"]
    CP = pd["CP"]
    reqs = []
    for idx, (lineno, arr, L, O, keys) in enumerate(trace):
        if L == 0:
            raise InputError(lineno, "input_length 0")
        if max(O, 1) > MAX_OUTPUT_TOKENS:
            raise InputError(lineno, "output_length too large")
        if ceil_div(L + max(O, 1) - 1, B) > C:
            raise InputError(lineno, "input_length needs more blocks than --capacity")
        if NP > 0 and ceil_div(L, B) > CP:
            raise InputError(lineno, "input_length needs more blocks than --prefill-capacity")
        reqs.append(Req(idx, arr, L, O, keys))
    pods = [Pod(x, CP if x < NP else C, cfg, pd["coef_prefill"] if x < NP else cfg["coef"]) for x in range(N)]
    prefill_pool = list(range(NP))
    decode_pool = list(range(NP, N))
    links = {d: Link(pd["bw"]) for d in decode_pool} if NP > 0 else {}
    joins = []  # [(e, parent)] transfers not yet joined
    deliveries = []  # [(delivery time, completion time, idx, parent)]
    per_pod = [0] * N
    n_disagg = 0
    i = 0
    n = len(reqs)

    def completions_at(done):
        for y, parent in done:
            parent.transfer_ns = y + pd["lat"] - parent.job.finish
            deliveries.append((y + pd["lat"], y, parent.idx, parent))

    while True:
        ta = reqs[i].arrival if i < n else INF
        busy = [p for p in pods if p.has_work()]
        ts = min((p.t_next for p in busy), default=INF)
        tj = min((e for e, _ in joins), default=INF)
        tc = min((lk.next_completion() for lk in links.values()), default=INF)
        td = min((d[0] for d in deliveries), default=INF)
        T = min(ta, ts, tj, tc, td)
        if T == INF:
            break
        # 1. link completions and joins at T
        if tc == T or tj == T:
            for d, lk in links.items():
                if lk.next_completion() == T:
                    completions_at(lk.advance(T))
            now = [x for x in joins if x[0] == T]
            joins[:] = [x for x in joins if x[0] != T]
            for e, parent in sorted(now, key=lambda x: x[1].idx):
                completions_at(links[parent.pod].join(e, parent, parent.transfer_bytes * 10**9))
            continue
        # 2. deliveries at T
        if td == T:
            now = sorted((x for x in deliveries if x[0] == T), key=lambda x: (x[1], x[2]))
            deliveries[:] = [x for x in deliveries if x[0] != T]
            for _, _, _, parent in now:
                parent.transferred = True
                pods[parent.pod].enqueue(parent, T)
            continue
        # 3. an arrival at T
        if ta == T:
            r = reqs[i]
            t = r.arrival
            q = [pod.queue_len(t) for pod in pods]
            if NP == 0:
                p = pick(router, list(range(N)), q, r.keys, pods, alpha, i)
                r.pod = p
                r.queue_len = q[p]
                pods[p].dispatched.append(r)
                per_pod[p] += 1
                pods[p].enqueue(r, t)
            else:
                d = pick(router, decode_pool, q, r.keys, pods, alpha, i)
                r.pod = d
                r.queue_len = q[d]
                pods[d].dispatched.append(r)
                per_pod[d] += 1
                if pd["decider"] == "always":
                    disagg = True
                elif pd["decider"] == "never":
                    disagg = False
                else:
                    nt = pd["threshold"]
                    disagg = nt > 0 and r.L - B * pods[d].unweighted_match(r.keys) >= nt
                if not disagg:
                    pods[d].enqueue(r, t)
                else:
                    p = pick(router, prefill_pool, q, r.keys, pods, alpha, n_disagg)
                    n_disagg += 1
                    job = Req(r.idx, t, r.L, 1, r.keys, parent=r)
                    job.pod = p
                    job.queue_len = q[p]
                    r.job = job
                    r.transfer_bytes = ceil_div(r.L, B) * B * cfg["kv_bytes"]
                    pods[p].dispatched.append(job)
                    per_pod[p] += 1
                    pods[p].enqueue(job, t)
            i += 1
            continue
        # 4. the step of the lowest-index pod starting at T
        pod = next(p for p in busy if p.t_next == T)
        for X in pod.step():
            if X.parent is not None:
                joins.append((X.finish, X.parent))

    # outputs
    out = []
    for r in reqs:
        assert r.g == r.O and r.finish is not None
        job = r.job
        o = {
            "index": r.idx,
            "pod": r.pod,
            "arrival_ns": r.arrival,
            "queue_len": r.queue_len,
            "hit_tokens": job.hit_tokens if job else r.hit_tokens,
            "prefill_tokens": r.prefill_tokens + (job.prefill_tokens if job else 0),
            "ttft_ns": r.first - r.arrival,
            "e2e_ns": r.finish - r.arrival,
            "preemptions": r.preemptions + (job.preemptions if job else 0),
        }
        if NP > 0:
            o["prefill_pod"] = job.pod if job else None
            o["prefill_queue_len"] = job.queue_len if job else None
            o["decode_hit_tokens"] = r.decode_hit_tokens if job else None
            o["transfer_bytes"] = r.transfer_bytes if job else 0
            o["transfer_ns"] = r.transfer_ns if job else None
        if cfg["C2"] > 0:
            o["offload_hit_tokens"] = job.offload_hit_tokens if job else r.offload_hit_tokens
        out.append(o)
    makespan = max((r.finish for r in reqs), default=0)
    totals = {
        "requests": len(reqs),
        "output_tokens": sum(r.O for r in reqs),
        "hit_tokens": sum(o["hit_tokens"] for o in out),
        "prefill_tokens": sum(p.prefill_tokens for p in pods),
        "preemptions": sum(p.preemptions for p in pods),
        "per_pod_preemptions": [p.preemptions for p in pods],
        "steps": sum(p.steps for p in pods),
        "per_pod_steps": [p.steps for p in pods],
        "per_pod_requests": per_pod,
        "makespan_ns": makespan,
        "mean_waiting": (sum(p.w_area for p in pods) / N / makespan) if makespan else None,
        "per_pod_kv_util_peak": [p.peak_pinned / p.C for p in pods],
        "per_pod_kv_util_mean": [(p.pinned_time / (p.C * makespan)) if makespan else None for p in pods],
    }
    if NP > 0:
        tr = sorted(o["transfer_ns"] for o in out if o["transfer_ns"] is not None)
        totals["disaggregated"] = len(tr)
        totals["transfer_bytes"] = sum(o["transfer_bytes"] for o in out)
        for name, qn, qd in (("p50", 1, 2), ("p90", 9, 10), ("p99", 99, 100)):
            totals[f"transfer_ns_{name}"] = tr[ceil_div(qn * len(tr), qd) - 1] if tr else None
        totals["transfer_ns_max"] = tr[-1] if tr else None
    if cfg["C2"] > 0:
        totals["offload_hit_tokens"] = sum(o["offload_hit_tokens"] for o in out)
        totals["offload_loads"] = sum(p.loads for p in pods)
        totals["offload_load_blocks"] = sum(p.load_blocks for p in pods)
        totals["offload_stored_blocks"] = sum(p.stored for p in pods)
        totals["per_pod_offload_loads"] = [p.loads for p in pods]
    if cfg["slo_ttft"] is not None or cfg["slo_tpot"] is not None:
        good = 0
        for r, o in zip(reqs, out):
            ok = cfg["slo_ttft"] is None or o["ttft_ns"] <= cfg["slo_ttft"]
            if cfg["slo_tpot"] is not None and r.O >= 2:
                ok = ok and o["e2e_ns"] - o["ttft_ns"] <= cfg["slo_tpot"] * (r.O - 1)
            good += ok
        totals["slo_good_requests"] = good
        totals["slo_attainment"] = good / len(reqs) if reqs else None
        totals["goodput_req_per_s"] = good / (makespan / 1e9) if makespan else None
    return {"requests": out, "totals": totals}


def decimal_scaled(text, k, what):
    """floor(v x 10^k + 1/2) of a non-negative decimal text, exactly (MODEL.md, "Trace formats")."""
    try:
        v = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"{what}: expected a decimal number, got {text!r}")
    if not v.is_finite() or v < 0:
        raise ValueError(f"{what}: expected a non-negative number, got {text!r}")
    return int((v * (Decimal(10) ** k)).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def cpu_weight_milli(text):
    try:
        v = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"--cpu-tier-weight: expected a decimal in [0, 1], got {text!r}")
    milli = v * 1000
    if not v.is_finite() or v < 0 or v > 1 or milli != milli.to_integral_value():
        raise ValueError(f"--cpu-tier-weight: expected a decimal in [0, 1] with at most 3 decimals, got {text!r}")
    return int(milli)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True)
    ap.add_argument("--trace-block-size", type=int, default=512)
    ap.add_argument("--pods", type=int, required=True)
    ap.add_argument("--capacity", type=int, required=True)
    ap.add_argument("--router", required=True, choices=["round-robin", "least-loaded", "prefix-aware"])
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--max-num-seqs", type=int, default=1024)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--profile", default="qwen3-32b-h100x2", choices=sorted(PROFILES))
    ap.add_argument("--t-overhead-ns", type=int)
    ap.add_argument("--t-prefill-token-ns", type=int)
    ap.add_argument("--t-decode-seq-ns", type=int)
    ap.add_argument("--t-kv-token-ns", type=int)
    ap.add_argument("--prefill-pods", type=int, default=0)
    ap.add_argument("--prefill-capacity", type=int)
    ap.add_argument("--prefill-profile", choices=sorted(PROFILES))
    ap.add_argument("--pd-decider", default="prefix-threshold", choices=["prefix-threshold", "always", "never"])
    ap.add_argument("--pd-threshold-tokens", type=int, default=16)
    ap.add_argument("--pd-link-bytes-per-s", type=int, default=25_000_000_000)
    ap.add_argument("--pd-link-latency-ns", type=int, default=50_000)
    ap.add_argument("--kv-bytes-per-token", type=int)
    ap.add_argument("--cpu-capacity", type=int, default=0)
    ap.add_argument("--pcie-bytes-per-s", type=int, default=64_000_000_000)
    ap.add_argument("--pcie-latency-ns", type=int, default=1_000)
    ap.add_argument("--cpu-tier-weight", default="0.8")
    ap.add_argument("--slo-ttft-ms")
    ap.add_argument("--slo-tpot-ms")
    ap.add_argument("--check", action="store_true", help="check block invariants after every step (slow)")
    ap.add_argument("--coverage", action="store_true", help="add the branches taken to the totals")
    a = ap.parse_args()

    def fail(msg):
        print(f"ERROR: {msg}")
        sys.exit(2)

    prof = PROFILES[a.profile]
    coef = tuple(
        v if v is not None else d
        for v, d in zip((a.t_overhead_ns, a.t_prefill_token_ns, a.t_decode_seq_ns, a.t_kv_token_ns), prof)
    )
    coef_prefill = PROFILES[a.prefill_profile] if a.prefill_profile else coef
    if a.max_num_seqs > a.max_num_batched_tokens or a.max_num_seqs < 1 or coef[0] < 1 or coef_prefill[0] < 1:
        fail("max_num_seqs must be <= max_num_batched_tokens; t_overhead_ns >= 1")
    if a.pods < 1 or a.capacity < 1:
        fail("--pods and --capacity must be >= 1")
    if a.prefill_pods < 0 or (a.prefill_pods > 0 and a.prefill_pods > a.pods - 1):
        fail("--prefill-pods: expected 1 ..= --pods - 1 (0: off)")
    if a.prefill_capacity is not None and a.prefill_capacity < 1:
        fail("--prefill-capacity: expected >= 1")
    if not 1 <= a.pd_link_bytes_per_s <= MAX_LINK_BYTES_PER_S or not 1 <= a.pcie_bytes_per_s <= MAX_LINK_BYTES_PER_S:
        fail("--pd-link-bytes-per-s, --pcie-bytes-per-s: expected 1 ..= 10^13")
    if not 0 <= a.pd_link_latency_ns <= MAX_LINK_LATENCY_NS or not 0 <= a.pcie_latency_ns <= MAX_LINK_LATENCY_NS:
        fail("--pd-link-latency-ns, --pcie-latency-ns: expected 0 ..= 10^12")
    if a.pd_threshold_tokens < 0 or a.cpu_capacity < 0:
        fail("--pd-threshold-tokens, --cpu-capacity: expected >= 0")
    kv_bytes = a.kv_bytes_per_token if a.kv_bytes_per_token is not None else KV_BYTES_PER_TOKEN[a.profile]
    if not 1 <= kv_bytes <= MAX_KV_BYTES_PER_TOKEN:
        fail("--kv-bytes-per-token: expected 1 ..= 2^24")
    try:
        w_cpu = cpu_weight_milli(a.cpu_tier_weight)
        slo_ttft = decimal_scaled(a.slo_ttft_ms, 6, "--slo-ttft-ms") if a.slo_ttft_ms is not None else None
        slo_tpot = decimal_scaled(a.slo_tpot_ms, 6, "--slo-tpot-ms") if a.slo_tpot_ms is not None else None
    except ValueError as e:
        fail(str(e))
    cfg = {
        "S": a.max_num_seqs,
        "M": a.max_num_batched_tokens,
        "coef": coef,
        "check": a.check,
        "C2": a.cpu_capacity,
        "pcie_bw": a.pcie_bytes_per_s,
        "pcie_lat": a.pcie_latency_ns,
        "w_cpu": w_cpu,
        "kv_bytes": kv_bytes,
        "slo_ttft": slo_ttft,
        "slo_tpot": slo_tpot,
    }
    pd = {
        "NP": a.prefill_pods,
        "CP": a.prefill_capacity if a.prefill_capacity is not None else a.capacity,
        "coef_prefill": coef_prefill,
        "decider": a.pd_decider,
        "threshold": a.pd_threshold_tokens,
        "bw": a.pd_link_bytes_per_s,
        "lat": a.pd_link_latency_ns,
    }
    try:
        trace = read_trace(a.trace, a.trace_block_size)
        out = simulate(trace, a.pods, a.capacity, a.router, a.alpha, cfg, pd)
        if a.coverage:
            out["totals"]["coverage"] = dict(sorted(COVERAGE.items()))
    except InputError as e:
        print(f"ERROR line={e.line}: {e}")
        sys.exit(2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
