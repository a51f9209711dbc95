"""Find or build the `kubeplane` binary (`scripts/build-kubeplane.sh`), Kueue
(`scripts/build-kueue.sh`), Karpenter (`scripts/build-karpenter.sh`), the real node's programs
(`scripts/build-node.sh`) and the real vCluster syncer (`scripts/build-vcluster.sh`).

Example:
    >>> bin_dir = build_kubeplane(Path("scripts/build-kubeplane.sh"))  # doctest: +SKIP
    >>> (bin_dir / "kube-apiserver").exists()  # doctest: +SKIP
    True
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from .process import ControlPlaneError

NO_GO_EXIT_CODE = 3  # the build script's "no Go toolchain" exit code
NOT_BUILT_EXIT_CODE = 4  # `--check` and no cached binary


class KubeplaneUnavailable(ControlPlaneError):
    """No `kubeplane` binary and no way (or no leave) to build it; the caller decides whether
    that is fatal."""


class KueueUnavailable(ControlPlaneError):
    """No Kueue build and no way (or no leave) to build it; the caller decides whether that is
    fatal."""


class KarpenterUnavailable(ControlPlaneError):
    """No Karpenter build and no way (or no leave) to build it; the caller decides whether
    that is fatal."""


class NodeProgramsUnavailable(ControlPlaneError):
    """No build of the real node's programs (containerd, CNI plugins, pause) and no way (or no
    leave) to build them; the caller decides whether that is fatal."""


class VClusterUnavailable(ControlPlaneError):
    """No build of the real vCluster syncer and no way (or no leave) to build it; the caller
    decides whether that is fatal."""


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    # stderr (go build progress) passes through to the terminal
    return subprocess.run(list(argv), stdout=subprocess.PIPE, text=True, check=False)


def build_kubeplane(script: Path, *, check_only: bool = False, run: Runner = _run) -> Path:
    """Run the build script (a no-op when the binary is cached) and return the binary dir.

    With `check_only` nothing is built: a binary that is not cached yet is unavailable.

    Raises:
        KubeplaneUnavailable: the script found no `go`, or (`check_only`) no cached binary.
        ControlPlaneError: the build failed.
    """
    return _build(
        script,
        "kubeplane",
        "the real control plane",
        "about 20 min the first time",
        KubeplaneUnavailable,
        check_only=check_only,
        run=run,
    )


def build_kueue(script: Path, *, check_only: bool = False, run: Runner = _run) -> Path:
    """Run `scripts/build-kueue.sh` (a no-op when cached) and return the directory with the
    `kueue` binary, its CRDs (`crds/`) and `webhook-manifests.yaml`.

    Example:
        >>> bin_dir = build_kueue(Path("scripts/build-kueue.sh"))  # doctest: +SKIP
        >>> (bin_dir / "kueue").exists()  # doctest: +SKIP
        True

    Raises:
        KueueUnavailable: the script found no `go`, or (`check_only`) no cached build.
        ControlPlaneError: the build failed.
    """
    return _build(
        script,
        "kueue",
        "Kueue",
        "about 10 min on 2 cores the first time",
        KueueUnavailable,
        check_only=check_only,
        run=run,
    )


def build_karpenter(script: Path, *, check_only: bool = False, run: Runner = _run) -> Path:
    """Run `scripts/build-karpenter.sh` (a no-op when cached) and return the directory with the
    `karpenter` binary (core and its kwok cloud provider) and its CRDs (`crds/`).

    Example:
        >>> bin_dir = build_karpenter(Path("scripts/build-karpenter.sh"))  # doctest: +SKIP
        >>> (bin_dir / "karpenter").exists()  # doctest: +SKIP
        True

    Raises:
        KarpenterUnavailable: the script found no `go`, or (`check_only`) no cached build.
        ControlPlaneError: the build failed.
    """
    return _build(
        script,
        "karpenter",
        "Karpenter",
        "about 5 min on 2 cores the first time",
        KarpenterUnavailable,
        check_only=check_only,
        run=run,
    )


def build_node(script: Path, *, check_only: bool = False, run: Runner = _run) -> Path:
    """Run `scripts/build-node.sh` (a no-op when cached) and return the directory with
    `containerd`, `containerd-shim-runc-v2`, `ctr`, `pause` and `cni/`.

    Example:
        >>> bin_dir = build_node(Path("scripts/build-node.sh"))  # doctest: +SKIP
        >>> (bin_dir / "cni" / "bridge").exists()  # doctest: +SKIP
        True

    Raises:
        NodeProgramsUnavailable: the script found no `go` or `gcc`, or (`check_only`) no
            cached build.
        ControlPlaneError: the build failed.
    """
    return _build(
        script,
        "containerd",
        "the real node",
        "about 7 min on 2 cores the first time",
        NodeProgramsUnavailable,
        check_only=check_only,
        run=run,
    )


def build_vcluster(script: Path, *, check_only: bool = False, run: Runner = _run) -> Path:
    """Run `scripts/build-vcluster.sh` (a no-op when cached) and return the directory with
    the `vcluster` syncer binary and its chart's `values.yaml`.

    Example:
        >>> bin_dir = build_vcluster(Path("scripts/build-vcluster.sh"))  # doctest: +SKIP
        >>> (bin_dir / "values.yaml").exists()  # doctest: +SKIP
        True

    Raises:
        VClusterUnavailable: the script found no `go`, or (`check_only`) no cached build.
        ControlPlaneError: the build failed.
    """
    return _build(
        script,
        "vcluster",
        "the real vCluster syncer",
        "about 5 min on 2 cores the first time",
        VClusterUnavailable,
        check_only=check_only,
        run=run,
    )


def _build(
    script: Path,
    binary: str,
    what: str,
    cold_time: str,
    unavailable: type[ControlPlaneError],
    *,
    check_only: bool,
    run: Runner,
) -> Path:
    result = run(["bash", str(script), *(["--check"] if check_only else [])])
    lines = result.stdout.strip().splitlines()
    if result.returncode == NO_GO_EXIT_CODE:
        raise unavailable(
            f"{script} found no Go toolchain (or C compiler); install Go >= 1.26 to run {what}"
        )
    if result.returncode == NOT_BUILT_EXIT_CODE:
        raise unavailable(f"{binary} is not built; run {script} ({cold_time})")
    if result.returncode != 0 or not lines:
        raise ControlPlaneError(
            f"{script} failed with exit code {result.returncode}; run it by hand to see the "
            "go build error"
        )
    bin_dir = Path(lines[-1])
    if not (bin_dir / binary).is_file():
        raise ControlPlaneError(f"{script} printed {bin_dir}, which has no {binary} binary")
    return bin_dir
