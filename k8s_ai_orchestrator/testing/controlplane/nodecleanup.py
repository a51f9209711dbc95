"""What a real node leaves on the machine, and how it is put back.

The kubelet and containerd change machine-wide sysctls, start shims and containers outside the
harness's process tree, mount overlays, tmpfs volumes and pod network namespaces, and create
cgroups. `NodeRecord` is written (as JSON, to a fixed place under /run) before any of that
happens and names all of it by id; `clean_up` ends it all: at stop, and again at the next
start when a crashed run left its record behind.

Example:
    >>> record = NodeRecord("n1", "/tmp/n1", "k8sai-n1", "/k8sai-n1", {"vm/overcommit_memory": "0"})
    >>> NodeRecord.from_json(record.to_json()) == record
    True
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .nodeconfig import CNI_NETWORK, RUNC

RECORD_DIR = Path("/run/k8s-ai-orchestrator")  # tmpfs: a reboot resets everything it names
# Every sysctl the kubelet sets (its setupKernelTunables) and the harness raises.
TOUCHED_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "fs/inotify/max_user_instances",
    "fs/inotify/max_user_watches",
)
CGROUP_V1 = Path("/sys/fs/cgroup")
# Directories the kubelet and the CNI library create outside the node's directory, whatever
# their configuration, deepest first (libcni caches each attachment under /var/lib/cni/results).
FIXED_DIRS = (
    Path("/var/log/containers"),
    Path("/var/lib/kubelet/device-plugins"),
    Path("/var/lib/kubelet"),
    Path("/var/lib/cni/results"),
    Path("/var/lib/cni"),
)
SHIM_BINARY = "containerd-shim-runc-v2"

Run = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def run_quietly(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run `argv`, capturing its output; never raises for a non-zero exit."""
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def read_sysctls(names: Iterable[str] = TOUCHED_SYSCTLS) -> dict[str, str]:
    """The current values of `names` (paths under /proc/sys), those that exist."""
    values = {}
    for name in names:
        try:
            values[name] = (Path("/proc/sys") / name).read_text().strip()
        except OSError:
            continue
    return values


def write_sysctls(values: dict[str, str]) -> list[str]:
    """Write each value back; returns the names that could not be written."""
    failed = []
    for name, value in values.items():
        path = Path("/proc/sys") / name
        try:
            if path.read_text().strip() != value:
                path.write_text(value)
        except OSError:
            failed.append(name)
    return failed


@dataclass(frozen=True)
class NodeRecord:
    """What one real node may leave behind, written before it starts."""

    name: str
    root: str  # the node's directory (NodeLayout.root)
    netns: str  # the network namespace containerd and the pods' bridge live in
    cgroup_root: str  # the kubelet's cgroupRoot, e.g. "/k8sai-n1"
    sysctls: dict[str, str]  # the values before the node started
    created_dirs: list[str] = field(default_factory=list)  # FIXED_DIRS that were new

    def to_json(self) -> str:
        """The record as JSON."""
        return json.dumps(asdict(self), indent=2)

    @staticmethod
    def from_json(text: str) -> NodeRecord:
        """The record from `to_json`'s text."""
        return NodeRecord(**json.loads(text))


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _kill(pid: int, expected: str) -> bool:
    """SIGKILL `pid` when its command line still contains `expected` (pids are reused)."""
    if not any(expected in part for part in _cmdline(pid)):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _flag(argv: list[str], name: str) -> str | None:
    """The value after `name` in `argv`, None without one."""
    index = argv.index(name) if name in argv else len(argv)
    return argv[index + 1] if index + 1 < len(argv) else None


def shim_pids(root: Path) -> list[int]:
    """The shims of the node at `root`: each task bundle's id (a directory under the state
    dir) is a shim's `-id`, and every shim names the node's socket as its `-address`."""
    tasks = root / "state" / "io.containerd.runtime.v2.task"
    ids = {bundle.name for bundle in tasks.glob("*/*")}
    socket = str(root / "containerd.sock")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = _cmdline(int(entry.name))
        if not argv or not argv[0].endswith(SHIM_BINARY):
            continue
        if _flag(argv, "-address") == socket and _flag(argv, "-id") in ids:
            pids.append(int(entry.name))
    return pids


