"""Bad values for the Slurm script, the ssh transport and the checkpoint store are refused
before anything runs: no sbatch call, no job directory, no file outside the store's root.

Each table row names the value, the error type and the parts its message must contain.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from k8s_ai_orchestrator.backends.base import LaunchRequest
from k8s_ai_orchestrator.backends.slurm import SlurmBackend, SlurmConfig, config_from_mapping
from k8s_ai_orchestrator.backends.slurm.cli import CliTransport, CommandResult
from k8s_ai_orchestrator.backends.slurm.script import batch_job, render_script
from k8s_ai_orchestrator.checkpoint import CheckpointKey, CheckpointStore
from k8s_ai_orchestrator.errors import CheckpointError, ConfigError, GangError, SubmitError
from k8s_ai_orchestrator.gang import Gang
from k8s_ai_orchestrator.spec import ComputeSpec, GiB

pytestmark = pytest.mark.timeout(60)


# ---- a Slurm that answers like slurmctld and records every command ------------------------


@dataclass
class RecordingSlurm:
    """A `Runner` for `CliTransport`: answers the pre-flight queries of a 3-node partition with
    2 GPUs per node, accepts sbatch as job 42, and keeps every argv it was asked to run."""

    commands: list[list[str]]

    def __call__(self, argv: Sequence[str], stdin: str | None, timeout_s: float) -> CommandResult:
        self.commands.append(list(argv))
        if list(argv[:3]) == ["scontrol", "show", "partition"]:
            return CommandResult(0, "PartitionName=gpu Default=YES Nodes=n[1-3]\n", "")
        if list(argv[:3]) == ["scontrol", "show", "node"]:
            lines = [f"NodeName=n{i} CPUTot=64 RealMemory=512000 Gres=gpu:2" for i in (1, 2, 3)]
            return CommandResult(0, "\n".join(lines) + "\n", "")
        if argv[0] == "sbatch":
            return CommandResult(0, "42\n", "")
        if argv[0] in ("ssh", "scancel"):
            return CommandResult(0, "", "")
        return CommandResult(1, "", f"unexpected command {argv[0]}")

    @property
    def submitted(self) -> bool:
        return any(argv[0] == "sbatch" for argv in self.commands)


@pytest.fixture
def slurm() -> RecordingSlurm:
    return RecordingSlurm(commands=[])


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty working directory: a relative root would write here."""
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    yield here


def step(step_key: str = "train", **spec: Any) -> LaunchRequest:
    fields: dict[str, Any] = {"cpu": 4, "memory_bytes": 16 * GiB, "nodes": 2}
    fields.update(spec)
    return LaunchRequest(
        run_id="4f1c2d3e-aaaa-bbbb-cccc-0123456789ab",
        step_key=step_key,
        attempt=1,
        command=["/usr/bin/python3", "-m", "dagster", "api", "execute_step", "{}"],
        env={"K8S_AI_BACKEND": "slurm"},
        spec=ComputeSpec(**fields),
    )


def sbatch_arguments(line: str) -> list[str]:
    """The arguments sbatch reads from one `#SBATCH` line: a port of `_get_argument` in
    Slurm's src/sbatch/opt.c (backslash escapes one character, quotes group, an unescaped `#`
    starts a comment, and the words hetjob/packjob are blanked out before parsing)."""
    text = re.sub("packjob|hetjob", lambda m: " " * len(m[0]), line[len("#SBATCH") :], flags=re.I)
    arguments: list[str] = []
    i = 0
    while True:
        while i < len(text) and text[i] in " \t\v\f\r":
            i += 1
        if i >= len(text) or text[i] == "#":
            return arguments
        chars: list[str] = []
        quote, escaped = "", False
        while i < len(text) and (quote or text[i] not in " \t\v\f\r") and text[i] != "\n":
            char = text[i]
            i += 1
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
                continue
            elif quote:
                if char == quote:
                    quote = ""
                    continue
            elif char in "\"'":
                quote = char
                continue
            elif char == "#":
                i = len(text)
                break
            chars.append(char)
        arguments.append("".join(chars))


# ---- sbatch header fields ------------------------------------------------------------------

CONTROL = {
    "newline": "a100\n#SBATCH --uid=0",
    "trailing-newline": "a100\n",
    "carriage-return": "a100\r--uid=0",
    "nul": "a100\x00",
    "tab": "a\t100",
    "escape": "a100\x1b[2J",
    "line-separator": "a100\u2028--uid=0",
    "zero-width-joiner": "a1\u200d00",
}


