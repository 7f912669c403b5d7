#!/usr/bin/env bash
# Builds the Docker image (Dockerfile) and smoke-tests it: the binary runs as a non-root user,
# `fleet` runs a scenario and replays a vendored trace, `fleet report` writes its page,
# `task run` runs a scripted task on SQLite, and `task worker` starts (and, without PostgreSQL,
# exits 2 naming what it needs). Needs a running Docker daemon (or DOCKER=podman); not part of CI.
# usage: scripts/docker_smoke.sh [IMAGE_TAG]
set -euo pipefail
cd "$(dirname "$0")/.."
docker=${DOCKER:-docker}
tag=${1:-brokerlab:smoke}

"$docker" build -t "$tag" .
run() { "$docker" run --rm "$tag" "$@"; }

fail() { echo "docker_smoke: $*" >&2; exit 1; }

[ "$(run --version | head -1 | cut -d' ' -f1)" = brokerlab ] || fail "--version does not print brokerlab"
uid=$("$docker" run --rm --entrypoint /usr/bin/id "$tag" -u)
[ "$uid" != 0 ] || fail "the image runs as root"

run fleet run multi-tenant --requests 200 --json | grep -q '"hit_rate"' || fail "fleet run printed no hit_rate"
run fleet replay traces/conversation_trace.jsonl.zst --quiet --json | grep -q '"requests"' || fail "fleet replay"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
chmod 777 "$out"
"$docker" run --rm -v "$out:/home/brokerlab/out" "$tag" fleet report --shrink 40 --quiet --out out/report
for f in index.html summary.md experiments.json; do
  [ -s "$out/report/$f" ] || fail "fleet report wrote no $f"
done

"$docker" run --rm "$tag" task run examples/task-refund.toml --db /tmp/tasks.sqlite --world /tmp/world \
  | grep -q completed || fail "task run did not complete"

# task worker needs PostgreSQL: without it, exit 2 naming the database it was given.
set +e
msg=$(run task worker --db /tmp/tasks.sqlite --exit-when-idle 2>&1); rc=$?
set -e
[ "$rc" = 2 ] || fail "task worker on SQLite: exit $rc, expected 2 ($msg)"
echo "$msg" | grep -qi postgres || fail "task worker's error does not name PostgreSQL: $msg"

size=$("$docker" image inspect "$tag" --format '{{.Size}}')
echo "docker_smoke: ok ($tag, $((size / 1000000)) MB)"
