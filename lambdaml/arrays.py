"""The array type every signature uses: a numpy array of any dtype and shape.

The dtype is not in the type because the wire, the models and the datasets convert at their edges
(float32 on the wire and in shards, float64 in the optimisers); each edge checks it at run time.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from numpy.typing import NDArray

Array: TypeAlias = NDArray[Any]
