#!/usr/bin/env bash
# Cargo runner for thumbv7m-none-eabi (see ../.cargo/config.toml): boots the firmware ELF in QEMU's
# mps2-an385 (Cortex-M3, 4 MiB RAM) with semihosting. The exit status is the firmware's
# semihosting exit status (0: all checks passed).
#
# The defmt frames come out of QEMU on stdout. They are decoded through `defmt-print -e ELF` when
# it is on PATH (`cargo install defmt-print --version 1.2.0 --locked`) and BROKERLAB_RAW_DEFMT is
# not set; otherwise they are passed on raw. `cargo fw` decodes in-process and needs neither.
set -euo pipefail
elf="$1"
shift
qemu=(qemu-system-arm -cpu cortex-m3 -machine mps2-an385 -nographic -monitor none
    -semihosting-config enable=on,target=native -kernel "$elf" "$@")
if [[ -z "${BROKERLAB_RAW_DEFMT:-}" ]] && command -v defmt-print >/dev/null 2>&1; then
    "${qemu[@]}" | defmt-print -e "$elf"
else
    if [[ -t 1 ]]; then
        echo "qemu-run.sh: defmt-print not found, printing raw defmt frames (use \`cargo fw\` to decode)" >&2
    fi
    exec "${qemu[@]}"
fi
