"""One container as a local process group: environment, command line, RSS, status text.

The image is ignored (the command runs from the emulator's own environment, PATH and venv
included), except that names starting with "invalid/" or containing "does-not-exist" fail to
pull. Environment variables resolve the way the kubelet resolves them.

Example:
    >>> expand("$(A)-$(B)-$$(C)", {"A": "1"})
    '1-$(B)-$(C)'
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ...proctree import TreeSampler
from .quantity import to_milli
from .store import Obj, Store, now_rfc3339


def _default_signals() -> list[str]:
    """The prefix that starts a container's process with every signal at its default, as a
    container runtime does: a process spawned by a run worker in the background (SIGINT
    ignored, and Dagster maps SIGTERM to SIGINT's handler) would otherwise inherit an ignored
    SIGTERM and outlive every eviction until SIGKILL. GNU env's --default-signal; none where
    env lacks it."""
    env = shutil.which("env")
    if env is None:
        return []
    probe = subprocess.run([env, "--default-signal", "true"], capture_output=True, check=False)
    return [env, "--default-signal"] if probe.returncode == 0 else []


DEFAULT_SIGNALS = _default_signals()


class ContainerConfigError(Exception):
    """A reference the kubelet cannot resolve (CreateContainerConfigError)."""


def bad_image(image: str) -> bool:
    """Image names the emulated registry cannot pull."""
    return image.startswith("invalid/") or "does-not-exist" in image


_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion: unknown references stay as written, $$ escapes."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REF.sub(replace, text)


def _lookup(store: Store, kind: str, namespace: str, ref: Obj) -> dict[str, str] | None:
    resource = "secrets" if kind == "Secret" else "configmaps"
    found = store.get(resource, namespace, ref.get("name", ""))
    if found is None:
        if ref.get("optional"):
            return None
        raise ContainerConfigError(f'{kind.lower()} "{ref.get("name")}" not found')
    if kind == "Secret":
        return {k: base64.b64decode(v).decode() for k, v in (found.get("data") or {}).items()}
    return dict(found.get("data") or {})


def _field_value(pod: Obj, path: str) -> str:
    meta = pod["metadata"]
    if found := re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path):
        return str((meta.get(found.group(1)) or {}).get(found.group(2), ""))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": pod["spec"].get("nodeName"),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
        "status.hostIP": "127.0.0.1",
        "status.podIP": "127.0.0.1",
    }
    return str(simple.get(path) or "")


def _value_from(store: Store, pod: Obj, container: Obj, source: Obj) -> str | None:
    namespace = pod["metadata"]["namespace"]
    for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
        if key in source:
            ref = source[key]
            data = _lookup(store, kind, namespace, ref)
            if data is None:
                return None
            if ref["key"] not in data:
                if ref.get("optional"):
                    return None
                raise ContainerConfigError(
                    f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}"
                )
            return data[ref["key"]]
    if "fieldRef" in source:
        return _field_value(pod, source["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in source:
        section, _, name = source["resourceFieldRef"]["resource"].partition(".")
        value = ((container.get("resources") or {}).get(section) or {}).get(name, "0")
        return str(max(1, to_milli(value) // 1000) if name == "cpu" else to_milli(value) // 1000)
    return None


def resolve_env(store: Store, pod: Obj, container: Obj) -> dict[str, str]:
    """The container's environment (envFrom, then env), without the inherited one."""
    env: dict[str, str] = {}
    namespace = pod["metadata"]["namespace"]
    for source in container.get("envFrom") or []:
        for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
            if key in source:
                data = _lookup(store, kind, namespace, source[key]) or {}
                env.update({source.get("prefix", "") + k: v for k, v in data.items()})
    for var in container.get("env") or []:
        if "valueFrom" in var:
            value = _value_from(store, pod, container, var["valueFrom"])
            if value is not None:
                env[var["name"]] = value
        else:
            env[var["name"]] = expand(str(var.get("value", "")), env)
    return env


@dataclass
class Exit:
    """How a container process ended."""

    code: int
    reason: str  # Completed | Error | OOMKilled | StartError
    started_at: str
    finished_at: str
    message: str = ""


class ContainerProcess:
    """A running container: a process group with its log file and memory limit."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        memory_limit: int | None,
        message_from_log: bool = False,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        self.started_at = now_rfc3339()
        self.log_path = log_path
        self.message_from_log = message_from_log  # terminationMessagePolicy FallbackToLogsOnError
        self.memory_limit = memory_limit
        self.oom = False
        self.kill_deadline: float | None = None
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in reap()
        self.proc = subprocess.Popen(
            [*DEFAULT_SIGNALS, *argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._tree = TreeSampler(self.proc.pid)  # sampled each pass, members looked for each 1 s
        if on_exit is not None:  # react to the exit now rather than at the next sampling
            threading.Thread(target=self._wait_then, args=(on_exit,), daemon=True).start()

    def _wait_then(self, on_exit: Callable[[], None]) -> None:
        self.proc.wait()
        on_exit()

    def signal_group(self, signum: int) -> None:
        """Send a signal to the whole process group."""
        try:
            os.killpg(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def enforce_memory(self) -> None:
        """SIGKILL the group when its resident memory exceeds the memory limit (OOMKilled)."""
        limit = self.memory_limit
        if limit and not self.oom and self._tree.charged_memory(limit) > limit:
            self.oom = True
            self.signal_group(signal.SIGKILL)

    def memory_in_use(self) -> int:
        """The group's memory now, as the limit is enforced against (0 once it ended)."""
        try:
            return self._tree.charged_memory(self.memory_limit or 1 << 62)
        except (ProcessLookupError, PermissionError, OSError):
            return 0

    def reap(self) -> Exit | None:
        """The exit, once the main process ended; leftover group members are killed."""
        code = self.proc.poll()
        if code is None:
            return None
        self.signal_group(signal.SIGKILL)
        self._log.close()
        code = code if code >= 0 else 128 - code
        reason = "OOMKilled" if self.oom else ("Completed" if code == 0 else "Error")
        message = self._log_tail() if code and self.message_from_log else ""
        return Exit(code, reason, self.started_at, now_rfc3339(), message)

    def _log_tail(self) -> str:
        """What the kubelet keeps of a failed container's log: 80 lines, at most 2048 bytes."""
        lines = self.log_path.read_bytes().splitlines(keepends=True)[-80:]
        return b"".join(lines)[-2048:].decode(errors="replace")

    def group_alive(self) -> bool:
        """Whether any process of the group is still running."""
        if self.proc.poll() is None:
            return True
        try:
            os.killpg(self.proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def kill_now(self) -> None:
        """SIGKILL the group and reap the main process."""
        self.signal_group(signal.SIGKILL)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if not self._log.closed:
            self._log.close()


def start_error(message: str) -> Exit:
    """The terminated state of a container that could not start."""
    stamp = now_rfc3339()
    return Exit(128, "StartError", stamp, stamp, message)


def container_argv(container: Obj, env: dict[str, str]) -> list[str]:
    """command + args with $(VAR) references expanded."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    return [expand(str(part), env) for part in argv]


def memory_limit_of(container: Obj) -> int | None:
    """The container's memory limit in bytes, or None."""
    limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return to_milli(limit) // 1000 if limit else None


def terminated_state(exit: Exit, container_id: str) -> dict[str, Any]:
    """A containerStatus `state.terminated` object."""
    state: dict[str, Any] = {
        "exitCode": exit.code,
        "reason": exit.reason,
        "startedAt": exit.started_at,
        "finishedAt": exit.finished_at,
        "containerID": container_id,
    }
    if exit.message:
        state["message"] = exit.message
    return state
