#!/usr/bin/env bash
# Byte-identity check of every result the fleet simulator writes, for refactors that must not
# change a single output.
#
#   scripts/identity.sh run BIN DIR [--fw]   write BIN's outputs into DIR (fresh); with --fw also
#                                            build and run the firmware from this checkout
#                                            (`cargo xtask fw`) and keep its computed figures
#   scripts/identity.sh diff BASE NEW        compare two such directories: prints "identical",
#                                            or every differing file and a diff excerpt (exit 1)
#   scripts/identity.sh check BIN BASE [--fw] run into a temporary directory, then diff
#   scripts/identity.sh normalize DIR        normalize a directory an older version wrote
#
# What is written (each file holds one command's stdout, its stderr and its exit status, or the
# files the command wrote):
#   report/       `fleet report --no-date`, full size (every page, CSV, JSON, SVG and PNG)
#   replay/       `fleet replay --json` of the first LINES lines of both vendored traces, every
#                 named router under both engines (the batched runs also with --outcomes), on
#                 pods small enough to preempt; FIFO variants (stale index in requests and in
#                 time, speculative entries, global index, CPU tier, global cache, autoscaling,
#                 in-order touches, alpha); the bailian, dynamo, tokens and 16-token Mooncake
#                 formats on small generated inputs, both engines; tables without --json too
#   run/          `fleet run --json` of every shipped scenario under both engines (a shrunk copy)
#   sweep/        `fleet sweep` of every --param, both engines (CSV, JSON, plots), two shards
#                 and their `fleet merge`
#   keys/         `fleet keys` of the tokens trace, both hashes; `fleet gen-trace`
#   audit/        `audit --json --no-firmware` of the shipped scenarios
#   errors/       exit status and stderr of bad inputs the engines reject
#   firmware/     (--fw) every metric the firmware computes under QEMU (`cargo xtask fw`, which
#                 also writes target/firmware/figures.json); sizes and stack depths left out
# The git commit embedded in provenance is replaced by COMMIT (it differs between any two
# builds); dates are off (--no-date). Needs python3 (input generation), zstd.
set -euo pipefail

LINES=${IDENTITY_LINES:-2000}
HERE=${IDENTITY_REPO:-$(cd "$(dirname "$0")/.." && pwd)}

die() { echo "identity.sh: $*" >&2; exit 2; }

# cmd NAME ARGS...: runs BIN ARGS, keeps stdout, stderr and the exit status in NAME.{out,err,rc}
cmd() {
    local name=$1
    shift
    mkdir -p "$(dirname "$WORK/o/$name")"
    local rc=0
    (cd "$WORK" && "$BIN" "$@") >"$WORK/o/$name.out" 2>"$WORK/o/$name.err" || rc=$?
    echo "$rc" >"$WORK/o/$name.rc"
}

