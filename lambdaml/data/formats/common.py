"""What the loaders share: float32's range, the memory bound, the strict number syntax, reading text."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from lambdaml.arrays import Array
from lambdaml.errors import DataError

#: Features and labels are stored as float32: a value beyond this would silently become infinite.
FLOAT32_MAX = float(np.finfo(np.float32).max)


class Loaded(NamedTuple):
    """Features, labels and, for images, a row's shape before flattening (e.g. ``[3, 32, 32]``)."""

    X: Array
    y: Array
    sample_shape: list[int] | None = None


# --- the memory bound ---------------------------------------------------------------

#: The limit where the OS does not say how much memory the machine has.
FALLBACK_MEMORY_LIMIT = 4 * 10**9
RAISE_LIMIT = "raise the limit with --memory-limit"


def default_memory_limit() -> int:
    """Half this machine's physical memory: what a loader may allocate unless told otherwise."""
    try:
        page, pages = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX, or the names are unknown here
        return FALLBACK_MEMORY_LIMIT
    if page <= 0 or pages <= 0:  # sysconf answers -1 for "unknown"
        return FALLBACK_MEMORY_LIMIT
    return page * pages // 2


def format_bytes(n: float) -> str:
    """``24e9`` -> ``24.0 GB``: decimal units, as ``--memory-limit 8G`` reads them."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def resolve_limit(memory_limit: int | None) -> int:
    if memory_limit is None:
        return default_memory_limit()
    if memory_limit <= 0:
        raise ValueError(f"memory_limit must be positive, got {memory_limit}")
    return int(memory_limit)


def check_memory(where: str, what: str, need: int, limit: int, hint: str = RAISE_LIMIT) -> None:
    """Refuse before allocating: ``where: what 24.0 GB, over the 6.0 GB limit; hint``."""
    if need > limit:
        raise DataError(f"{where}: {what} {format_bytes(need)}, over the {format_bytes(limit)} limit; {hint}")


def check_file_size(path: Path, limit: int) -> None:
    """A file is read whole: one bigger than the limit cannot fit (and the arrays come on top)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except OSError as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None
    check_memory(str(path), "the file holds", size, limit)


# --- strict numbers -----------------------------------------------------------------

# A decimal or scientific number, ASCII only. float() also takes '1_0', 'nan', 'inf',
# 'Infinity', Unicode digits and surrounding whitespace; none of those is data. The
# quantifiers are possessive: a long malformed field fails in linear time.
NUMBER = r"[+-]?+(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][+-]?+[0-9]++)?+"
NUMBER_RE = re.compile(NUMBER)
_NON_FINITE_WORDS = frozenset({"nan", "inf", "infinity"})


def is_non_finite_word(text: str) -> bool:
    """``nan``, ``-inf``, ``Infinity``: what float() reads as no finite number."""
    return text.strip().lstrip("+-").lower() in _NON_FINITE_WORDS


#: The longest line a text dataset may have: a dense row of 100,000 values fits many times over;
#: a file with no line breaks (``/dev/zero``, a binary file) is refused after reading this much.
MAX_LINE_BYTES = 16 * 2**20
_CHUNK = 2**20
_BOMS = {b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16", b"\xff\xfe\x00\x00": "UTF-32"}


def read_lines(path: Path, limit: int) -> list[str]:
    """A text file's lines, read a MiB at a time within ``limit`` bytes, whatever the file is.

    A regular file bigger than the limit is refused before reading; a pipe, FIFO or device,
    whose size nobody knows, is refused as soon as what was read passes the limit, and a line
    longer than ``MAX_LINE_BYTES`` as soon as it does. UTF-8, with or without a byte-order mark;
    UTF-16 and UTF-32 are named, not decoded into nonsense.
    """
    check_file_size(path, limit)
    where = str(path)
    lines: list[str] = []
    held = 0
    try:
        with path.open("rb") as handle:
            pending = b""
            first = True
            while True:
                chunk = handle.read(_CHUNK)
                if first:
                    _check_encoding(where, chunk)
                    chunk = chunk.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
                    first = False
                if not chunk:
                    break
                parts = (pending + chunk).split(b"\n")
                pending = parts.pop()
                if len(pending) > MAX_LINE_BYTES:
                    raise DataError(
                        f"{where}:{len(lines) + 1}: a line longer than {format_bytes(MAX_LINE_BYTES)}: "
                        "not a text dataset (binary data, or no line breaks)"
                    )
                for raw in parts:
                    lines.append(_decoded(where, len(lines) + 1, raw))
                    held += len(raw) + 1
                check_memory(where, "what was read so far takes", held + len(pending), limit)
            if pending:
                lines.append(_decoded(where, len(lines) + 1, pending))
    except FileNotFoundError:
        raise DataError(f"dataset file {where!r} not found") from None
    except IsADirectoryError:
        raise DataError(f"dataset file {where!r} is a directory") from None
    except OSError as exc:
        raise DataError(f"cannot read dataset file {where!r}: {exc.strerror or exc}") from None
    return lines


def _check_encoding(where: str, head: bytes) -> None:
    for mark, name in sorted(_BOMS.items(), key=lambda item: -len(item[0])):
        if head.startswith(mark):
            raise DataError(f"{where} is {name} text: save it as UTF-8 (or ASCII) and prepare it again")
    if head[:2].count(b"\x00") == 1 and b"\x00" in head[:64:2] + head[1:64:2]:
        raise DataError(f"{where} looks like UTF-16 text without a byte-order mark: save it as UTF-8")


def _decoded(where: str, lineno: int, raw: bytes) -> str:
    try:
        return raw.removesuffix(b"\r").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{where}:{lineno}: byte {raw[exc.start]:#04x} is not UTF-8 text: save the file as UTF-8"
        ) from None
