"""Opening a sealed value as a view: the same value and the same refusals as opening it as bytes."""

from __future__ import annotations

import pytest

from lambdaml.errors import CodecError
from lambdaml.seal import Sealer, new_secret


@pytest.mark.parametrize("secret", [None, new_secret()], ids=["bound", "mac"])
def test_open_view_is_the_value_read_only_and_refuses_what_open_refuses(secret: bytes | None) -> None:
    sealer = Sealer(secret)
    sealed = sealer.seal("job/r1/k", b"payload " * 1000)
    view = sealer.open_view("job/r1/k", sealed)
    assert bytes(view) == sealer.open("job/r1/k", sealed) == b"payload " * 1000
    assert view.readonly and view.obj is sealed  # no copy: a view into what was read
    for key, value in (("job/r2/k", sealed), ("job/r1/k", sealed[:-1] + b"X"), ("job/r1/k", sealed[:10])):
        if secret is None and value is not sealed and len(value) == len(sealed):
            continue  # without a MAC only the key is bound: a changed byte is the codec's to catch
        for opener in (sealer.open, sealer.open_view):
            with pytest.raises(CodecError):
                opener(key, value)