gen_inputs() {
    local t
    for t in conversation synthetic; do
        # head closes the pipe early: zstd's SIGPIPE is expected
        (set +o pipefail; zstd -dc "$HERE/traces/${t}_trace.jsonl.zst" | head -n "$LINES" >"$WORK/$t.jsonl")
    done
    # A shrunk copy of every shipped scenario (requests / 8, stages / 8) for `fleet run` and the
    # sweeps.
    mkdir -p "$WORK/scenarios"
    python3 - "$HERE/scenarios" "$WORK/scenarios" <<'PY'
import pathlib, re, sys
src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for f in sorted(src.glob("*.toml")):
    t = f.read_text()
    t = re.sub(r"(?m)^requests = (\d+)", lambda m: f"requests = {max(int(m.group(1)) // 8, 50)}", t)
    t = re.sub(r"duration_s = (\d+(?:\.\d+)?)", lambda m: f"duration_s = {float(m.group(1)) / 8}", t)
    (dst / f.name).write_text(t)
PY
    (cd "$WORK" && "$BIN" fleet gen-trace scenarios/rag.toml -o gen16.jsonl) 2>/dev/null
    # a custom pipeline (`custom` in the outputs)
    printf 'filters = ["prefix-cache-affinity"]\npicker = "max-score"\n[[scorers]]\ntype = "token-load"\nweight = 1\n[[scorers]]\ntype = "precise-prefix-cache"\nweight = 2\n[params]\nseed = 9\nprefix_source = "precise"\n' >"$WORK/router.toml"
    # bailian, dynamo and tokens traces, deterministic, from the generated 16-token trace
    python3 - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
rows = [json.loads(l) for l in open(f"{w}/gen16.jsonl")][:400]
kinds = ["text", "search", "image", "file"]
with open(f"{w}/bailian.jsonl", "w") as f:
    for i, r in enumerate(rows):
        parent = i - 7 if i >= 7 and i % 3 else -1
        f.write(json.dumps({"chat_id": i, "parent_chat_id": parent, "timestamp": r["timestamp"] / 1000,
                            "input_length": r["input_length"], "output_length": r["output_length"],
                            "type": kinds[i % 4], "turn": 1 + i % 5, "hash_ids": r["hash_ids"]}) + "\n")
with open(f"{w}/dynamo.jsonl", "w") as f:
    for i, r in enumerate(rows):
        d = {"session_id": f"s{i % 37}", "input_length": r["input_length"],
             "output_length": r["output_length"], "hash_ids": r["hash_ids"]}
        if i < 37:
            d["timestamp"] = r["timestamp"]
        else:
            d["delay"] = (i * 7) % 500
        f.write(json.dumps(d) + "\n")
with open(f"{w}/tokens.jsonl", "w") as f:
    for i in range(300):
        tenant, n = i % 5, 40 + (i * 37) % 700
        toks = [(tenant * 1000 + j) % 50000 for j in range(min(n, 400))] + [(i * 7919 + j) % 50000 for j in range(max(0, n - 400))]
        f.write(json.dumps({"timestamp": i * 150, "token_ids": toks, "output_length": (i * 13) % 90}) + "\n")
PY
}

run_report() {
    cmd report/stdout fleet report --no-date -q --threads 2 --out o/report/files
}

# The named routers (every --router value).
ROUTERS="round-robin least-loaded prefix-aware llm-d-precise llm-d-approximate llm-d-load random gie-default llm-d-affinity dynamo-kv sglang-cache-aware vllm-loadaware"