@pytest.mark.parametrize("value", CONTROL.values(), ids=[f"gpu_type-{k}" for k in CONTROL])
def test_a_gpu_type_with_a_control_character_is_refused_before_sbatch(
    slurm: RecordingSlurm, tmp_path: Path, value: str
) -> None:
    backend = SlurmBackend(SlurmConfig(workdir=str(tmp_path / "slurm")), runner=slurm)

    with pytest.raises(SubmitError) as refusal:
        backend.submit(step(gpu=1, gpu_type=value))

    assert f"step 'train': gpu_type={value!r} contains a control character" in str(refusal.value)
    assert "cannot carry" in str(refusal.value)
    assert not slurm.submitted
    assert not (tmp_path / "slurm").exists()


HEADER_FIELDS = ["name", "comment", "partition", "account", "gpu_type", "job_dir", "output_path"]
HEADER_LABELS = {"name": "job name", "job_dir": "workdir", "output_path": "output"}


@pytest.mark.parametrize("field", HEADER_FIELDS)
@pytest.mark.parametrize("value", ["x\ny", "x\rz", "x\x00", "x\x7f", "x\u2029"], ids=repr)
def test_the_script_generator_refuses_a_control_character_in_every_header_field(
    field: str, value: str
) -> None:
    job = replace(batch_job(step(gpu=1, gpu_type="a100"), SlurmConfig()), **{field: value})

    with pytest.raises(SubmitError) as refusal:
        render_script(job)

    label = HEADER_LABELS.get(field, field)
    assert f"{label}={value!r} contains a control character" in str(refusal.value)


HOSTILE_BUT_CARRIED = {
    "hash": "/shared/ck#pt",
    "single-quote": "/shared/it's",
    "double-quote": '/shared/say"hi"',
    "backslash": "/shared/a\\b",
    "space": "/shared/my runs",
    "unicode": "/shared/données/日本",
    "hetjob-word": "/shared/HetJob/packjob",
    "option-like": "/shared/--uid=0 --chdir=/",
    "all-at-once": "/x/#'\"\\ é hetjob#",
}


@pytest.mark.parametrize(
    "value", HOSTILE_BUT_CARRIED.values(), ids=[f"job_dir-{k}" for k in HOSTILE_BUT_CARRIED]
)
def test_representable_hostile_paths_reach_sbatch_as_exactly_one_argument(value: str) -> None:
    job = replace(batch_job(step(), SlurmConfig()), job_dir=value, output_path=f"{value}/a.log")
    lines = [line for line in render_script(job).splitlines() if line.startswith("#SBATCH")]

    parsed = [sbatch_arguments(line) for line in lines]

    assert all(len(arguments) == 1 for arguments in parsed), parsed
    assert [f"--chdir={value}"] in parsed
    assert [f"--output={value}/a.log"] in parsed


@pytest.mark.parametrize(
    ("field", "value"),
    [("partition", "-p"), ("account", "--uid=0"), ("gpu_type", "-a100")],
    ids=["partition-leading-dash", "account-leading-dash", "gpu_type-leading-dash"],
)
def test_a_slurm_name_starting_with_a_dash_is_refused(field: str, value: str) -> None:
    job = replace(batch_job(step(gpu=1, gpu_type="a100"), SlurmConfig()), **{field: value})

    with pytest.raises(SubmitError, match=f"{field}='{value}' starts with '-'"):
        render_script(job)


def test_a_partition_with_a_trailing_newline_is_refused_before_anything_is_submitted(
    slurm: RecordingSlurm, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"slurm.partition='gpu\\n' is not a Slurm name"):
        SlurmBackend(SlurmConfig(partition="gpu\n", workdir=str(tmp_path)), runner=slurm)
    assert not slurm.submitted


# ---- workdir, ssh and timing settings ------------------------------------------------------


@dataclass(frozen=True)
class BadSetting:
    slurm: dict[str, Any]  # the executor's slurm: mapping
    message: Sequence[str]  # parts the ConfigError message contains


