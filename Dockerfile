# brokerlab in a container: `docker build -t brokerlab .`, then
#   docker run --rm -v "$PWD/out:/home/brokerlab/out" brokerlab fleet report --shrink 20
#   docker run --rm -e BROKERLAB_DB=postgres://USER@HOST/DB brokerlab task worker --concurrency 4
# scripts/docker_smoke.sh builds the image and runs both. Two stages: the toolchain image builds
# the release binary; the runtime image is Debian slim with that binary alone (no compiler, no
# shell tools beyond Debian's base), running as an unprivileged user.

# --- build: the workspace's pinned Rust (Cargo.toml rust-version) on Debian 12 -----------------
FROM rust:1.95-slim-bookworm AS builder
WORKDIR /src
# Every workspace member's manifest must be present for cargo to resolve the workspace, so the
# whole tree is copied (.dockerignore keeps target/ and out/ out); the lock file is honoured.
COPY . .
RUN cargo build --release --locked -p brokerlab \
 && strip target/release/brokerlab \
 && cp target/release/brokerlab /usr/local/bin/brokerlab

# --- runtime: glibc and libgcc only (rusqlite bundles SQLite, TLS is rustls: no OpenSSL) -------
FROM debian:bookworm-slim AS runtime
RUN groupadd --system --gid 10001 brokerlab \
 && useradd --system --uid 10001 --gid brokerlab --create-home --home-dir /home/brokerlab brokerlab
COPY --from=builder /usr/local/bin/brokerlab /usr/local/bin/brokerlab
# The example inputs the README's commands name (scenarios are compiled into the binary; the
# vendored traces are read from traces/ by `fleet replay` and `fleet compare --trace`).
COPY --chown=brokerlab:brokerlab traces/ /home/brokerlab/traces/
COPY --chown=brokerlab:brokerlab scenarios/ /home/brokerlab/scenarios/
COPY --chown=brokerlab:brokerlab examples/ /home/brokerlab/examples/
USER 10001:10001
WORKDIR /home/brokerlab
ENTRYPOINT ["/usr/local/bin/brokerlab"]
CMD ["--help"]
