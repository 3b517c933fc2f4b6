#!/usr/bin/env bash
# Compiles every bpf/*.c into bpf/*.o with Debian's clang against the kernel UAPI headers.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
for src in bpf/*.c; do
  clang -O2 -g -Wall -Werror -target bpf -I/usr/include/x86_64-linux-gnu -Ibpf -c "$src" -o "${src%.c}.o"
done