BAD_SETTINGS = {
    "workdir-relative": BadSetting({"workdir": "shared/k8s"}, ["slurm.workdir='shared/k8s'"]),
    "workdir-empty": BadSetting({"workdir": ""}, ["slurm.workdir=''", "absolute path"]),
    "workdir-newline": BadSetting(
        {"workdir": "/shared/x\n#SBATCH --uid=0"}, ["slurm.workdir=", "control characters"]
    ),
    "workdir-nul": BadSetting({"workdir": "/shared/x\x00"}, ["control characters"]),
    "workdir-backslash": BadSetting({"workdir": "/shared/a\\b"}, ["'\\'", "--output"]),
    "workdir-percent": BadSetting({"workdir": "/shared/%j"}, ["'%'"]),
    "workdir-space": BadSetting({"workdir": "/shared/my runs"}, ["whitespace"]),
    "ssh-option-injection": BadSetting(
        {"ssh_host": "-oProxyCommand=touch /tmp/pwned"},
        ["slurm.ssh_host='-oProxyCommand=touch /tmp/pwned'", "starts with '-'", "option"],
    ),
    "ssh-config-file": BadSetting({"ssh_host": "-F/tmp/evil"}, ["starts with '-'"]),
    "ssh-user-dash": BadSetting({"ssh_host": "-l@login1"}, ["starts with '-'"]),
    "ssh-host-dash-after-user": BadSetting({"ssh_host": "ml@-login1"}, ["is not a host name"]),
    "ssh-space": BadSetting({"ssh_host": "login1 rm -rf /"}, ["is not a host name"]),
    "ssh-newline": BadSetting({"ssh_host": "login1\n"}, ["is not a host name"]),
    "grace-negative": BadSetting({"grace_period_s": -1}, ["slurm.grace_period_s=-1", ">= 0"]),
    "grace-negative-fraction": BadSetting({"grace_period_s": -0.5}, ["grace_period_s=-0.5"]),
    "grace-bool": BadSetting({"grace_period_s": True}, ["grace_period_s=True"]),
    "grace-text": BadSetting({"grace_period_s": "30"}, ["grace_period_s='30'"]),
    "grace-equals-limit": BadSetting(
        {"grace_period_s": 60, "time_limit": 1},
        ["slurm.grace_period_s=60 must be shorter than slurm.time_limit=1 (60s)", "requeues"],
    ),
    "grace-over-limit": BadSetting(
        {"grace_period_s": 7200, "time_limit": "01:00:00"},
        ["grace_period_s=7200", "time_limit='01:00:00' (3600s)", "raise time_limit"],
    ),
    "grace-over-limit-rest": BadSetting(
        {
            "transport": "rest",
            "rest_url": "http://slurm:6820",
            "rest_user": "ml",
            "rest_token": "jwt",
            "grace_period_s": 120,
            "time_limit": 2,
        },
        ["grace_period_s=120", "(120s)"],
    ),
}


@pytest.mark.parametrize("case", BAD_SETTINGS.values(), ids=list(BAD_SETTINGS))
def test_bad_slurm_settings_are_refused_when_the_config_is_read(
    case: BadSetting, slurm: RecordingSlurm
) -> None:
    with pytest.raises(ConfigError) as refusal:
        SlurmBackend(config_from_mapping(case.slurm), runner=slurm)

    for part in case.message:
        assert part in str(refusal.value)
    assert slurm.commands == []


