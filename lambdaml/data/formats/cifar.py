"""CIFAR-10's python batches: pickles, read by an unpickler of checked stand-ins for numpy's constructors."""

from __future__ import annotations

import io
import logging
import math
import pickle
import pickletools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lambdaml.arrays import Array
from lambdaml.data.formats.common import Loaded, check_file_size, check_memory, resolve_limit
from lambdaml.errors import DataError, brief

log = logging.getLogger(__name__)

CIFAR10_SAMPLE_SHAPE = [3, 32, 32]
CIFAR10_CLASSES = 10
_CIFAR10_PIXELS = 3 * 32 * 32
#: A CIFAR-10 python batch holds 10,000 images of 3,072 bytes: no array in one is bigger.
_CIFAR10_BATCH_BYTES = 10_000 * _CIFAR10_PIXELS


# --- CIFAR-10 python batches ------------------------------------------------------


class _Refused(pickle.UnpicklingError):
    """A pickle asked for something a CIFAR-10 batch never holds."""


class _RefusedGlobal(_Refused):
    """A pickle asked for a global outside the allow-list."""


class _NdarrayClass:
    """Stands for ``numpy.ndarray``, _reconstruct's first argument; not callable: ``ndarray(shape)`` allocates."""

    __slots__ = ()


_NDARRAY = _NdarrayClass()


class _PendingArray:
    """What the checked _reconstruct returns; numpy's pickle then sends the data in ``__setstate__``.

    The state is checked before anything beyond the pickle's own bytes exists: a plain
    numeric dtype, a shape whose size times the item size is the data's length, and at
    most one batch's 10000 x 3072 bytes. The array is a view of those bytes.
    """

    __slots__ = ("array",)

    def __init__(self) -> None:
        self.array: Array | None = None

    def __setstate__(self, state: object) -> None:
        if not (isinstance(state, tuple) and len(state) == 5):
            raise _Refused("refusing an array state that is not numpy's (version, shape, dtype, order, data)")
        _, shape, dtype, fortran, raw = state
        if not (isinstance(shape, tuple) and len(shape) <= 32 and all(type(d) is int and d >= 0 for d in shape)):
            raise _Refused(f"refusing an array of shape {brief(shape)}")
        if not (isinstance(dtype, np.dtype) and _is_plain_number(dtype)):
            raise _Refused(f"refusing an array of dtype {brief(dtype)}")
        if not (isinstance(raw, bytes) and isinstance(fortran, int)):
            raise _Refused("refusing an array whose data is not a byte string")
        if math.prod(shape) * dtype.itemsize != len(raw):
            raise _Refused(f"refusing an array of shape {shape} {dtype} with {len(raw)} bytes of data")
        if len(raw) > _CIFAR10_BATCH_BYTES:
            raise _Refused(f"refusing an array of shape {shape} {dtype}: bigger than a batch's 10000 images")
        self.array = np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def _is_plain_number(dtype: np.dtype[Any]) -> bool:
    """A numeric dtype with no fields or subarray (a pickled dtype's state can add them)."""
    return (
        dtype.kind in "biuf"
        and dtype.fields is None
        and dtype.subdtype is None
        and dtype.itemsize == np.dtype(dtype.kind + str(dtype.itemsize)).itemsize
    )


class _CheckedReconstruct:
    """numpy's ``_reconstruct(ndarray, (0,), b'b')``, which starts every pickled array, and only that.

    The real function allocates whatever shape it is given: 79 bytes of pickle could ask
    for gigabytes. numpy itself always passes (0,) and sends the data in the state.
    """

    __slots__ = ()

    def __call__(self, cls: object, shape: object, dtype: object) -> _PendingArray:
        if cls is not _NDARRAY or type(shape) is not tuple or shape != (0,) or dtype not in (b"b", "b"):
            raise _Refused(f"refusing an array constructed with shape {brief(shape)} (numpy pickles (0,))")
        return _PendingArray()


_PLAIN_DTYPE = re.compile(r"[<>|=]?(?:b1|[iu][1248]|f[248])")


class _CheckedDtype:
    """numpy's ``dtype('u1', False, True)``, for plain numeric type codes only, and always a fresh copy.

    A fresh copy: the pickle's BUILD that follows sets the dtype's state, and must not
    change numpy's shared uint8.
    """

    __slots__ = ()

    def __call__(self, spec: object, align: object = False, copy: object = True) -> np.dtype[Any]:
        text = spec.decode("latin-1") if isinstance(spec, bytes) else spec
        if not (isinstance(text, str) and _PLAIN_DTYPE.fullmatch(text)):
            raise _Refused(f"refusing dtype {brief(spec)} (a CIFAR-10 batch holds plain numbers)")
        return np.dtype(text, copy=True)


