#!/usr/bin/env python3
"""A plain, independent reference of the brokerlab fleet model (docs/MODEL.md).

Written from the specification alone, without the Rust code: Python's own block identities
(interned chains of (hash_id, sub) pairs, so no hash), an OrderedDict LRU per pod that touches every
key first and then evicts down to C (batch semantics), a literal queue of eviction events for the
stale index (delivered just before request i+k+1, dropped if the pod re-inserted the key after the
eviction), and the prefix-aware score as the float match - alpha * queue_len.

`host/tests/reference_model.rs` compares `brokerlab fleet replay --json` with it, config by config;
`brokerlab fleet bench` times it against the Rust replay on the same trace and configuration
(the seed's own stack: standard library only, an OrderedDict LRU per pod, a dict index).
Usage:
  ref.py --trace F [--trace-block-size 512] --pods N --capacity C --router R [--alpha A]
         [--stale K] [--order tail-first|in-order] [--t-prefill-ns 50000] [--t-decode-ns 0]
Prints one JSON object (the metrics), or an error line "ERROR line=<n>: msg" with exit code 2.
"""
import argparse
import json
import sys
from collections import OrderedDict


class TraceError(Exception):
    def __init__(self, line, msg):
        super().__init__(f"line {line}: {msg}")
        self.line = line


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def read_trace(path, S):
    """Returns a list of (arrival_ns, L, O, keys). Keys are interned ints: key_j identifies the
    whole chain (pair_0, ..., pair_j), pair = (hash_ids[16j // S], (16j % S) // 16)."""
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
                raise TraceError(lineno, f"bad json: {e}")
            if not isinstance(obj, dict):
                raise TraceError(lineno, "not an object")
            for fld in ("timestamp", "input_length", "output_length", "hash_ids"):
                if fld not in obj:
                    raise TraceError(lineno, f"missing {fld}")
            ts, L, O, ids = obj["timestamp"], obj["input_length"], obj["output_length"], obj["hash_ids"]
            if not is_int(ts) or ts < 0:
                raise TraceError(lineno, "timestamp not a non-negative integer")
            if not is_int(L) or L < 0 or not is_int(O) or O < 0:
                raise TraceError(lineno, "length not a non-negative integer")
            if not isinstance(ids, list) or not all(is_int(h) and h >= 0 for h in ids):
                raise TraceError(lineno, "bad hash_ids")
            if last_ts is not None and ts < last_ts:
                raise TraceError(lineno, "decreasing timestamp")
            last_ts = ts
            m = L // 16
            # block j needs hash_ids[(16 j) // S] for j < m
            if m > 0 and len(ids) <= (16 * (m - 1)) // S:
                raise TraceError(lineno, "too few hash_ids")
            keys = []
            parent = 0  # the root
            for j in range(m):
                pair = (ids[(16 * j) // S], ((16 * j) % S) // 16)
                node = (parent, pair)
                k = intern.get(node)
                if k is None:
                    k = len(intern) + 1
                    intern[node] = k
                keys.append(k)
                parent = k
            reqs.append((ts * 1_000_000, L, O, keys))
    return reqs


def simulate(reqs, N, C, router, alpha, stale, order, t_prefill, t_decode):
    pods = [OrderedDict() for _ in range(N)]  # MRU at the end
    finishes = [[] for _ in range(N)]  # finish times of requests dispatched to p
    last_finish = [0] * N
    # Router's view of the index: key -> set of pods believed to hold it.
    belief = {}
    # Literal event queue of evictions: (deliver_before_request, seq, key, pod)
    evq = []
    ev_head = 0
    last_insert_seq = {}  # (key, pod) -> seq of the latest insert event
    seq = 0
    per_pod = [0] * N
    tot_in = tot_hit = tot_pre = 0
    lat = []
    for i, (arr, L, O, keys) in enumerate(reqs):
        # deliver evictions due before request i is routed
        while ev_head < len(evq) and evq[ev_head][0] <= i:
            _, s, key, p = evq[ev_head]
            ev_head += 1
            if last_insert_seq.get((key, p), -1) > s:
                continue  # dropped: same pod re-inserted the key after this eviction
            b = belief.get(key)
            if b is not None:
                b.discard(p)
        q = []
        for p in range(N):
            q.append(sum(1 for fin in finishes[p] if fin > arr))
        if router == "round-robin":
            p = i % N
        elif router == "least-loaded":
            p = min(range(N), key=lambda x: (q[x], x))
        elif router == "prefix-aware":
            best = None
            for x in range(N):
                match = 0
                for k in keys:
                    if x in belief.get(k, ()):
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
        cache = pods[p]
        h = 0
        for k in keys:
            if k in cache:
                h += 1
            else:
                break
        inserted = []
        order_keys = list(reversed(keys)) if order == "tail-first" else list(keys)
        for k in order_keys:
            if k in cache:
                cache.move_to_end(k)
            else:
                cache[k] = True
                inserted.append(k)
        evicted = []
        while len(cache) > C:
            k, _ = cache.popitem(last=False)
            evicted.append(k)
        if router != "prefix-aware":
            inserted = evicted = ()  # only the prefix-aware router reads the index
        for k in inserted:
            seq += 1
            last_insert_seq[(k, p)] = seq
            belief.setdefault(k, set()).add(p)
        for k in evicted:
            seq += 1
            evq.append((i + stale + 1, seq, k, p))
        hit_tokens = 16 * h
        pre = L - hit_tokens
        service = pre * t_prefill + O * t_decode
        start = max(arr, last_finish[p])
        fin = start + service
        last_finish[p] = fin
        finishes[p] = [f for f in finishes[p] if f > arr]  # arrivals never decrease
        finishes[p].append(fin)
        lat.append(fin - arr)
        per_pod[p] += 1
        tot_in += L
        tot_hit += hit_tokens
        tot_pre += pre
    n = len(lat)
    lat.sort()

    def pct(num, den):
        if n == 0:
            return None
        idx = (num * n + den - 1) // den - 1
        return lat[idx] / 1e9

    return {
        "requests": n,
        "input_tokens": tot_in,
        "hit_tokens": tot_hit,
        "prefill_tokens": tot_pre,
        "hit_rate": (tot_hit / tot_in) if tot_in > 0 else None,
        "latency_p50": pct(50, 100),
        "latency_p90": pct(90, 100),
        "latency_p99": pct(99, 100),
        "per_pod_requests": per_pod,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True)
    ap.add_argument("--trace-block-size", type=int, default=512)
    ap.add_argument("--pods", type=int, required=True)
    ap.add_argument("--capacity", type=int, required=True)
    ap.add_argument("--router", required=True)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--stale", type=int, default=0)
    ap.add_argument("--order", default="tail-first")
    ap.add_argument("--t-prefill-ns", type=int, default=50000)
    ap.add_argument("--t-decode-ns", type=int, default=0)
    a = ap.parse_args()
    try:
        reqs = read_trace(a.trace, a.trace_block_size)
    except TraceError as e:
        print(f"ERROR line={e.line}: {e}")
        sys.exit(2)
    out = simulate(reqs, a.pods, a.capacity, a.router, a.alpha, a.stale, a.order, a.t_prefill_ns, a.t_decode_ns)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
