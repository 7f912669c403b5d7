#!/usr/bin/env bash
# Builds the Docker image (Dockerfile) and smoke-tests it: the binary runs as a non-root user,
# `fleet run` runs a scenario, `fleet replay` a vendored trace, `fleet report` writes its page,
# `task run` completes a scripted task on SQLite, and `task worker` starts and, given SQLite
# instead of PostgreSQL, exits 2 naming what it needs. Needs a running Docker daemon (or
# DOCKER=podman); not part of CI.
#
# usage: scripts/docker_smoke.sh [IMAGE_TAG]
# BROKERLAB_PREBUILT=path/to/brokerlab: replace the build stage with that binary (Linux x86-64,
# glibc) for machines that cannot pull the Rust image; the runtime stage is the Dockerfile's own.
set -euo pipefail
cd "$(dirname "$0")/.."
docker=${DOCKER:-docker}
tag=${1:-brokerlab:smoke}

fail() { echo "docker_smoke: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -n "${BROKERLAB_PREBUILT:-}" ]; then
  # the same runtime stage over a build stage that only copies the given binary
  mkdir -p "$tmp/ctx"
  cp -r traces scenarios examples "$tmp/ctx/"
  cp "$BROKERLAB_PREBUILT" "$tmp/ctx/brokerlab"
  awk '/^FROM rust:/ { print "FROM debian:bookworm-slim AS builder"; print "COPY brokerlab /usr/local/bin/brokerlab"; skip = 1; next }
       /^FROM / { skip = 0 }
       !skip' Dockerfile > "$tmp/ctx/Dockerfile"
  grep -q '^FROM debian:bookworm-slim AS runtime' "$tmp/ctx/Dockerfile" || fail "the Dockerfile has no runtime stage"
  "$docker" build -t "$tag" "$tmp/ctx"
else
  "$docker" build -t "$tag" .
fi
run() { "$docker" run --rm "$tag" "$@"; }
# `run ... | grep -q` would end the pipe early and fail the run under pipefail: read it all first.
prints() { local pattern=$1; shift; local out; out=$(run "$@") && grep -q -- "$pattern" <<<"$out"; }

[ "$(run --version | cut -d' ' -f1)" = brokerlab ] || fail "--version does not print brokerlab"
uid=$("$docker" run --rm --entrypoint /usr/bin/id "$tag" -u)
[ "$uid" != 0 ] || fail "the image runs as root"

prints '"hit_rate"' fleet run scenarios/rag.toml --json -q || fail "fleet run printed no hit_rate"
prints '"hit_rate"' fleet replay --trace traces/conversation_trace.jsonl.zst --pods 8 --capacity 16384 \
  --router prefix-aware --json -q || fail "fleet replay printed no hit_rate"

mkdir -p "$tmp/out" && chmod 777 "$tmp/out"
"$docker" run --rm -v "$tmp/out:/home/brokerlab/out" "$tag" fleet report --shrink 40 --quiet --out out/report
for f in index.html summary.md experiments.json llmd_ramp_tok_s.png; do
  [ -s "$tmp/out/report/$f" ] || fail "fleet report wrote no $f"
done

prints completed task run examples/task-refund.toml --db /tmp/tasks.sqlite --world /tmp/world \
  || fail "task run did not complete"

# task worker needs PostgreSQL: given SQLite, exit 2 naming what it needs.
set +e
msg=$(run task worker --db /tmp/tasks.sqlite --exit-when-idle 2>&1); rc=$?
set -e
[ "$rc" = 2 ] || fail "task worker on SQLite: exit $rc, expected 2 ($msg)"
echo "$msg" | grep -q PostgreSQL || fail "task worker's error does not name PostgreSQL: $msg"

size=$("$docker" image inspect "$tag" --format '{{.Size}}')
echo "docker_smoke: ok ($tag, $((size / 1000000)) MB)"
