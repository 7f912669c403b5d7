#!/usr/bin/env bash
# Runs every test of the workspace. Sets up what the tests need when it is missing:
# the thumbv7m-none-eabi target (firmware build), qemu-system-arm (firmware run) and the
# PostgreSQL server (the runner's PostgreSQL tests start their own, host/tests/support/pg.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup target list --installed 2>/dev/null | grep -qx thumbv7m-none-eabi; then
    echo "test.sh: adding the thumbv7m-none-eabi target" >&2
    rustup target add thumbv7m-none-eabi
fi
if ! command -v qemu-system-arm >/dev/null 2>&1; then
    echo "test.sh: installing qemu-system-arm" >&2
    if [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && apt-get install -y -qq qemu-system-arm) >&2
    else
        (sudo apt-get update -qq && sudo apt-get install -y -qq qemu-system-arm) >&2
    fi
fi

pg_found() {
    ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 \
        || { command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; }
}
# as root the server runs as the `postgres` user (it refuses root), which the package creates
if ! pg_found || { [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; }; then
    echo "test.sh: installing postgresql" >&2
    if [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
    else
        (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
    fi
fi

cargo test --workspace "$@"

# The independent Python references check themselves against hand-computed cases (the P/D and
# offload-tier reference also against the batched reference with both features off).
for tool in python3 zstd; do
    command -v "$tool" >/dev/null 2>&1 || { echo "test.sh: $tool is required by tests/reference" >&2; exit 1; }
done
(cd tests/reference && python3 -m unittest test_deploy_model)