def end_containers(root: Path, run: Run = run_quietly) -> list[str]:
    """SIGKILL and delete, by id, every container runc holds state for under the node's runc
    root, then SIGKILL every shim of its task bundles; returns the container ids ended."""
    ended = []
    for state in sorted((root / "runc").glob("*/*/state.json")):  # <root>/runc/<ns>/<id>/
        container_id, runc = state.parent.name, [RUNC, "--root", str(state.parent.parent)]
        run([*runc, "kill", "--all", container_id, "KILL"])
        run([*runc, "delete", "--force", container_id])
        ended.append(container_id)
    for pid in shim_pids(root):
        _kill(pid, SHIM_BINARY)
    return ended


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first (from /proc/self/mountinfo)."""
    prefix = str(root)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=lambda p: (p.count("/"), p), reverse=True)


def unmount_all(root: Path, run: Run = run_quietly) -> list[str]:
    """Lazily unmount everything at or below `root`; returns what is still mounted."""
    for _ in range(3):  # a lazy unmount may reveal a mount that was under another
        points = mounts_under(root)
        if not points:
            return []
        for point in points:
            run(["umount", "-l", point])
    return mounts_under(root)


def v1_hierarchies(
    hierarchies: Path = CGROUP_V1, kinds: tuple[str, ...] = ("cgroup",)
) -> list[Path]:
    """The mounted cgroup v1 hierarchies; with `kinds` ("cgroup", "cgroup2") also the cgroup2
    mount beside them (`unified`, where runc mirrors each container's cgroup)."""
    mounts = {
        line.split()[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[2] in kinds
    }
    return sorted(p for p in hierarchies.iterdir() if str(p) in mounts)


def make_cgroups(cgroup_root: str, hierarchies: Path = CGROUP_V1) -> None:
    """Create the kubelet's `cgroupRoot` in every v1 hierarchy (the kubelet refuses to start
    without it); a new cpuset gets its parent's CPUs and memory nodes, or it could hold no
    process."""
    for hierarchy in v1_hierarchies(hierarchies):
        top = hierarchy / cgroup_root.strip("/")
        top.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (top / name).exists() and not (top / name).read_text().strip():
                (top / name).write_text((hierarchy / name).read_text())


def remove_cgroups(cgroup_root: str, hierarchies: Path = CGROUP_V1) -> list[str]:
    """rmdir the kubelet's cgroup tree in every v1 hierarchy, deepest first; returns those
    left (a cgroup that still holds a process cannot be removed)."""
    left = []
    for hierarchy in v1_hierarchies(hierarchies, ("cgroup", "cgroup2")):
        top = hierarchy / cgroup_root.strip("/")
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for directory in [*dirs, top]:
            try:
                directory.rmdir()
            except OSError:
                left.append(str(directory))
    return left


def remove_fixed_traces(record: NodeRecord) -> None:
    """Remove what the node left in FIXED_DIRS: the container-log links into its directory,
    libcni's cache of its pods' attachments (a pod killed at stop never had its network
    deleted), the kubelet's device-plugin socket; then each of FIXED_DIRS the node created,
    when empty."""
    logs = FIXED_DIRS[0]
    if logs.is_dir():
        for link in logs.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(record.root + "/"):
                link.unlink(missing_ok=True)
    results = Path("/var/lib/cni/results")
    for sandbox in [p.name.split("-")[1] for p in results.glob(f"{CNI_NETWORK}-*")]:
        for cached in results.glob(f"*-{sandbox}-*"):
            cached.unlink(missing_ok=True)
    if "/var/lib/kubelet/device-plugins" in record.created_dirs:
        Path("/var/lib/kubelet/device-plugins/kubelet.sock").unlink(missing_ok=True)
    for directory in record.created_dirs:  # deepest first, as recorded
        try:
            Path(directory).rmdir()
        except OSError:
            continue


def clean_up(record: NodeRecord, run: Run = run_quietly, settle_s: float = 0.5) -> list[str]:
    """End and remove everything `record` names (its kubelet and containerd must be stopped
    already); returns what could not be undone, as messages (empty when all is clean)."""
    root = Path(record.root)
    end_containers(root, run)
    time.sleep(settle_s)  # let the killed processes leave their cgroups and mounts
    problems = [f"still mounted: {p}" for p in unmount_all(root, run)]
    if Path(f"/run/netns/{record.netns}").exists():
        result = run(["ip", "netns", "delete", record.netns])
        if result.returncode != 0:
            problems.append(f"ip netns delete {record.netns}: {result.stderr.strip()}")
    problems += [f"cgroup not removed: {c}" for c in remove_cgroups(record.cgroup_root)]
    problems += [f"sysctl not restored: {n}" for n in write_sysctls(record.sysctls)]
    remove_fixed_traces(record)
    return problems
