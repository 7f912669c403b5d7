#!/usr/bin/env python3
"""Model check of the derived approximate index (docs/PERFORMANCE.md, branches slot29 and idx31).

Per pod, the pod's LRU cache (a request's keys touched tail first, the FIFO engine's default) and
the router's approximate-index LRU of the same capacity (touched in prompt order) receive the same
requests. The design's claim, for prompts without a repeated key: with l(k) the last request
that held key k, B = l(the pod's least recent key) once the pod is full, f = B's keys whose l is
B in prompt order (q of them), r = how many of f the pod holds (f[:r]) and m = min(r, q - r),

    router's keys = pod's keys - f[:m] + f[q-m:]

(f[:m] only in the pod, f[q-m:] only in the router; both empty while the pod is not full). This
script keeps both LRUs and their differences (updated at every insertion and eviction) and checks
the claim after every request, then reports how large the boundary difference is and how often
it changes.

  scripts/derived_index_model.py random SEED CASES
      random request streams: 1 to 4 pods, capacities 1 to 100, keys drawn from 2 to 3C + 5
      values, prompts of up to 2C + 3 distinct keys
  scripts/derived_index_model.py trace TRACE.jsonl.zst PODS CAPACITY [ROUTES]
      a Mooncake trace (keys as `trace_keys` chains them, 512-token ids, 16-token blocks); ROUTES
      a file of one pod per request (`perblock TRACE ROUTER routes PODS CAPACITY`), else
      request i goes to pod i mod PODS
"""
import collections
import json
import random
import subprocess
import sys


class Lru:
    def __init__(self, cap):
        self.cap = cap
        self.od = collections.OrderedDict()

    def touch(self, k, inserted, evicted):
        if k in self.od:
            self.od.move_to_end(k)
            return
        if len(self.od) == self.cap:
            v, _ = self.od.popitem(last=False)
            evicted(v)
        self.od[k] = None
        inserted(k)


def run(stream, pods, cap, stats=None):
    pod = [Lru(cap) for _ in range(pods)]
    rtr = [Lru(cap) for _ in range(pods)]
    last = [dict() for _ in range(pods)]  # key -> last request to this pod that held it
    prompts = [dict() for _ in range(pods)]
    only_pod = [set() for _ in range(pods)]
    only_rtr = [set() for _ in range(pods)]
    prev = [(set(), set()) for _ in range(pods)]
    changes = touches = 0
    for n, (p, keys) in enumerate(stream):
        assert len(set(keys)) == len(keys), "a prompt with a repeated key (the design falls back)"
        P, R, op, orr = pod[p], rtr[p], only_pod[p], only_rtr[p]

        def p_ins(k):
            (orr.discard if k in R.od else op.add)(k)

        def p_ev(k):
            (orr.add if k in R.od else op.discard)(k)

        def r_ins(k):
            (op.discard if k in P.od else orr.add)(k)

        def r_ev(k):
            (op.add if k in P.od else orr.discard)(k)

        for k in keys:
            R.touch(k, r_ins, r_ev)
        for k in reversed(keys):
            P.touch(k, p_ins, p_ev)
        for k in keys:
            last[p][k] = n
        prompts[p][n] = keys
        X, D = set(), set()
        if len(P.od) == cap:
            b = last[p][next(iter(P.od))]
            f = [k for k in prompts[p][b] if last[p][k] == b]
            q = len(f)
            r = sum(1 for k in f if k in P.od)
            assert f[:r] == [k for k in f if k in P.od]
            m = min(r, q - r)
            X, D = set(f[:m]), set(f[q - m:])
            if stats is not None:
                stats.append(m)
        assert op == X and orr == D, (n, p, len(op), len(X), len(orr), len(D))
        changes += len(X ^ prev[p][0]) + len(D ^ prev[p][1])
        touches += len(keys)
        prev[p] = (X, D)
    return changes, touches


def trace_stream(path, pods, routes):
    out = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout
    stream = []
    for i, line in enumerate(out.decode().splitlines()):
        r = json.loads(line)
        keys, parent = [], 0
        for j in range(r["input_length"] // 16):
            parent = hash((parent, r["hash_ids"][j // 32], j % 32))
            keys.append(parent)
        stream.append((routes[i] if routes else i % pods, keys))
    return stream


def main():
    if sys.argv[1] == "random":
        rnd = random.Random(int(sys.argv[2]))
        for _ in range(int(sys.argv[3])):
            pods, cap = rnd.randint(1, 4), rnd.choice([1, 2, 3, 5, 8, 13, 40, 100])
            universe = rnd.randint(2, 3 * cap + 5)
            stream = []
            for _ in range(rnd.randint(1, 200)):
                m = rnd.randint(0, min(universe, 2 * cap + 3))
                stream.append((rnd.randrange(pods), rnd.sample(range(universe), m)))
            run(stream, pods, cap)
        print("random: the claim held after every request of", sys.argv[3], "streams")
        return
    path, pods, cap = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    routes = [int(x) for x in open(sys.argv[5])] if len(sys.argv) > 5 else None
    stats = []
    changes, touches = run(trace_stream(path, pods, routes), pods, cap, stats)
    ms = sorted(stats)
    nz = sum(1 for m in ms if m > 0)
    print(
        "trace: the claim held after every request; %d checks of a full pod, m > 0 in %d (%.1f%%); "
        "m median %d, p90 %d, max %d, mean %.1f; changes to the two sets %d over %d touches (%.3f per touch)"
        % (len(ms), nz, 100 * nz / len(ms), ms[len(ms) // 2], ms[int(len(ms) * 0.9)], ms[-1],
           sum(ms) / len(ms), changes, touches, changes / touches)
    )


if __name__ == "__main__":
    main()
