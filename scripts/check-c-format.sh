#!/usr/bin/env bash
# Fails when a C file under bpf/ or scripts/images/ differs from clang-format's output.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
files=(bpf/*.c bpf/*.h scripts/images/*.c)
((${#files[@]})) || exit 0
clang-format --dry-run --Werror "${files[@]}"
