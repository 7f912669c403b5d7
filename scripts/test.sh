#!/usr/bin/env bash
# Runs every test of the workspace. Sets up what the tests need when it is missing:
# the thumbv7m-none-eabi target (firmware build), qemu-system-arm (firmware run), the
# PostgreSQL server (the runner's PostgreSQL tests start their own, host/tests/support/pg.rs),
# python3 and zstd (the independent references: host/tests/reference*.rs, tests/reference/) and
# util-linux `script` (a terminal for the progress-bar test, host/tests/fleet_output.rs). A test
# whose tool is missing fails; it never passes without having run.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup target list --installed 2>/dev/null | grep -qx thumbv7m-none-eabi; then
    echo "test.sh: adding the thumbv7m-none-eabi target" >&2
    rustup target add thumbv7m-none-eabi
fi
# apt_install PACKAGE: apt-get, as root or through sudo
apt_install() {
    echo "test.sh: installing $1" >&2
    if [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1") >&2
    else
        (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1") >&2
    fi
}
command -v qemu-system-arm >/dev/null 2>&1 || apt_install qemu-system-arm
command -v python3 >/dev/null 2>&1 || apt_install python3
command -v zstd >/dev/null 2>&1 || apt_install zstd
# `script` is util-linux's, packaged in bsdutils on Debian and Ubuntu
command -v script >/dev/null 2>&1 || apt_install bsdutils
# vLLM's own block-hash functions need cbor2 and xxhash, pinned (their encoders are the reference;
# host/tests/vllm_hash_vectors.rs runs tests/reference/vllm_block_hash.py and fails without them)
if ! python3 -c 'import cbor2, xxhash' >/dev/null 2>&1; then
    echo "test.sh: installing cbor2 and xxhash (pip)" >&2
    command -v pip3 >/dev/null 2>&1 || python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    python3 -m pip install --quiet cbor2==6.3.0 xxhash==4.1.0 >&2 \
        || python3 -m pip install --quiet --break-system-packages cbor2==6.3.0 xxhash==4.1.0 >&2
fi

pg_found() {
    ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 \
        || { command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; }
}
# as root the server runs as the `postgres` user (it refuses root), which the package creates
if ! pg_found || { [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; }; then
    apt_install postgresql
fi

# Every test's scratch files go under one directory of this run, removed when it ends (the tests
# name their files by process id and leave them behind; CI's disk filled once).
TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/brokerlab-test.XXXXXX")
# others may pass through it, as through /tmp: a test runs a command as `nobody` when root
chmod 755 "$TEST_TMP"
trap 'rm -rf "$TEST_TMP"' EXIT
export TMPDIR="$TEST_TMP"

cargo test --workspace "$@"

# The independent Python references check themselves against hand-computed cases (the P/D and
# offload-tier reference also against the batched reference with both features off).
for tool in python3 zstd; do
    command -v "$tool" >/dev/null 2>&1 || { echo "test.sh: $tool is required by tests/reference" >&2; exit 1; }
done
(cd tests/reference && python3 -m unittest test_deploy_model)
