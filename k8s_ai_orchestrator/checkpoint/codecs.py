"""How step state becomes checkpoint files: JSON dicts, raw bytes, pyarrow Tables (Arrow IPC).

Tables are streamed batch by batch straight into the destination file, never copied into an
intermediate buffer; on local disks they are read back memory-mapped, without a copy.

Example:
    >>> kind, name, produce = encode({"tile": 7})
    >>> kind, name
    ('json', 'state.json')
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeAlias

import pyarrow as pa

from ..errors import CheckpointError
from .storage import HashingSink

State: TypeAlias = dict[str, Any] | bytes | pa.Table
Producer = Callable[[HashingSink], object]

_ALLOWED = "a dict of JSON values, bytes, a pyarrow.Table, or a local folder with save_dir(path)"


def encode(state: object) -> tuple[str, str, Producer]:
    """Pick the kind and file name for `state` and return a function that writes it.

    Raises:
        CheckpointError: the state (or a value inside a dict) cannot be checkpointed; the message
            names its type and where it is.
    """
    if isinstance(state, pa.RecordBatch):
        state = pa.Table.from_batches([state])
    if isinstance(state, pa.Table):
        return "arrow", "state.arrows", lambda sink: _write_table(state, sink)
    if isinstance(state, bytes | bytearray | memoryview):
        data = state
        return "bytes", "state.bin", lambda sink: sink.write(data)
    if isinstance(state, dict):
        _check_jsonable(state, "state")
        text = json.dumps(state, separators=(",", ":"), allow_nan=False).encode()
        return "json", "state.json", lambda sink: sink.write(text)
    raise CheckpointError(
        f"cannot checkpoint a {_type_name(state)}: save {_ALLOWED} "
        "(convert arrays to a pyarrow.Table or bytes first)"
    )


def decode_table(buffer: pa.Buffer) -> pa.Table:
    """Read an Arrow IPC stream without copying its buffers."""
    with pa.ipc.open_stream(buffer) as reader:
        return reader.read_all()


def decode(kind: str, data: bytes) -> State:
    """Turn a verified `bytes` or `json` data file back into the state that was saved."""
    if kind == "bytes":
        return data
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError(f"JSON state is a {type(value).__name__}, not an object")
    return value


def _write_table(table: pa.Table, sink: HashingSink) -> None:
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


_MAX_DEPTH = 100  # nesting a JSON state may have; deeper is refused, not a RecursionError


def _check_jsonable(value: object, where: str, open_: tuple[int, ...] = ()) -> None:
    """Refuse what JSON cannot hold, naming where it is; `open_`: ids of enclosing containers."""
    if value is None or isinstance(value, str | bool):
        return
    if isinstance(value, int):
        try:
            str(value)
        except ValueError:
            raise CheckpointError(
                f"cannot checkpoint {where}: an int of {value.bit_length()} bits is longer than "
                "Python writes as JSON text; save it as a str (or as bytes)"
            ) from None
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CheckpointError(f"cannot checkpoint {where} = {value!r}: JSON has no NaN/inf")
        return
    if isinstance(value, dict | list | tuple):
        if id(value) in open_:
            raise CheckpointError(
                f"cannot checkpoint {where}: it contains itself (a cycle); JSON holds only trees"
            )
        if len(open_) >= _MAX_DEPTH:
            raise CheckpointError(
                f"cannot checkpoint {where[:60]}...: nested deeper than {_MAX_DEPTH} levels; "
                "flatten the state, or save it as bytes"
            )
        inner = (*open_, id(value))
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str):
                    raise CheckpointError(
                        f"cannot checkpoint {where}: key {k!r} is a {_type_name(k)}, JSON keys "
                        "must be str (convert with str(key))"
                    )
                _check_jsonable(v, f"{where}[{k!r}]", inner)
        else:
            for i, item in enumerate(value):
                _check_jsonable(item, f"{where}[{i}]", inner)
        return
    raise CheckpointError(
        f"cannot checkpoint {where}: a {_type_name(value)} is not JSON-serializable; "
        f"save {_ALLOWED}"
    )


def _type_name(value: object) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__name__}"
