"""OCI image archives written with the standard library, for a node that pulls nothing.

An archive holds one image: `oci-layout`, `index.json` (its manifest annotated with the image
name that `ctr images import` tags it with) and content-addressed blobs: the manifest, the
config and one uncompressed layer. `ctr -n k8s.io images import FILE` loads it for the CRI.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> out = Path(tempfile.mkdtemp()) / "base.tar"
    >>> image = write_image(out, "k8s-ai.test/base:1", base_layer(), ImageConfig())
    >>> image.name, out.exists()
    ('k8s-ai.test/base:1', True)
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Debian's merged /usr, and the mount points a container runtime expects to exist.
MERGED_USR_LINKS = (
    ("bin", "usr/bin"),
    ("lib", "usr/lib"),
    ("lib64", "usr/lib64"),
    ("sbin", "usr/sbin"),
)
BASE_DIRS = ("usr", "dev", "proc", "sys", "etc", "tmp", "run", "var", "var/tmp", "root")


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a directory, a regular file (`data`) or a symlink (`target`)."""

    path: str  # relative, e.g. "usr/bin"
    mode: int = 0o755
    data: bytes | None = None  # a regular file when set
    target: str | None = None  # a symlink when set


@dataclass(frozen=True)
class ImageConfig:
    """The runtime defaults of an image (`config` of the OCI image configuration)."""

    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Sequence[str] = (f"PATH={DEFAULT_PATH}",)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WrittenImage:
    """An archive on disk and what it holds."""

    name: str  # e.g. "k8s-ai.test/pause:1"
    archive: Path
    manifest_digest: str  # "sha256:..."


def base_layer() -> list[Entry]:
    """A tiny root: the merged-/usr links and empty mount points, nothing to run.

    Pods on it mount the host's `/usr` (hostPath, read-only) to find programs and libraries.
    """
    dirs = [Entry(name) for name in BASE_DIRS]
    dirs[BASE_DIRS.index("tmp")] = Entry("tmp", mode=0o1777)
    links = [Entry(name, mode=0o777, target=target) for name, target in MERGED_USR_LINKS]
    return [*dirs, *links]


def pause_layer(pause_binary: Path) -> list[Entry]:
    """The layer of a pause image: the static `pause` program at `/pause`."""
    return [Entry("pause", data=pause_binary.read_bytes())]


def layer_tar(entries: Sequence[Entry]) -> bytes:
    """An uncompressed, reproducible tar of `entries` (owner root, mtime 0)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.path)
            info.mode = entry.mode
            if entry.target is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = entry.target
                tar.addfile(info)
            elif entry.data is not None:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
            else:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
    return buffer.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_image(
    archive: Path, name: str, entries: Sequence[Entry], config: ImageConfig
) -> WrittenImage:
    """Write a one-layer linux/amd64 image named `name` as an OCI archive at `archive`.

    Args:
        archive: the tar file to write (its directory must exist).
        name: the full image reference the import tags, e.g. "k8s-ai.test/base:1".
        entries: the layer's members.
        config: entrypoint, command, environment and labels.
    """
    layer = layer_tar(entries)
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": list(config.entrypoint) or None,
            "Cmd": list(config.cmd) or None,
            "Env": list(config.env),
            "Labels": dict(config.labels) or None,
        },
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
    }
    config_blob = _json(image_config)
    manifest_blob = _json(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {
                "mediaType": MEDIA_CONFIG,
                "digest": _digest(config_blob),
                "size": len(config_blob),
            },
            "layers": [{"mediaType": MEDIA_LAYER, "digest": _digest(layer), "size": len(layer)}],
        }
    )
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": _digest(manifest_blob),
                "size": len(manifest_blob),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    members = [
        ("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
        ("index.json", _json(index)),
        *((f"blobs/sha256/{_digest(b)[7:]}", b) for b in (layer, config_blob, manifest_blob)),
    ]
    with tarfile.open(archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in members:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return WrittenImage(name, archive, _digest(manifest_blob))
