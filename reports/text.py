"""Plain-text formatting shared by the text reports: aligned tables and unit-aware
numbers. Pure functions of their arguments."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = "",
                 indent: int = 2) -> str:
    """An aligned table with a rule under the header. ``align`` has one ``l`` or ``r``
    per column (default: first column left, the rest right)."""
    columns = len(headers)
    align = align or ("l" + "r" * (columns - 1))
    if len(align) != columns:
        raise ValueError(f"align {align!r} has {len(align)} columns, headers have {columns}")
    widths = [len(h) for h in headers]
    for row in rows:
        if len(row) != columns:
            raise ValueError(f"row {row!r} has {len(row)} cells, expected {columns}")
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]
    pad = " " * indent

    def line(cells: Sequence[str]) -> str:
        parts = [cell.ljust(w) if a == "l" else cell.rjust(w)
                 for cell, w, a in zip(cells, widths, align)]
        return (pad + "  ".join(parts)).rstrip()

    rule = pad + "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def format_cycles(cycles: float) -> str:
    """``1,234,567``."""
    return f"{int(round(cycles)):,}"


def percent(part: float, whole: float) -> str:
    """``12.3%`` (``-`` when ``whole`` is 0)."""
    if not whole:
        return "-"
    return f"{100.0 * part / whole:.1f}%"


_BINARY = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def format_bytes(nbytes: float) -> str:
    """``512 B``, ``4.0 KiB``, ``1.50 MiB``."""
    for unit, size in _BINARY:
        if abs(nbytes) >= size:
            value = nbytes / size
            return f"{value:.2f} {unit}" if value < 10 else f"{value:.1f} {unit}"
    return f"{int(nbytes)} B"


_SI = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def format_si(value: float, unit: str) -> str:
    """``1.23 TFLOP/s``, ``16.0 GB/s``, ``850 FLOP/s``."""
    for prefix, scale in _SI:
        if abs(value) >= scale:
            scaled = value / scale
            digits = 2 if scaled < 10 else 1 if scaled < 100 else 0
            return f"{scaled:.{digits}f} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_count(value: float) -> str:
    """A plain count with an SI prefix: ``1.05 G``, ``8.19 k``, ``12``."""
    return format_si(value, "").rstrip()


def format_us(seconds: float) -> str:
    """A duration in the friendliest unit: ``850 ns``, ``12.34 us``, ``3.21 ms``."""
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def shorten_middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters by replacing its middle with ``...``,
    keeping twice as much of the end (an op's node and layer) as of the start."""
    if len(text) <= width:
        return text
    keep = max(width - 3, 2)
    head = keep // 3
    return text[:head] + "..." + text[len(text) - (keep - head):]


def distinct_labels(names: Sequence[str], width: int) -> dict[str, str]:
    """A label of at most ``width`` characters per name (:func:`shorten_middle`) such that
    distinct names keep distinct labels: names whose shortened labels would read the
    same (or read like another name) are shown whole."""
    labels = {name: shorten_middle(name, width) for name in names}
    while True:
        readers: dict[str, list[str]] = {}
        for name, label in labels.items():
            readers.setdefault(label, []).append(name)
        clashes = [name for group in readers.values() if len(group) > 1 for name in group
                   if labels[name] != name]
        if not clashes:
            return labels
        for name in clashes:  # a whole name differs from every other whole name
            labels[name] = name


__all__ = ["distinct_labels", "format_bytes", "format_count", "format_cycles", "format_si",
           "format_table", "format_us", "percent", "shorten_middle"]