run_replays() {
    local t args
    for t in conversation synthetic; do
        if [ "$t" = conversation ]; then
            args="--pods 4 --capacity 8000"
            bargs="--max-num-batched-tokens 8192"
        else
            args="--pods 2 --capacity 9000"
            bargs="--max-num-batched-tokens 2048 --max-num-seqs 64"
        fi
        for r in $ROUTERS; do
            # --alpha is prefix-aware's load penalty; every other router refuses it (exit 2), so
            # those run with the default (their outputs' `alpha` field reads 1, not 4)
            alpha=""
            [ "$r" = prefix-aware ] && alpha="--alpha 4"
            # shellcheck disable=SC2086
            cmd "replay/$t/fifo-$r" fleet replay --no-date --json -q --trace "$t.jsonl" $args --router "$r" $alpha
            # shellcheck disable=SC2086
            cmd "replay/$t/batched-$r" fleet replay --no-date --json -q --trace "$t.jsonl" $args --router "$r" $alpha \
                --engine batched $bargs --outcomes "o/replay/$t/batched-$r.outcomes"
        done
        # FIFO features, one at a time (8 pods: room to scale)
        local f="--pods 8 --capacity 2000 --router prefix-aware"
        # shellcheck disable=SC2086
        {
            cmd "replay/$t/fifo-stale" fleet replay --no-date --json -q --trace "$t.jsonl" $f --stale 8
            cmd "replay/$t/fifo-stale-global" fleet replay --no-date --json -q --trace "$t.jsonl" $f --stale 8 --index global
            cmd "replay/$t/fifo-event-delay" fleet replay --no-date --json -q --trace "$t.jsonl" $f --event-delay-ms 2000
            cmd "replay/$t/fifo-speculative" fleet replay --no-date --json -q --trace "$t.jsonl" $f --event-delay-ms 500 --speculative-ttl-ms 3000
            cmd "replay/$t/fifo-precise-delay" fleet replay --no-date --json -q --trace "$t.jsonl" --pods 8 --capacity 2000 --router llm-d-precise --event-delay-ms 1000 --speculative-ttl-ms 2000
            cmd "replay/$t/fifo-cpu" fleet replay --no-date --json -q --trace "$t.jsonl" $f --cpu-capacity 3000 --t-cpu-ns 4000
            cmd "replay/$t/fifo-global-cache" fleet replay --no-date --json -q --trace "$t.jsonl" $f --cache global
            cmd "replay/$t/fifo-global-cache-ll" fleet replay --no-date --json -q --trace "$t.jsonl" --pods 8 --capacity 2000 --router least-loaded --cache global
            cmd "replay/$t/fifo-scale" fleet replay --no-date --json -q --trace "$t.jsonl" $f --scale-min 2 --scale-interval-s 5 --scale-up-queue 1 --scale-startup-s 3
            cmd "replay/$t/fifo-scale-rr" fleet replay --no-date --json -q --trace "$t.jsonl" --pods 8 --capacity 2000 --router round-robin --scale-min 1 --scale-interval-s 5 --scale-up-queue 1 --scale-startup-s 0
            cmd "replay/$t/fifo-in-order" fleet replay --no-date --json -q --trace "$t.jsonl" $f --order in-order
            cmd "replay/$t/fifo-alpha-frac" fleet replay --no-date --json -q --trace "$t.jsonl" $f --alpha 0.37 --t-decode-ns 2000
            cmd "replay/$t/fifo-custom" fleet replay --no-date --json -q --trace "$t.jsonl" $args --router-config router.toml
            cmd "replay/$t/batched-custom" fleet replay --no-date --json -q --trace "$t.jsonl" $args --router-config router.toml --engine batched $bargs
            cmd "replay/$t/fifo-table" fleet replay --no-date -q --trace "$t.jsonl" $f --cpu-capacity 100 --scale-min 2
            cmd "replay/$t/batched-table" fleet replay --no-date -q --trace "$t.jsonl" $args --router prefix-aware --engine batched $bargs
            cmd "replay/$t/batched-profiles" fleet replay --no-date --json -q --trace "$t.jsonl" $args --router least-loaded --engine batched --profile llama-3.1-8b-h100 --t-kv-token-ns 3 --max-num-seqs 16 --max-num-batched-tokens 1024
            cmd "replay/$t/batched-seed" fleet replay --no-date --json -q --trace "$t.jsonl" $args --router prefix-aware --engine batched --profile seed
        }
    done
    # The other formats, both engines
    local fmt file extra
    for fmt in bailian dynamo tokens mooncake16; do
        case $fmt in
            bailian) file=bailian.jsonl extra="--format bailian" ;;
            dynamo) file=dynamo.jsonl extra="--format dynamo --trace-block-size 16" ;;
            tokens) file=tokens.jsonl extra="--format tokens" ;;
            mooncake16) file=gen16.jsonl extra="--trace-block-size 16" ;;
        esac
        for r in round-robin prefix-aware llm-d-precise dynamo-kv; do
            # shellcheck disable=SC2086
            cmd "replay/$fmt/fifo-$r" fleet replay --no-date --json -q --trace "$file" $extra --pods 4 --capacity 300 --router "$r"
            # shellcheck disable=SC2086
            cmd "replay/$fmt/batched-$r" fleet replay --no-date --json -q --trace "$file" $extra --pods 4 --capacity 300 --router "$r" \
                --engine batched --max-num-batched-tokens 512 --max-num-seqs 16 --outcomes "o/replay/$fmt/batched-$r.outcomes"
        done
        # shellcheck disable=SC2086
        cmd "replay/$fmt/fifo-table" fleet replay --no-date -q --trace "$file" $extra --pods 4 --capacity 300 --router prefix-aware
        # shellcheck disable=SC2086
        cmd "replay/$fmt/batched-table" fleet replay --no-date -q --trace "$file" $extra --pods 4 --capacity 300 --router prefix-aware --engine batched
    done
    cmd replay/tokens/vllm-hash fleet replay --no-date --json -q --trace tokens.jsonl --format tokens --hash vllm-sha256-cbor --hash-seed 7 --pods 3 --capacity 200 --router prefix-aware
    cmd replay/tokens/vllm-hash-batched fleet replay --no-date --json -q --trace tokens.jsonl --format tokens --hash vllm-sha256-cbor --pods 3 --capacity 200 --router prefix-aware --engine batched
}

