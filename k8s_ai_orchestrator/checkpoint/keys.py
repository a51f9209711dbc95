"""Where a step's checkpoints live: asset/op + partition + fingerprint, never the run id.

Every path component is percent-encoded, so no asset key, partition key or string key can
name a path outside the store's root (`../`, `/` and leading dots are all encoded).

Example:
    >>> key = CheckpointKey(("mosaic", "eu"), partition="2024-01-01/../x")
    >>> key.relative_path()
    'assets/mosaic/eu/p-2024-01-01%2F%2E%2E%2Fx'
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ..errors import CheckpointError


def encode_component(text: str) -> str:
    """Percent-encode one path component; the result has no `/` and no `.`.

    Example:
        >>> encode_component("../etc")
        '%2E%2E%2Fetc'
    """
    return quote(text, safe="").replace(".", "%2E")


@dataclass(frozen=True)
class CheckpointKey:
    """Identity of one step's checkpoints.

    Example:
        >>> CheckpointKey(("train",), namespace="keys").relative_path()
        'keys/train/unpartitioned'
    """

    parts: tuple[str, ...]  # asset key path, op handle path, or one user string
    partition: str | None = None  # partition key (or "start..end" for a range)
    fingerprint: str = ""  # code version: a different one starts fresh
    namespace: str = "assets"  # "assets" | "multi_assets" | "ops" | "keys"

    def __post_init__(self) -> None:
        if not self.parts or any(not p for p in self.parts):
            raise CheckpointError(
                f"checkpoint key {self.parts!r} is empty or has an empty component: "
                "pass a non-empty string such as open('tile-mosaic')"
            )

    def relative_path(self) -> str:
        """The key's folder under the store root (fingerprint is recorded, not in the path)."""
        part = "unpartitioned" if self.partition is None else f"p-{quote(self.partition, safe='')}"
        part = part.replace(".", "%2E")
        return "/".join([self.namespace, *(encode_component(p) for p in self.parts), part])

    def describe(self) -> str:
        """A human name for messages: `asset mosaic/eu, partition '2024-01-01'`."""
        kind = {"assets": "asset", "multi_assets": "multi-asset", "ops": "op"}.get(
            self.namespace, "key"
        )
        text = f"{kind} {'/'.join(self.parts)}"
        return text if self.partition is None else f"{text}, partition {self.partition!r}"


def key_from_context(context: Any, fingerprint: str | None = None) -> CheckpointKey:
    """Derive the key of the step a Dagster op or asset execution context runs.

    Args:
        context: an `AssetExecutionContext` or `OpExecutionContext`.
        fingerprint: overrides the default (the code version of the step's asset(s)).
    """
    op_ctx = getattr(context, "op_execution_context", context)
    partition = _partition_of(op_ctx)
    mapping_key = op_ctx.get_mapping_key()
    if op_ctx.has_assets_def:
        selected = sorted(op_ctx.selected_asset_keys, key=lambda k: k.path)
        versions = op_ctx.assets_def.code_versions_by_key
        default_fp = "+".join(versions.get(k) or "" for k in selected)
        if len(selected) == 1:
            parts: tuple[str, ...] = tuple(selected[0].path)
            namespace = "assets"
        else:
            parts, namespace = tuple(op_ctx.op_handle.path), "multi_assets"
    else:
        parts = (op_ctx.job_name, *op_ctx.op_handle.path)
        namespace = "ops"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            default_fp = op_ctx.op_def.version or ""
    if mapping_key is not None:
        parts = (*parts, f"mapping-{mapping_key}")
    return CheckpointKey(
        parts,
        partition=partition,
        fingerprint=default_fp if fingerprint is None else fingerprint,
        namespace=namespace,
    )


def _partition_of(op_ctx: Any) -> str | None:
    if op_ctx.has_partition_key:
        return str(op_ctx.partition_key)
    if op_ctx.has_partition_key_range:
        key_range = op_ctx.partition_key_range
        return f"{key_range.start}..{key_range.end}"
    return None