def test_the_ssh_host_follows_a_double_dash_in_every_ssh_command(slurm: RecordingSlurm) -> None:
    transport = CliTransport(SlurmConfig(ssh_host="ml@login1"), runner=slurm)

    transport.cancel("42")

    (argv,) = slurm.commands
    assert argv[:5] == ["ssh", "-o", "BatchMode=yes", "--", "ml@login1"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"timeout_s": 0}, "Gang(timeout_s=0.0): give seconds > 0"),
        ({"timeout_s": -5}, "Gang(timeout_s=-5.0): give seconds > 0"),
        ({"timeout_s": float("nan")}, "Gang(timeout_s=nan)"),
        ({"straggler_timeout_s": -1}, "Gang(straggler_timeout_s=-1.0): give seconds >= 0"),
        ({"workdir": "gang-scratch"}, "Gang(workdir='gang-scratch') is a relative path"),
        ({"workdir": "./x"}, "Gang(workdir='./x') is a relative path"),
    ],
    ids=["timeout-zero", "timeout-negative", "timeout-nan", "straggler-negative",
         "workdir-relative", "workdir-dot"],
)  # fmt: skip
def test_bad_gang_settings_are_refused_before_any_rank_starts(
    cwd: Path, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(GangError) as refusal:
        Gang(**settings).run(len, "abc")

    assert message in str(refusal.value)
    assert list(cwd.iterdir()) == []


# ---- checkpoint roots ----------------------------------------------------------------------

BAD_ROOTS = {
    "empty": ("", "is empty"),
    "blank": ("   ", "is empty"),
    "relative": ("ckpt", "is a relative path"),
    "dot-relative": ("./ckpt", "is a relative path"),
    "parent-relative": ("../ckpt", "is a relative path"),
    "home-tilde": ("~/ckpt", "is a relative path"),
    "file-url-relative": ("file://ckpt/run", "is a relative path"),
    "file-url-dot": ("file://./ckpt", "is a relative path"),
    "local-url-relative": ("local://ckpt", "is a relative path"),
    "newline": ("/data/ck\npt", "contains a control character"),
    "nul": ("file:///data/ckpt\x00", "contains a control character"),
    "tab-in-url": ("s3://bucket/a\tb", "contains a control character"),
}


@pytest.mark.parametrize(("root", "message"), BAD_ROOTS.values(), ids=list(BAD_ROOTS))
def test_a_root_every_process_would_resolve_differently_is_refused(
    cwd: Path, root: str, message: str
) -> None:
    with pytest.raises(CheckpointError) as refusal:
        CheckpointStore(root=root, handle_signals=False)  # refused when made, before any open

    assert f"CheckpointStore root={root!r} {message}" in str(refusal.value)
    assert "file:///data/checkpoints" in str(refusal.value)
    assert list(cwd.iterdir()) == []


def test_opening_something_that_is_neither_a_context_nor_a_key_is_refused(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(root=f"file://{tmp_path}", handle_signals=False)
    for bad in (42, None):
        with pytest.raises(CheckpointError, match=rf"open\({bad}\): pass the step's Dagster"):
            store.open(bad)


def _cycle() -> dict[str, object]:
    state: dict[str, object] = {"tiles": []}
    state["tiles"].append(state)  # type: ignore[attr-defined]
    return state


def _deep(levels: int) -> dict[str, object]:
    inner: list[object] = []
    for _ in range(levels):
        inner = [inner]
    return {"deep": inner}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (_cycle(), r"state\['tiles'\]\[0\]: it contains itself \(a cycle\)"),
        ({"n": 10**5000}, r"state\['n'\]: an int of 16610 bits .* save it as a str"),
        (_deep(150), r"nested deeper than 100 levels; flatten the state, or save it as bytes"),
    ],
    ids=["cycle", "huge-int", "too-deep"],
)
def test_a_state_json_cannot_hold_is_refused_with_where_it_is(
    tmp_path: Path, state: dict[str, object], message: str
) -> None:
    ckpt = CheckpointStore(root=f"file://{tmp_path}", handle_signals=False).open("tiles")

    with pytest.raises(CheckpointError, match=message):
        ckpt.save(state)

    assert ckpt.load() is None  # nothing was committed


@pytest.mark.parametrize("root", ["file://{tmp}/ckpt", "{tmp}/ckpt", "local://{tmp}/ckpt"])
def test_absolute_local_roots_are_accepted(cwd: Path, tmp_path: Path, root: str) -> None:
    ckpt = CheckpointStore(root=root.format(tmp=tmp_path), handle_signals=False).open("t")

    ckpt.save({"ok": 1})

    assert (tmp_path / "ckpt" / "keys" / "t").is_dir()
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("parts", [("",), ("mosaic", ""), ()], ids=["empty", "empty-part", "none"])
def test_an_empty_key_is_refused_before_anything_is_written(
    tmp_path: Path, parts: tuple[str, ...]
) -> None:
    with pytest.raises(CheckpointError, match="is empty or has an empty component"):
        CheckpointKey(parts)
    with pytest.raises(CheckpointError, match="empty"):
        CheckpointStore(root=f"file://{tmp_path}/root").open("")
    assert not (tmp_path / "root" / "keys").exists()


@pytest.mark.parametrize(
    "key", ["../../outside", "/etc/passwd", "a\nb", "..\\x", "ü/../../é"], ids=repr
)
def test_hostile_keys_stay_inside_the_root(tmp_path: Path, key: str) -> None:
    root = tmp_path / "root"
    CheckpointStore(root=f"file://{root}", handle_signals=False).open(key).save({"k": key})

    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(root in p.parents for p in written)


# ---- symbolic links below the root ---------------------------------------------------------


@dataclass(frozen=True)
class LinkCase:
    level: str  # what is replaced by a link to the victim folder
    act: Callable[[CheckpointStore], object]  # what the step then does


