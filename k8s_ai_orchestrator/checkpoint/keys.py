"""Where a step's checkpoints live: asset/op + partition + fingerprint, never the run id.

The fingerprint is the step's code version plus, for a Dagster step, a digest of its inputs:
the data versions of its upstream assets as Dagster records them, and its op config. A
checkpoint made on other inputs is never resumed (docs/checkpoints.md, "Which runs resume").

Every path component is percent-encoded, so no asset key, partition key or string key can
name a path outside the store's root (`../`, `/` and leading dots are all encoded).

Example:
    >>> key = CheckpointKey(("mosaic", "eu"), partition="2024-01-01/../x")
    >>> key.relative_path()
    'assets/mosaic/eu/p-2024-01-01%2F%2E%2E%2Fx'
"""

from __future__ import annotations

import hashlib
import json
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
    fingerprint: str = ""  # code version [+ "|inputs=" digest]: a different one starts fresh
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


INPUTS_MARK = "|inputs="  # separates the code version from the inputs digest


def with_inputs(code: str, inputs: dict[str, str]) -> str:
    """The fingerprint of `code` run on `inputs` (name -> identity of what was read).

    Example:
        >>> with_inputs("v1", {})
        'v1'
        >>> with_inputs("v1", {"asset:batch": "dv-1"})
        'v1|inputs=96dd5aa33f002683'
    """
    if not inputs:
        return code
    blob = json.dumps(inputs, sort_keys=True).encode()
    return f"{code}{INPUTS_MARK}{hashlib.sha256(blob).hexdigest()[:16]}"


def what_changed(saved: str, current: str) -> str:
    """Which part of two different fingerprints differs, for the warning a step logs.

    Example:
        >>> what_changed("v1|inputs=aa", "v1|inputs=bb")
        'its inputs changed: an upstream asset has a new data version, or the op config differs'
        >>> what_changed("v1", "v2")
        'its code version changed'
    """
    if saved.split(INPUTS_MARK)[0] != current.split(INPUTS_MARK)[0]:
        return "its code version changed"
    return "its inputs changed: an upstream asset has a new data version, or the op config differs"


def key_from_context(context: Any, fingerprint: str | None = None) -> CheckpointKey:
    """Derive the key of the step a Dagster op or asset execution context runs.

    Args:
        context: an `AssetExecutionContext` or `OpExecutionContext`.
        fingerprint: replaces the code-version part of the fingerprint (the code version of
            the step's asset(s) by default); the inputs part is always added.
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
    code = default_fp if fingerprint is None else fingerprint
    return CheckpointKey(
        parts,
        partition=partition,
        fingerprint=with_inputs(code, inputs_of(op_ctx)),
        namespace=namespace,
    )


def inputs_of(op_ctx: Any) -> dict[str, str]:
    """What a step reads, each named with the identity Dagster gives it.

    - an upstream asset: its data version as recorded for this step's provenance (a partitioned
      one: the digest of its mapped partitions' versions), else the storage id of its latest
      materialization or observation, or "none" when it was never materialized;
    - the op config, when the step has one;
    - an op with inputs from other ops (which carry no data version): the run family (the
      root run id), so a re-execution of a failed run resumes and a new run starts fresh.
    """
    found: dict[str, str] = {}
    if op_ctx.has_assets_def:
        step = op_ctx.get_step_execution_context()
        selected = set(op_ctx.selected_asset_keys)
        deps = {d for key in selected for d in op_ctx.assets_def.asset_deps.get(key, ())}
        for dep in sorted(deps - selected, key=lambda k: k.path):
            info = step.maybe_fetch_and_get_input_asset_version_info(dep)
            if info is None:
                identity = "none"
            elif info.data_version is not None:
                identity = f"data-version:{info.data_version.value}"
            else:
                identity = f"storage-id:{info.storage_id}"
            found[f"asset:{dep.to_user_string()}"] = identity
    elif op_ctx.op_def.input_defs:
        run = op_ctx.run
        found["run-family"] = run.root_run_id or run.run_id
    config = op_ctx.op_config
    if config is not None:
        found["config"] = json.dumps(config, sort_keys=True, default=str)
    return found


def _partition_of(op_ctx: Any) -> str | None:
    if op_ctx.has_partition_key:
        return str(op_ctx.partition_key)
    if op_ctx.has_partition_key_range:
        key_range = op_ctx.partition_key_range
        return f"{key_range.start}..{key_range.end}"
    return None
