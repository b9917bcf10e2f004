"""Rewrite a CUDA source for the emulator: launches become calls, __shared__ variables references.

    kernel<T><<<grid, block, 0, stream>>>(a, b)
 -> ::fk_emu::launch("kernel", kernel<T>, ::fk_emu::Config(grid, block, 0, stream), a, b)

    __shared__ float tile[32][33];
 -> static ::fk_emu::SharedSlot fk_emu_slot_tile(sizeof(float[32][33]), alignof(float[32][33]), "tile");
    float (&tile)[32][33] = *reinterpret_cast<float (*)[32][33]>(fk_emu_slot_tile.get());

Those two are the only changes: the rest of the file is copied byte for byte, lines stay where they
were, and a ``#line`` directive points compiler messages and sanitizer reports at the original file.

    python emu/rewrite.py SRC.cu OUT.cpp
    python emu/rewrite.py --kernels FILE...   (print the __global__ function names defined)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_IDENT = re.compile(r"[A-Za-z_0-9:]")
_SHARED_DECL = re.compile(
    r"__shared__[ \t]+(?P<type>[^;\n]*?)[ \t]+(?P<name>\w+)[ \t]*(?P<dims>(?:\[[^\]\n]*\])*)[ \t]*;"
)
_GLOBAL_FN = re.compile(r"__global__\s+(?:[\w:<>,\s*&]+?\s+)?(\w+)\s*\(")


def _match_back(text: str, close: int, open_ch: str, close_ch: str) -> int:
    """Index of the ``open_ch`` that balances ``text[close] == close_ch``, scanning backwards."""
    depth = 0
    for i in range(close, -1, -1):
        if text[i] == close_ch:
            depth += 1
        elif text[i] == open_ch:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced {close_ch!r} before offset {close}")


def _match_forward(text: str, open_: int, open_ch: str, close_ch: str) -> int:
    depth = 0
    for i in range(open_, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced {open_ch!r} after offset {open_}")


def _kernel_start(text: str, end: int) -> int:
    """Start of the kernel expression ending just before ``end`` (``ns::name<T, U>``)."""
    i = end - 1
    while i >= 0 and text[i].isspace():
        i -= 1
    if text[i] == ">":
        i = _match_back(text, i, "<", ">") - 1
    while i >= 0 and _IDENT.match(text[i]):
        i -= 1
    return i + 1


def kernel_name(expr: str) -> str:
    """``ns::kernel<scalar_t, acc_t>`` -> ``kernel``: the name the coverage record uses."""
    base = expr.split("<", 1)[0].strip()
    return base.rsplit("::", 1)[-1]


def _shared_decl(m: re.Match[str]) -> str:
    t, name, dims = m["type"].strip(), m["name"], m["dims"]
    slot = f"fk_emu_slot_{name}"
    return (
        f'static ::fk_emu::SharedSlot {slot}(sizeof({t}{dims}), alignof({t}{dims}), "{name}"); '
        f"{t} {f'(&{name}){dims}' if dims else '&' + name} = *reinterpret_cast<{t} (*){dims}>({slot}.get());"
    )


def rewrite_shared(text: str) -> str:
    """Every ``__shared__`` declaration (one per line, outside ``//`` comments) made a reference."""

    def sub(m: re.Match[str]) -> str:
        line_start = text.rfind("\n", 0, m.start()) + 1
        return m[0] if "//" in text[line_start : m.start()] else _shared_decl(m)

    return _SHARED_DECL.sub(sub, text)


def rewrite(text: str) -> str:
    """Launches and ``__shared__`` declarations of ``text`` rewritten (newlines kept in place)."""
    return rewrite_launches(rewrite_shared(text))


def rewrite_launches(text: str) -> str:
    """Every ``<<<...>>>(...)`` launch in ``text`` rewritten (newlines are kept where they were)."""
    out: list[str] = []
    pos = 0
    while True:
        cfg_open = text.find("<<<", pos)
        if cfg_open < 0:
            out.append(text[pos:])
            return "".join(out)
        start = _kernel_start(text, cfg_open)
        cfg_close = text.find(">>>", cfg_open)
        if cfg_close < 0:
            raise ValueError(f"'<<<' at offset {cfg_open} has no '>>>'")
        args_open = cfg_close + 3
        while text[args_open].isspace():
            args_open += 1
        if text[args_open] != "(":
            raise ValueError(f"launch at offset {cfg_open}: expected '(' after '>>>'")
        args_close = _match_forward(text, args_open, "(", ")")
        expr = text[start:cfg_open].strip()
        cfg = text[cfg_open + 3 : cfg_close]
        args = text[args_open + 1 : args_close]
        sep = ", " if args.strip() else ""
        out.append(text[pos:start])
        out.append(f'::fk_emu::launch("{kernel_name(expr)}", {expr}, ::fk_emu::Config({cfg}){sep}{args})')
        pos = args_close + 1


def global_kernels(text: str) -> list[str]:
    """Names of the ``__global__`` functions defined in ``text`` (comments ignored)."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    code = re.sub(r"__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)", " ", code)  # may sit before the name
    return _GLOBAL_FN.findall(code)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "--kernels":
        for f in argv[1:]:
            for name in global_kernels(Path(f).read_text()):
                print(name)
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    src, dst = Path(argv[0]), Path(argv[1])
    body = rewrite(src.read_text())
    dst.parent.mkdir(parents=True, exist_ok=True)
    new = f'#line 1 "{src.resolve()}"\n{body}'
    if not dst.exists() or dst.read_text() != new:  # unchanged output keeps the build incremental
        dst.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