def _key_folder(root: Path) -> Path:
    return root / "keys" / "train" / "unpartitioned"


def _commits(root: Path) -> list[Path]:
    return sorted((_key_folder(root) / "data").iterdir())


def _link_level(root: Path, level: str, victim: Path) -> None:
    """Move one level of the saved key into `victim` and leave a symbolic link in its place."""
    key = _key_folder(root)
    latest = _commits(root)[-1]
    target = {
        "namespace": root / "keys",
        "key-folder": key,
        "data": key / "data",
        "manifest": key / "manifest.json",
        "latest-commit": latest,
        "data-file": latest / "state.json",
    }[level]
    moved = victim / f"{level}-{target.name}"
    shutil.move(target, moved)
    target.symlink_to(moved)


def _save(store: CheckpointStore) -> object:
    return store.open("train").save({"step": 3}, progress=3)


def _load(store: CheckpointStore) -> object:
    return store.open("train").load()


def _clear(store: CheckpointStore) -> object:
    store.open("train").clear()
    return None


LINKS = {
    "namespace-save": LinkCase("namespace", _save),
    "key-folder-save": LinkCase("key-folder", _save),
    "key-folder-load": LinkCase("key-folder", _load),
    "key-folder-clear": LinkCase("key-folder", _clear),
    "data-save": LinkCase("data", _save),
    "data-load": LinkCase("data", _load),
    "manifest-load": LinkCase("manifest", _load),
    "manifest-save": LinkCase("manifest", _save),
    "latest-commit-load": LinkCase("latest-commit", _load),
    "data-file-load": LinkCase("data-file", _load),
}


@pytest.fixture
def saved(tmp_path: Path) -> tuple[CheckpointStore, Path, Path]:
    """A store with two commits of key 'train', and a victim folder outside its root."""
    root, victim = tmp_path / "root", tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.bin").write_bytes(b"not a checkpoint")
    store = CheckpointStore(root=f"file://{root}", handle_signals=False)
    store.open("train").save({"step": 1}, progress=1)
    store.open("train").save({"step": 2}, progress=2)
    return store, root, victim


def _victim_files(victim: Path) -> dict[str, bytes]:
    return {str(p.relative_to(victim)): p.read_bytes() for p in victim.rglob("*") if p.is_file()}


@pytest.mark.parametrize("case", LINKS.values(), ids=list(LINKS))
def test_a_symbolic_link_below_the_root_is_never_followed(
    saved: tuple[CheckpointStore, Path, Path], case: LinkCase
) -> None:
    store, root, victim = saved
    _link_level(root, case.level, victim)
    before = _victim_files(victim)

    with pytest.raises(CheckpointError) as refusal:
        case.act(CheckpointStore(root=store.root, handle_signals=False))

    assert "is a symbolic link" in str(refusal.value)
    assert "never follow links below the store root" in str(refusal.value)
    assert _victim_files(victim) == before


def test_a_data_folder_linked_elsewhere_is_not_pruned_through_the_link(
    saved: tuple[CheckpointStore, Path, Path],
) -> None:
    store, root, victim = saved
    for name in ("000001-keep", "000002-keep", "other-data"):
        (victim / name).mkdir()
        (victim / name / "f").write_bytes(b"x")
    data = _key_folder(root) / "data"
    data.rename(data.with_name("data.moved"))
    data.symlink_to(victim)

    with pytest.raises(CheckpointError, match="data is a symbolic link"):
        store.open("train").save({"step": 3})

    assert sorted(p.name for p in victim.iterdir()) == [
        "000001-keep", "000002-keep", "other-data", "precious.bin",
    ]  # fmt: skip


def test_an_old_commit_folder_that_is_a_link_is_unlinked_when_pruned_not_emptied(
    saved: tuple[CheckpointStore, Path, Path],
) -> None:
    store, root, victim = saved
    oldest = _commits(root)[0]
    oldest.rename(oldest.with_name("moved"))
    oldest.symlink_to(victim)

    store.open("train").save({"step": 3})  # keep=2: the oldest commit is pruned

    assert not os.path.lexists(oldest)
    assert _victim_files(victim) == {"precious.bin": b"not a checkpoint"}


def test_a_root_that_is_a_link_is_resolved_once_and_used(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "root").symlink_to(real)

    CheckpointStore(root=f"file://{tmp_path}/root", handle_signals=False).open("t").save({"a": 1})

    assert (real / "keys" / "t" / "unpartitioned" / "manifest.json").is_file()
