#!/usr/bin/env python3
"""Validates a brokerlab `--report-llmd` file against llm-d-benchmark's benchmark report schema v0.1.

Usage: read_llmd_report.py REPORT.json [OUTCOMES.jsonl]

The schema is llm-d/llm-d-benchmark `workload/report/benchmark_report_v0_1.py` @ 4fb7913b (pydantic
`BenchmarkReportV01`). Its structure is restated below with the standard library only (no pydantic):
required keys, types, the enums (`WorkloadGenerator`, `Units`, `HostType`) and the unit checks of each
`check_units` validator, plus `extra` keys refused where brokerlab writes none (a typo fails). The file
holds one report or (fleet compare) a list of reports; each is checked. With the per-request outcomes
(`--outcomes`, one report), also recomputes `requests.total` and the TTFT and request-latency means and
p50/p90 as numpy does, and compares.

Exit 0 and one line per report when valid; exit 1 with `FAIL: path: why` otherwise.
"""
import json
import math
import sys

WORKLOAD_GENERATORS = {"guidellm", "inferencemax", "inference-perf", "vllm-benchmark", "nop"}
UNITS = {"count", "percent", "fraction", "ms", "s", "MB", "GB", "TB", "MiB", "GiB", "TiB", "Mbit/s", "Gbit/s",
         "Tbit/s", "GiB/s", "MB/s", "GB/s", "TB/s", "ms/token", "s/token", "Watts"}
QUANTITY, TIME, GEN_LATENCY = {"count"}, {"ms", "s"}, {"ms/token", "s/token"}
STAT_KEYS = {"units", "mean", "mode", "stddev", "min", "p0p1", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95",
             "p99", "p99p9", "max"}


def fail(path, why):
    print(f"FAIL: {path}: {why}")
    sys.exit(1)


def obj(v, path, required=(), optional=(), extra_ok=False):
    if not isinstance(v, dict):
        fail(path, f"expected an object, got {type(v).__name__}")
    for k in required:
        if k not in v:
            fail(path, f"missing required key `{k}`")
    if not extra_ok:
        for k in v:
            if k not in required and k not in optional:
                fail(path, f"key `{k}` is not in the schema here")
    return v


def number(v, path, integer=False):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        fail(path, f"expected a number, got {v!r}")
    if integer and not isinstance(v, int):
        fail(path, f"expected an integer, got {v!r}")
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        fail(path, f"{v} is not finite")
    if v < 0:
        fail(path, f"{v} is negative")
    return v


def string(v, path):
    if not isinstance(v, str):
        fail(path, f"expected a string, got {v!r}")
    return v


def statistics(v, path, allowed_units):
    obj(v, path, required=("units", "mean"), optional=STAT_KEYS)
    u = string(v["units"], f"{path}.units")
    if u not in UNITS:
        fail(f"{path}.units", f"{u!r} is not one of the schema's Units")
    if u not in allowed_units:
        fail(f"{path}.units", f"invalid units {u!r}, must be one of: {' '.join(sorted(allowed_units))}")
    for k in STAT_KEYS - {"units"}:
        if k in v:
            number(v[k], f"{path}.{k}")
    # percentiles in order where given
    order = [k for k in ["min", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "max"] if k in v]
    for a, b in zip(order, order[1:]):
        if v[a] > v[b] + 1e-9:
            fail(path, f"{a} {v[a]} > {b} {v[b]}")
    return v


