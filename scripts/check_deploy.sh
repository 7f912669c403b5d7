#!/usr/bin/env bash
# Checks the deployment files in deploy/ as far as a machine without systemd running and without
# a Kubernetes cluster allows, and checks that each checker can fail (a broken copy must be
# refused). Nothing is skipped: a missing checker is installed (systemd from Debian's packages,
# kubernetes-validate from PyPI into a venv under target/), or the script fails.
#
#   systemd: `systemd-analyze verify` on a copy whose ExecStart is this build's binary (verify
#            needs an executable there) and whose EnvironmentFile is optional; it returns 0 on
#            warnings (unknown keys, bad values), so any output fails the check. Then
#            `systemd-analyze security --offline=true --threshold=$SECURITY_MAX` (the threshold is
#            in tenths of the printed exposure level: 30 = exposure 3.0; systemd 252).
#   Kubernetes: `kubernetes-validate --strict -k $K8S_VERSION` (the OpenAPI schemas bundled in the
#            package: offline; --strict refuses unknown fields). `kubectl apply --dry-run=client`
#            needs a cluster's API server (it downloads the OpenAPI document), so it is not used.
#
# Usage: scripts/check_deploy.sh [BINARY]   (default $CARGO_TARGET_DIR or target, /debug/brokerlab, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION=1.32
SECURITY_MAX=30
KV_VERSION=1.37.0
unit=deploy/systemd/brokerlab-worker.service
deployment=deploy/kubernetes/worker-deployment.yaml
bin=${1:-${CARGO_TARGET_DIR:-target}/debug/brokerlab}
[ -x "$bin" ] || cargo build -q -p brokerlab --bin brokerlab
bin=$(realpath "$bin")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_deploy: FAILED: $*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- systemd ---------------------------------------------------------------------------------
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "check_deploy: installing systemd (for systemd-analyze)" >&2
    as_root apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >&2
fi
command -v systemd-analyze >/dev/null 2>&1 || fail "systemd-analyze is not available"

verify_unit() { # $1: unit file; prints what systemd-analyze said; returns 1 on rc != 0 or any output
    local out rc=0
    out=$(systemd-analyze verify "$1" 2>&1) || rc=$?
    [ -n "$out" ] && echo "$out"
    [ "$rc" = 0 ] && [ -z "$out" ]
}
copy="$work/brokerlab-worker.service"
sed -e "s|^ExecStart=/usr/local/bin/brokerlab |ExecStart=$bin |" \
    -e "s|^EnvironmentFile=/|EnvironmentFile=-/|" "$unit" > "$copy"
grep -q "^ExecStart=$bin " "$copy" || fail "$unit: no ExecStart=/usr/local/bin/brokerlab line to check"
verify_unit "$copy" || fail "$unit: systemd-analyze verify"
echo "check_deploy: $unit: systemd-analyze verify: no warning"
score=$(systemd-analyze security --offline=true "$copy" 2>/dev/null | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || fail "$unit: systemd-analyze security printed no exposure level"
systemd-analyze security --offline=true --threshold="$SECURITY_MAX" "$copy" >/dev/null 2>&1 \
    || fail "$unit: exposure $score is above $SECURITY_MAX tenths"
echo "check_deploy: $unit: systemd-analyze security --offline: exposure $score (at most $SECURITY_MAX tenths)"
# the checker can fail: a misspelt key and a bad value are refused
broken="$work/broken.service"
sed -e 's/^KillMode=mixed/KilMode=mixed/' -e 's/^TimeoutStopSec=300/TimeoutStopSec=five minutes/' "$copy" > "$broken"
if verify_unit "$broken" >/dev/null; then fail "systemd-analyze verify accepted a misspelt key"; fi
echo "check_deploy: a broken unit is refused (the check can fail)"

# --- Kubernetes ------------------------------------------------------------------------------
venv=target/deploy-check-venv
kv="$venv/bin/kubernetes-validate"
if [ ! -x "$kv" ] || ! "$kv" --version 2>/dev/null | grep -q "$KV_VERSION"; then
    echo "check_deploy: installing kubernetes-validate $KV_VERSION from PyPI into $venv" >&2
    python3 -m venv "$venv" >&2 || fail "python3 -m venv"
    "$venv/bin/pip" install -q "kubernetes-validate==$KV_VERSION" >&2 || fail "pip install kubernetes-validate"
fi
"$kv" --strict -k "$K8S_VERSION" "$deployment" || fail "$deployment: kubernetes-validate --strict"
echo "check_deploy: $deployment: kubernetes-validate --strict -k $K8S_VERSION: passed"
badk="$work/broken.yaml"
sed -e 's/terminationGracePeriodSeconds:/terminationGracePeriodSecs:/' "$deployment" > "$badk"
if "$kv" --strict -k "$K8S_VERSION" "$badk" >/dev/null 2>&1; then fail "kubernetes-validate accepted a misspelt field"; fi
echo "check_deploy: a broken Deployment is refused (the check can fail)"
echo "check_deploy: ok"