run_scenarios() {
    local s n
    for s in "$WORK"/scenarios/*.toml; do
        n=$(basename "$s" .toml)
        cmd "run/$n-fifo" fleet run --no-date --json -q "scenarios/$n.toml" --engine fifo
        cmd "run/$n-batched" fleet run --no-date --json -q "scenarios/$n.toml" --engine batched --outcomes "o/run/$n-batched.outcomes"
        cmd "run/$n-table" fleet run --no-date -q "scenarios/$n.toml"
    done
    cmd run/llm-d-dynamo fleet run --no-date --json -q scenarios/llm-d.toml --router dynamo-kv
}

run_sweeps() {
    local d=o/sweep
    local sc=scenarios/rag.toml
    cmd sweep/capacity-fifo fleet sweep "$sc" --no-date -q --threads 2 --param capacity --from 100 --to fit --steps 4 --out "$d/capacity-fifo"
    cmd sweep/capacity-batched fleet sweep "$sc" --no-date -q --threads 2 --param capacity --values 600,1200,4000 --engine batched --max-num-seqs 32 --out "$d/capacity-batched"
    cmd sweep/alpha-fifo fleet sweep "$sc" --no-date -q --threads 2 --param alpha --from 0 --to 8 --steps 3 --out "$d/alpha-fifo"
    cmd sweep/alpha-batched fleet sweep "$sc" --no-date -q --threads 2 --param alpha --values 0,2 --engine batched --out "$d/alpha-batched"
    cmd sweep/stale-fifo fleet sweep "$sc" --no-date -q --threads 2 --param stale --values 0,4,32 --out "$d/stale-fifo"
    cmd sweep/pods-fifo fleet sweep "$sc" --no-date -q --threads 2 --param pods --values 2,5 --out "$d/pods-fifo"
    cmd sweep/pods-batched fleet sweep "$sc" --no-date -q --threads 2 --param pods --values 2,5 --engine batched --out "$d/pods-batched"
    cmd sweep/rate-fifo fleet sweep "$sc" --no-date -q --threads 2 --param rate --values 5,40 --out "$d/rate-fifo"
    cmd sweep/rate-batched fleet sweep "$sc" --no-date -q --threads 2 --param rate --values 5,40 --engine batched --out "$d/rate-batched"
    local e
    for e in fifo batched; do
        cmd "sweep/shard0-$e" fleet sweep "$sc" --no-date -q --threads 1 --param capacity --values 300,900,2700 --engine "$e" --shard 0/2 --out "$d/shard0-$e"
        cmd "sweep/shard1-$e" fleet sweep "$sc" --no-date -q --threads 1 --param capacity --values 300,900,2700 --engine "$e" --shard 1/2 --out "$d/shard1-$e"
        cmd "sweep/merge-$e" fleet merge "$d/shard0-$e" "$d/shard1-$e" --out "$d/merged-$e"
    done
}

run_keys_audit() {
    cmd keys/brokerlab fleet keys --trace tokens.jsonl
    cmd keys/vllm fleet keys --trace tokens.jsonl --hash vllm-sha256-cbor --block-size 16
    cmd keys/vllm-64 fleet keys --trace tokens.jsonl --hash vllm-sha256-cbor --block-size 64 --hash-seed abc
    cp "$WORK/gen16.jsonl" "$WORK/o/keys/gen-trace-rag.jsonl"
    local s
    for s in multi-tenant alpha llm-d rag; do
        cmd "audit/$s" audit --json --no-firmware "$s"
    done
}

run_errors() {
    printf '{"timestamp": 0, "input_length": 32, "output_length": 1, "hash_ids": [1, 2]}\n{"timestamp": 1, "input_length": 0, "output_length": 3, "hash_ids": []}\n' >"$WORK/empty-prompt.jsonl"
    printf '{"timestamp": 0, "input_length": 40, "output_length": 10, "hash_ids": [1, 2, 3]}\n' >"$WORK/too-long.jsonl"
    printf '{"timestamp": 5, "input_length": 32, "output_length": 1, "hash_ids": [1, 2]}\n{"timestamp": 1, "input_length": 32, "output_length": 1, "hash_ids": [1, 2]}\n' >"$WORK/out-of-order.jsonl"
    local b="--trace-block-size 16 --pods 1 --capacity 3 --router round-robin"
    # shellcheck disable=SC2086
    {
        cmd errors/empty-prompt fleet replay --no-date -q --trace empty-prompt.jsonl $b --engine batched
        cmd errors/too-long fleet replay --no-date -q --trace too-long.jsonl $b --engine batched
        cmd errors/out-of-order-fifo fleet replay --no-date -q --trace out-of-order.jsonl $b
        cmd errors/out-of-order-batched fleet replay --no-date -q --trace out-of-order.jsonl $b --engine batched
        cmd errors/stale-batched fleet replay --no-date -q --trace too-long.jsonl $b --engine batched --stale 2
        # (--cpu-capacity with --engine batched is the offload tier now, no longer refused: its
        # runs are checked by host/tests/reference_deploy.rs and deploy_qualitative.rs)
        cmd errors/cache-batched fleet replay --no-date -q --trace too-long.jsonl $b --engine batched --cache global
        cmd errors/index-batched fleet replay --no-date -q --trace too-long.jsonl $b --engine batched --index global
        cmd errors/scale-batched fleet replay --no-date -q --trace too-long.jsonl $b --engine batched --scale-min 1
        cmd errors/event-batched fleet replay --no-date -q --trace too-long.jsonl $b --engine batched --event-delay-ms 3
        cmd errors/profile fleet replay --no-date -q --trace too-long.jsonl $b --engine batched --profile nope
        cmd errors/seqs fleet replay --no-date -q --trace too-long.jsonl $b --engine batched --max-num-seqs 0
        cmd errors/overhead fleet replay --no-date -q --trace too-long.jsonl $b --engine batched --t-overhead-ns 0
        cmd errors/fifo-profile fleet replay --no-date -q --trace too-long.jsonl $b --profile seed
        cmd errors/fifo-outcomes fleet replay --no-date -q --trace too-long.jsonl $b --outcomes x.jsonl
        cmd errors/stale-event fleet replay --no-date -q --trace too-long.jsonl $b --stale 2 --event-delay-ms 3
        # (--pods above the limit: the message names the limit, which moved from 64 to 1,024 pods;
        # host/tests/fleet_pods.rs checks the refusal on both engines)
        cmd errors/sweep-param fleet sweep scenarios/rag.toml -q --param nope --values 1 --out sw
        cmd errors/sweep-stale-batched fleet sweep scenarios/rag.toml -q --param stale --values 1 --engine batched --out sw
    }
}

run_firmware() {
    mkdir -p "$WORK/o/firmware"
    # The firmware's computed figures (every metric frame, decoded); sizes and stack depths
    # (`BL fw` frames) are left out: they change with any code change.
    local log="$WORK/fw.log"
    (cd "$HERE" && cargo xtask fw) >"$log" 2>&1 || die "cargo xtask fw failed: $(tail -5 "$log")"
    grep -E '^ *BL (m|end) ' "$log" | sed -E 's/^ +//' >"$WORK/o/firmware/metrics.txt"
    [ -s "$WORK/o/firmware/metrics.txt" ] || die "cargo xtask fw printed no metric"
}

normalize() {
    # The build's git commit differs between any two builds.
    grep -rlZ -e 'git.commit' "$OUT" 2>/dev/null \
        | xargs -0 -r sed -i -E 's/(git_commit": "|git commit )([0-9a-f]{40}|unknown)/\1COMMIT/g' || true
    # Not results: a shard's sweep id digests the Rust Debug text of the points' configurations
    # (it changes with any type's shape; the points' own digest, points_sha256, stays), and the
    # audit's "Fleet value (this host)" row is size_of of the fleet type (it changes with any
    # field; the buffers' rows are the model's).
    find "$OUT" -name partial.json -print0 | xargs -0 -r sed -i -E 's/("sweep": ?")[0-9a-f]{64}"/\1SWEEP-ID"/'
    python3 - "$OUT"/audit/*.out <<'PY2'
import json, sys
for p in sys.argv[1:]:
    try:
        d = json.load(open(p))
    except ValueError:
        continue
    rows = d.get("rows", [])
    host = [r for r in rows if str(r.get("structure", "")).startswith("Fleet value")]
    for r in host:
        rows.remove(r)
        d["total_bytes"] -= r["bytes"]
    json.dump(d, open(p, "w"), indent=2, sort_keys=True)
    open(p, "a").write("\n")
PY2
}

do_run() {
    BIN=$(realpath "$1")
    OUT=$2
    local fw=${3:-}
    [ -x "$BIN" ] || die "$BIN: not an executable"
    rm -rf "$OUT"
    mkdir -p "$OUT"
    OUT=$(realpath "$OUT")
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    mkdir -p "$WORK/o"
    gen_inputs
    local t0=$SECONDS
    run_report
    run_replays
    run_scenarios
    run_sweeps
    run_keys_audit
    run_errors
    if [ "$fw" = --fw ]; then run_firmware; fi
    cp -r "$WORK/o/." "$OUT/"
    normalize
    echo "identity.sh: $(find "$OUT" -type f | wc -l) files in $OUT ($((SECONDS - t0)) s)" >&2
}

do_diff() {
    local a=$1 b=$2
    [ -d "$a" ] && [ -d "$b" ] || die "diff: two directories expected"
    if diff -rq "$a" "$b" >/dev/null; then
        echo "identical ($(find "$a" -type f | wc -l) files)"
        return 0
    fi
    diff -rq "$a" "$b" | sed 's/^/  /'
    diff -r "$a" "$b" --exclude='*.png' | head -n 60
    echo "DIFFERENT"
    return 1
}

case ${1:-} in
    run)
        [ $# -ge 3 ] || die "usage: $0 run BIN DIR [--fw]"
        do_run "$2" "$3" "${4:-}"
        ;;
    diff)
        [ $# -eq 3 ] || die "usage: $0 diff BASE NEW"
        do_diff "$2" "$3"
        ;;
    normalize)
        # a directory written by an older version of this script, normalized as this one does
        [ $# -eq 2 ] || die "usage: $0 normalize DIR"
        OUT=$(realpath "$2")
        normalize
        ;;
    check)
        [ $# -ge 3 ] || die "usage: $0 check BIN BASE [--fw]"
        new=$(mktemp -d)/new
        do_run "$2" "$new" "${4:-}"
        do_diff "$3" "$new"
        ;;
    *)
        die "usage: $0 run BIN DIR [--fw] | diff BASE NEW | check BIN BASE [--fw] | normalize DIR"
        ;;
esac
