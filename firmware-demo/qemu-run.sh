#!/bin/sh
# Cargo runner for thumbv7m-none-eabi (see ../.cargo/config.toml): boots the firmware ELF in QEMU's
# mps2-an385 (Cortex-M3, 4 MiB RAM) with semihosting. The defmt frames come out on stdout, raw;
# pipe them into a decoder (`defmt-print -e ELF`), or use the test tests/tests/firmware_qemu.rs,
# which decodes them in-process. QEMU's exit status is the firmware's semihosting exit status.
set -eu
elf="$1"
shift
exec qemu-system-arm -cpu cortex-m3 -machine mps2-an385 -nographic -monitor none \
    -semihosting-config enable=on,target=native -kernel "$elf" "$@"
