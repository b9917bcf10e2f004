# Sourced by the wheel checks: a folder of compiler stubs (cc, gcc, g++, clang, nvcc that fail when
# called) and `install_wheel <wheel> <python> <target>`, which installs the wheel with pip --target while
# only the stubs answer as compilers. Afterwards `no_compiler <command...>` runs a command the same way.
stubs=$(mktemp -d)
trap 'rm -rf "$stubs"' EXIT
for cc in cc c++ gcc g++ clang clang++ nvcc; do
  printf '#!/bin/sh\necho "wheel check: no compiler in this environment (%s was called)" >&2\nexit 1\n' "$cc" > "$stubs/$cc"
  chmod +x "$stubs/$cc"
done
no_compiler() { PATH="$stubs:$PATH" CC="$stubs/cc" CXX="$stubs/c++" "$@"; }
install_wheel() { no_compiler "$2" -m pip install -q --no-deps --target "$3" "$1"; }