def check(r, path):
    obj(r, path, required=("version", "scenario", "metrics"), optional=("metadata",))
    if r["version"] != "0.1":
        fail(f"{path}.version", f'invalid version "{r["version"]}", must be "0.1"')
    sc = obj(r["scenario"], f"{path}.scenario", required=("model", "load"),
             optional=("description", "host", "platform", "metadata"))
    obj(sc["model"], f"{path}.scenario.model", required=("name",), optional=("quantization", "adapters", "metadata"))
    string(sc["model"]["name"], f"{path}.scenario.model.name")
    load = obj(sc["load"], f"{path}.scenario.load", required=("name",), optional=("type", "args", "metadata"))
    if load["name"] not in WORKLOAD_GENERATORS:
        fail(f"{path}.scenario.load.name", f"{load['name']!r} is not a WorkloadGenerator")
    if "platform" in sc:
        p = obj(sc["platform"], f"{path}.scenario.platform", required=("engine",), optional=("metadata",))
        if not isinstance(p["engine"], list) or not p["engine"]:
            fail(f"{path}.scenario.platform.engine", "expected a non-empty list")
        for i, e in enumerate(p["engine"]):
            obj(e, f"{path}.scenario.platform.engine[{i}]", required=("name",), optional=("version", "args", "metadata"))
    if "host" in sc:
        fail(f"{path}.scenario.host", "brokerlab writes no host (a simulation has no accelerator)")

    m = obj(r["metrics"], f"{path}.metrics", required=("time", "requests", "latency", "throughput"),
            optional=("service", "resources", "description", "metadata"))
    t = obj(m["time"], f"{path}.metrics.time", required=("duration",), optional=("start", "stop", "metadata"))
    number(t["duration"], f"{path}.metrics.time.duration")
    q = obj(m["requests"], f"{path}.metrics.requests", required=("total", "input_length", "output_length"),
            optional=("failures", "incomplete"))
    for k in ["total", "failures", "incomplete"]:
        if k in q:
            number(q[k], f"{path}.metrics.requests.{k}", integer=True)
    statistics(q["input_length"], f"{path}.metrics.requests.input_length", QUANTITY)
    statistics(q["output_length"], f"{path}.metrics.requests.output_length", QUANTITY)
    lat = obj(m["latency"], f"{path}.metrics.latency", required=("time_to_first_token",),
              optional=("normalized_time_per_output_token", "time_per_output_token", "inter_token_latency",
                        "request_latency"))
    for k, units in [("time_to_first_token", TIME), ("request_latency", TIME),
                     ("normalized_time_per_output_token", GEN_LATENCY), ("time_per_output_token", GEN_LATENCY),
                     ("inter_token_latency", GEN_LATENCY)]:
        if k in lat:
            statistics(lat[k], f"{path}.metrics.latency.{k}", units)
    th = obj(m["throughput"], f"{path}.metrics.throughput", required=("total_tokens_per_sec",),
             optional=("input_tokens_per_sec", "output_tokens_per_sec", "requests_per_sec"))
    for k, v in th.items():
        number(v, f"{path}.metrics.throughput.{k}")
    if "service" in m:
        s = obj(m["service"], f"{path}.metrics.service", optional=("batch_size", "queue_size", "kv_cache_size"))
        for k, v in s.items():
            statistics(v, f"{path}.metrics.service.{k}", QUANTITY)
    # arithmetic the schema implies
    d = t["duration"]
    if d > 0 and "input_tokens_per_sec" in th and "output_tokens_per_sec" in th:
        total = th["input_tokens_per_sec"] + th["output_tokens_per_sec"]
        if abs(total - th["total_tokens_per_sec"]) > 1e-6 * max(1.0, total):
            fail(f"{path}.metrics.throughput", "total_tokens_per_sec != input + output")
    return r


def percentile(v, p):
    rank = p / 100 * (len(v) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def compare_outcomes(r, path):
    lines = [json.loads(l) for l in open(path) if l.strip()]
    done = [l for l in lines if not l.get("aborted")]
    q = r["metrics"]["requests"]
    if q["total"] != len(lines):
        fail("metrics.requests.total", f"{q['total']} != {len(lines)} outcome lines")
    if q.get("incomplete", 0) != len(lines) - len(done):
        fail("metrics.requests.incomplete", f"{q.get('incomplete')} != {len(lines) - len(done)} aborted lines")
    lat = r["metrics"]["latency"]
    for key, field in [("time_to_first_token", "ttft_ns"), ("request_latency", "e2e_ns")]:
        v = sorted(l[field] / 1e6 for l in done)
        want = {"mean": sum(v) / len(v), "p50": percentile(v, 50), "p90": percentile(v, 90)}
        for k, w in want.items():
            got = lat[key][k]
            if abs(got - w) > 1e-9 * max(1.0, abs(w)):
                fail(f"metrics.latency.{key}.{k}", f"{got} != {w} recomputed from the outcomes")


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        sys.exit(2)
    data = json.load(open(sys.argv[1]))
    reports = data if isinstance(data, list) else [data]
    if not reports:
        fail("$", "no report")
    for i, r in enumerate(reports):
        path = f"$[{i}]" if isinstance(data, list) else "$"
        check(r, path)
        m = r["metrics"]
        print(f"{path}: v{r['version']} {r['scenario']['load']['name']} requests {m['requests']['total']} "
              f"ttft_mean_ms {m['latency']['time_to_first_token']['mean']:.3f} "
              f"tok/s {m['throughput']['total_tokens_per_sec']:.1f}")
    if len(sys.argv) == 3:
        if len(reports) != 1:
            fail("$", "outcomes compare with one report only")
        compare_outcomes(reports[0], sys.argv[2])
        print("outcomes: match")


if __name__ == "__main__":
    main()
