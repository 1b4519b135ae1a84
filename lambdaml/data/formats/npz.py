"""NumPy archives with arrays ``X`` and ``y``: read member by member, each header checked before its data."""

from __future__ import annotations

import contextlib
import io
import math
import zipfile
import zlib
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np
from numpy.lib import format as npy_format

from lambdaml.arrays import Array
from lambdaml.data.formats.common import Loaded, check_memory, resolve_limit
from lambdaml.errors import DataError, brief

# --- NPZ --------------------------------------------------------------------------

# What zipfile and numpy's header reader raise for a damaged archive: a cut or overwritten zip
# reaches zipfile's unsupported-feature paths (NotImplementedError, RuntimeError for
# "encrypted") and zlib; a mangled header reaches ast.literal_eval (TypeError, RecursionError).
_ARCHIVE_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    KeyError,
    zipfile.BadZipFile,
    NotImplementedError,
    RuntimeError,
    zlib.error,
    TypeError,
)
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first member, or an empty zip
_MAX_NPY_HEADER = 10_000  # numpy's own limit for a header it parses safely
_READ_CHUNK = 1 << 20


class _NpyHeader(NamedTuple):
    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype[Any]


def load_npz(path: str | Path, *, memory_limit: int | None = None) -> Loaded:
    """Read arrays ``X`` (rows first; images keep their shape as ``sample_shape``) and ``y``.

    Each member's .npy header is read first: an object array (which would need pickle) is
    refused, and so is one whose shape, with its float32 copy, needs more than
    ``memory_limit`` bytes: a few kB of compressed zeros can claim gigabytes.
    """
    path = Path(path)
    limit = resolve_limit(memory_limit)
    try:
        with path.open("rb") as f:
            magic = f.read(6)
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except OSError as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None
    if magic == npy_format.MAGIC_PREFIX:
        raise DataError(f"{path} is a single .npy array; save an .npz with arrays X and y (np.savez)")
    if not magic.startswith(_ZIP_MAGICS):
        raise DataError(f"cannot read {str(path)!r} as an .npz archive: it is not a zip file")
    try:
        archive = zipfile.ZipFile(path)
    except _ARCHIVE_ERRORS as exc:
        raise DataError(f"cannot read {str(path)!r} as an .npz archive: {str(exc)[:200]}") from None
    with archive, contextlib.ExitStack() as stack:
        names = archive.namelist()
        members = {key: key if key in names else f"{key}.npy" for key in ("X", "y")}
        missing = [key for key, member in members.items() if member not in names]
        if missing:
            held = ", ".join(name.removesuffix(".npy")[:40] for name in names[:8]) or "none"
            raise DataError(f"{path} has no {' or '.join(missing)} array (it holds: {held})")
        try:
            streams = {key: stack.enter_context(archive.open(member)) for key, member in members.items()}
            headers = {key: _npy_header(stream) for key, stream in streams.items()}
        except (*_ARCHIVE_ERRORS, RecursionError) as exc:
            raise DataError(f"cannot read {str(path)!r}: {str(exc)[:200]}") from None
        _check_npz_headers(path, headers, limit)
        try:
            X, y = (_npy_data(streams[key], headers[key]) for key in ("X", "y"))
        except _ARCHIVE_ERRORS as exc:  # a truncated, corrupt or encrypted member
            raise DataError(f"cannot read {str(path)!r}: {str(exc)[:200]}") from None
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32's range becomes inf, refused below
        features = X.reshape(len(X), -1).astype(np.float32)
        labels = y.astype(np.float32)
    if not (np.all(np.isfinite(features)) and np.all(np.isfinite(labels))):
        raise DataError(f"{path}: NaN or infinite value (or beyond float32's range)")
    return Loaded(features, labels, [int(d) for d in X.shape[1:]] if X.ndim > 2 else None)


def _npy_header(stream: IO[bytes]) -> _NpyHeader:
    """An .npy member's shape, order and dtype; its header length is checked before it is read.

    (numpy reads a header of any claimed length before checking it, up to 4 GB.)
    """
    prefix = stream.read(8)
    if prefix[:6] != npy_format.MAGIC_PREFIX or len(prefix) < 8:
        raise ValueError("a member is not an .npy array")
    version = (prefix[6], prefix[7])
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    length = stream.read(2 if version == (1, 0) else 4)
    size = int.from_bytes(length, "little")
    if size > _MAX_NPY_HEADER:
        raise ValueError(f"an .npy header claims {size} bytes")
    header = io.BytesIO(length + stream.read(size))
    reader = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
    shape, fortran, dtype = reader(header)  # type: ignore[no-untyped-call]  # its max_header_size is _MAX_NPY_HEADER, already checked
    if any(d < 0 for d in shape):
        raise ValueError(f"an .npy header has the shape {brief(shape)}")
    return _NpyHeader(tuple(int(d) for d in shape), bool(fortran), dtype)


def _check_npz_headers(path: Path, headers: dict[str, _NpyHeader], limit: int) -> None:
    for key, header in headers.items():
        if header.dtype.hasobject:
            raise DataError(f"{path} holds Python objects (object dtype), which need pickle; save numeric arrays")
        if header.dtype.kind not in "biuf":  # a subarray or structured dtype is kind "V"
            raise DataError(f"{path}: {key} has dtype {header.dtype}; it must be numeric")
    X, y = headers["X"], headers["y"]
    if len(X.shape) < 2 or len(y.shape) != 1 or X.shape[0] != y.shape[0]:
        raise DataError(f"{path}: X {X.shape} and y {y.shape} do not match (X needs rows first, y one label per row)")
    if y.shape[0] == 0:
        raise DataError(f"{path}: no data rows")
    need = sum(math.prod(h.shape) * (h.dtype.itemsize + 4) for h in (X, y))
    what = f"reading X {X.shape} {X.dtype} and y {y.shape} {y.dtype} and converting them to float32 takes"
    check_memory(str(path), what, need, limit)


def _npy_data(stream: IO[bytes], header: _NpyHeader) -> Array:
    """The member's data, read in chunks into one buffer of exactly the checked size."""
    nbytes = math.prod(header.shape) * header.dtype.itemsize
    buffer = np.empty(nbytes, dtype=np.uint8)
    done = 0
    while done < nbytes:
        chunk = stream.read(min(_READ_CHUNK, nbytes - done))
        if not chunk:
            raise ValueError(f"an array's data is cut short ({done} of {nbytes} bytes)")
        buffer[done : done + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
        done += len(chunk)
    return buffer.view(header.dtype).reshape(header.shape, order="F" if header.fortran else "C")
