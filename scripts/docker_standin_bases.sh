#!/usr/bin/env bash
# Builds local stand-ins for the Dockerfile's two base images, for machines that reach Debian's
# package mirror but not Docker Hub, so that the Dockerfile itself (both stages, unchanged) can be
# built and smoke-tested there:
#   debian:bookworm-slim      <- `debootstrap --variant=minbase bookworm` (Debian's packages)
#   rust:1.95-slim-bookworm   <- that base + gcc/libc6-dev/ca-certificates (what the official
#                                image adds for crates that compile C) + this machine's Rust
#                                toolchain (rustc and cargo only, the version the Dockerfile pins)
# The official images are built from the same Debian release and the same Rust release; the
# stand-ins differ in size (minbase keeps apt and the docs) and in how rustup is laid out, not in
# the compiler or the C library the binary links against.
#
# usage: scripts/docker_standin_bases.sh        (needs root for debootstrap; DOCKER=podman works)
# then:  DOCKER=podman scripts/docker_smoke.sh  (builds the Dockerfile as written and checks it)
set -euo pipefail
cd "$(dirname "$0")/.."
docker=${DOCKER:-docker}
rust_version=$(sed -n 's/^FROM rust:\([0-9.]*\)-slim-bookworm AS builder$/\1/p' Dockerfile)
[ -n "$rust_version" ] || { echo "docker_standin_bases: no 'FROM rust:X-slim-bookworm AS builder' in Dockerfile" >&2; exit 1; }
rustc_path=$(rustup which rustc)
toolchain=$(dirname "$(dirname "$rustc_path")")
"$rustc_path" --version | grep -q "^rustc $rust_version" || {
  echo "docker_standin_bases: the local toolchain is $("$rustc_path" --version), the Dockerfile pins $rust_version" >&2
  exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! "$docker" image inspect docker.io/library/debian:bookworm-slim >/dev/null 2>&1; then
  debootstrap --variant=minbase bookworm "$tmp/rootfs" http://deb.debian.org/debian >/dev/null
  tar -C "$tmp/rootfs" -c . | "$docker" import - docker.io/library/debian:bookworm-slim
  rm -rf "$tmp/rootfs"
fi

mkdir -p "$tmp/rust/toolchain/lib/rustlib"
cp -a "$toolchain/bin" "$tmp/rust/toolchain/"
find "$toolchain/lib" -maxdepth 1 -name "lib*.so*" -exec cp -a {} "$tmp/rust/toolchain/lib/" \;
cp -a "$toolchain/lib/rustlib/x86_64-unknown-linux-gnu" "$tmp/rust/toolchain/lib/rustlib/"
# This machine's CA bundle goes in too: where the registry is reached through a TLS-inspecting
# proxy, cargo inside the build stage must trust what the host trusts (a no-op elsewhere).
cp /etc/ssl/certs/ca-certificates.crt "$tmp/rust/host-ca-certificates.crt"
cat > "$tmp/rust/Dockerfile" <<'EOF'
FROM docker.io/library/debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
COPY host-ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY toolchain /usr/local/rust
ENV PATH=/usr/local/rust/bin:$PATH
EOF
"$docker" build -t "docker.io/library/rust:$rust_version-slim-bookworm" "$tmp/rust"
echo "docker_standin_bases: ok (debian:bookworm-slim, rust:$rust_version-slim-bookworm)"
