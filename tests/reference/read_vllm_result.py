#!/usr/bin/env python3
"""Reads a brokerlab `--report-json` file as a `vllm bench serve` result reader would.

Usage: read_vllm_result.py RESULT.json [OUTCOMES.jsonl]

Fails (exit 1) when a key of vLLM's result (vllm/benchmarks/serve.py at 009e6d4a: the `result`
dict of `benchmark` and `process_one_metric` for ttft, tpot, itl, e2el with
--metric-percentiles 50,90,99) is missing, not a number, NaN or negative. With the per-request
outcomes (`--outcomes`), also recomputes the TTFT and E2E statistics as numpy does (mean, std
with ddof 0, median, linear-interpolation percentiles) and the counts, and compares.
"""
import json
import math
import sys

COUNTS = ["completed", "failed", "total_input_tokens", "total_output_tokens", "max_concurrent_requests"]
RATES = ["duration", "request_throughput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s"]
METRICS = ["ttft", "tpot", "itl", "e2el"]
STATS = ["mean_{}_ms", "median_{}_ms", "std_{}_ms", "p50_{}_ms", "p90_{}_ms", "p99_{}_ms"]


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def percentile(sorted_v, p):
    # numpy.percentile's default (linear) method
    if not sorted_v:
        return 0.0
    rank = p / 100 * (len(sorted_v) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return sorted_v[lo] + (sorted_v[hi] - sorted_v[lo]) * (rank - lo)


def stats(values):
    v = sorted(values)
    n = len(v)
    mean = sum(v) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / n)
    return {"mean": mean, "median": percentile(v, 50), "std": std,
            "p50": percentile(v, 50), "p90": percentile(v, 90), "p99": percentile(v, 99)}


def close(a, b, what):
    if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6):
        fail(f"{what}: report {a} != recomputed {b}")


def main():
    r = json.load(open(sys.argv[1]))
    keys = COUNTS + RATES + [s.format(m) for m in METRICS for s in STATS]
    for k in keys:
        if k not in r:
            fail(f"key {k} missing")
        v = r[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v) or math.isinf(v) or v < 0:
            fail(f"key {k} = {v!r}: expected a finite number >= 0")
    if "request_goodput" not in r:
        fail("key request_goodput missing (vLLM writes null without --goodput)")
    for k in COUNTS:
        if not isinstance(r[k], int):
            fail(f"key {k} = {r[k]!r}: expected an integer count")
    if r["completed"] <= 0:
        fail("no completed requests")
    close(r["output_throughput"] * r["duration"], r["total_output_tokens"], "output_throughput x duration")
    close(r["request_throughput"] * r["duration"], r["completed"], "request_throughput x duration")
    if len(sys.argv) > 2:
        rows = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
        if len(rows) != r["completed"]:
            fail(f"{len(rows)} outcomes, completed {r['completed']}")
        for name, key in (("ttft", "ttft_ns"), ("e2el", "e2e_ns")):
            s = stats([row[key] / 1e9 for row in rows])
            for stat, val in s.items():
                close(r[f"{stat}_{name}_ms"], val * 1e3, f"{stat}_{name}_ms")
    print(f"ok: {len(keys)} vLLM keys, completed {r['completed']}, "
          f"median_ttft_ms {r['median_ttft_ms']:.3f}, p99_ttft_ms {r['p99_ttft_ms']:.3f}, "
          f"mean_itl_ms {r['mean_itl_ms']:.3f}, output_throughput {r['output_throughput']:.1f}")


main()
