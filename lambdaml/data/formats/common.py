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


def read_lines(path: Path, limit: int) -> list[str]:
    check_file_size(path, limit)
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None
