#!/usr/bin/env bash
# Compiles every bpf/*.c into bpf/*.o with Debian's clang against the kernel UAPI headers, after
# checking that every bpf/*.h compiles on its own (each header includes what it uses). The
# checkout's path is mapped to . in the debug info, so the objects do not depend on where it is.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
cflags=(-O2 -g -fdebug-prefix-map="$PWD"=. -Wall -Werror -target bpf -I/usr/include/x86_64-linux-gnu -Ibpf)
for header in bpf/*.h; do
  echo "#include \"${header#bpf/}\"" | clang "${cflags[@]}" -fsyntax-only -x c - ||
    { echo "$header does not compile on its own" >&2; exit 1; }
done
# Each object is written beside its final name and renamed into place, so a test or an image build
# reading bpf/*.o while another build runs (scripts/test.sh builds the image in the background)
# never sees half an object.
for src in bpf/*.c; do
  out=${src%.c}.o
  clang "${cflags[@]}" -c "$src" -o "$out.$$.tmp" && mv -f "$out.$$.tmp" "$out"
done