#: The only globals a CIFAR-10 batch refers to, as checked stand-ins for numpy's own.
#: (The files were written by numpy 1.x, which named the module numpy.core.multiarray.)
_CIFAR_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _CheckedReconstruct(),
    ("numpy._core.multiarray", "_reconstruct"): _CheckedReconstruct(),
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _CheckedDtype(),
}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays; every other global is refused.

    ``pickle.load`` would import and call whatever a file names (``os.system`` ...);
    this reader resolves names only from an explicit allow-list and imports nothing.
    """

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _CIFAR_GLOBALS[(module, name)]
        except KeyError:
            raise _RefusedGlobal(f"refusing to load global {module}.{name}") from None

    def persistent_load(self, pid: Any) -> Any:
        raise _RefusedGlobal("refusing a persistent id")


def load_cifar10_batches(paths: Sequence[str | Path], *, memory_limit: int | None = None) -> Loaded:
    """Read CIFAR-10 *python* batches (``data_batch_1`` ... ``test_batch``) into one dataset.

    Rows are the official layout (1024 red, 1024 green, then 1024 blue values of a 32x32
    image), so ``sample_shape`` is ``[3, 32, 32]``; pixels are scaled to [0, 1]. The float32
    matrix of all batches together must fit in ``memory_limit`` bytes.
    """
    if not paths:
        raise DataError("no CIFAR-10 batch files given")
    limit = resolve_limit(memory_limit)
    images: list[Array] = []
    labels: list[Array] = []
    rows = 0
    for path in paths:
        data, y = _read_cifar10_batch(Path(path), limit)
        rows += len(data)
        earlier = " (with the batches before it)" if images else ""
        what = f"{rows} images{earlier} make a float32 matrix of {rows} x {_CIFAR10_PIXELS} ="
        check_memory(str(path), what, rows * _CIFAR10_PIXELS * 4, limit)
        images.append(data)
        labels.append(y)
    X = np.empty((rows, _CIFAR10_PIXELS), dtype=np.float32)  # filled batch by batch: no concatenated copy
    start = 0
    for data in images:
        np.divide(data, np.float32(255.0), out=X[start : start + len(data)], dtype=np.float32)
        start += len(data)
    y = np.concatenate(labels) if len(labels) > 1 else labels[0]
    log.info("read %d CIFAR-10 images from %d batch files", len(y), len(paths))
    return Loaded(X, y, list(CIFAR10_SAMPLE_SHAPE))


def _read_cifar10_batch(path: Path, limit: int) -> tuple[Array, Array]:
    """A batch's uint8 images (a view of the file's bytes) and float32 labels."""
    check_file_size(path, limit)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"dataset file {str(path)!r} not found") from None
    except OSError as exc:
        raise DataError(f"cannot read dataset file {str(path)!r}: {exc}") from None
    try:
        _check_opcodes(raw)
        batch = _NumpyOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except _RefusedGlobal as exc:
        raise DataError(f"{path}: {exc} (a CIFAR-10 batch holds only numpy arrays and lists)") from None
    except _Refused as exc:
        raise DataError(f"{path}: {exc} (a CIFAR-10 batch holds 10000 uint8 images of 3072 bytes)") from None
    except (TypeError, AttributeError):  # numpy's stand-ins used as a batch never uses them (a crafted pickle)
        raise DataError(
            f"{path} is not a CIFAR-10 python batch: it builds objects from numpy's classes in ways a batch never does"
        ) from None
    except (pickle.UnpicklingError, EOFError, ValueError, IndexError, KeyError) as exc:
        raise DataError(f"{path} is not a CIFAR-10 python batch: {str(exc)[:200]}") from None
    except (OverflowError, MemoryError, RecursionError):
        raise DataError(f"{path} is not a CIFAR-10 python batch: it claims an impossible size") from None
    if not isinstance(batch, dict):
        kind = "numpy's ndarray class" if batch is _NDARRAY else f"a {type(batch).__name__}"
        raise DataError(f"{path} is not a CIFAR-10 python batch: it holds {kind}, not a dict")
    data = _unpickled(batch.get(b"data", batch.get("data")))
    targets = _unpickled(batch.get(b"labels", batch.get("labels")))
    if data is None or targets is None:
        raise DataError(f"{path} is not a CIFAR-10 python batch: no 'data' and 'labels' entries")
    if isinstance(data, _PendingArray) or isinstance(targets, _PendingArray):
        raise DataError(f"{path} is not a CIFAR-10 python batch: an array without its data")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _CIFAR10_PIXELS:
        shape = getattr(data, "shape", type(data).__name__)
        raise DataError(f"{path}: 'data' is {shape}, expected uint8 rows of {_CIFAR10_PIXELS} pixels")
    try:
        y = np.asarray(targets, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise DataError(f"{path}: 'labels' is not a list of integers") from None
    if y.shape != (len(data),):
        raise DataError(f"{path}: {y.shape} labels for {len(data)} images")
    if len(y) and (y.min() < 0 or y.max() >= CIFAR10_CLASSES):
        raise DataError(f"{path}: labels outside 0..{CIFAR10_CLASSES - 1}")
    return data, y.astype(np.float32)


_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


def _check_opcodes(raw: bytes) -> None:
    """Walk the opcodes before unpickling: the C unpickler allocates what a few bytes claim.

    A length-prefixed string's claimed size is allocated before it is read (pickletools
    checks it against the bytes there are), and a memo slot of 2**31 grows the memo to
    32 GB. A pickle of n bytes can neither hold more than n bytes nor memoize more than n objects.
    """
    for opcode, arg, _ in pickletools.genops(raw):
        if opcode.name in _MEMO_PUTS and isinstance(arg, int) and not 0 <= arg <= len(raw):
            raise _Refused(f"refusing memo slot {brief(arg)} in a pickle of {len(raw)} bytes")


def _unpickled(value: object) -> object:
    """A pending array's data once its state arrived (the pending array itself if it never did)."""
    if isinstance(value, _PendingArray) and value.array is not None:
        return value.array
    return value
