"""What a Job's spec and status say about its pods, apart from the controller's passes: the
completed indexes of an Indexed Job, and the podFailurePolicy rule a failed pod matches.

Example:
    >>> format_indexes({0, 1, 2, 5})
    '0-2,5'
    >>> sorted(parse_indexes("0-2,5"))
    [0, 1, 2, 5]
"""

from __future__ import annotations

from .store import Obj


def format_indexes(indexes: set[int]) -> str:
    """As the Job controller writes them: runs of 3 or more as "0-2", a pair as "0,1"."""
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    parts = [
        str(first) if first == last else f"{first}{',' if last == first + 1 else '-'}{last}"
        for first, last in runs
    ]
    return ",".join(parts)


def parse_indexes(text: str | None) -> set[int]:
    """The indexes of a `completedIndexes` string ("0-2,5" → {0, 1, 2, 5})."""
    found: set[int] = set()
    for part in (text or "").split(","):
        if "-" in part:
            low, high = part.split("-")
            found.update(range(int(low), int(high) + 1))
        elif part:
            found.add(int(part))
    return found


def failure_policy_match(job: Obj, pod: Obj) -> tuple[str, str] | None:
    """(action, message) of the first podFailurePolicy rule matching a failed pod."""
    rules = ((job["spec"].get("podFailurePolicy") or {}).get("rules")) or []
    pod_name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for index, rule in enumerate(rules):
        action = rule["action"]
        on_codes = rule.get("onExitCodes")
        if on_codes:
            for status in statuses:
                code = ((status.get("state") or {}).get("terminated") or {}).get("exitCode")
                if not code or on_codes.get("containerName") not in (None, status["name"]):
                    continue
                if (code in on_codes["values"]) == (on_codes["operator"] == "In"):
                    return action, (
                        f"Container {status['name']} for pod {pod_name} failed with exit code "
                        f"{code} matching {action} rule at index {index}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition["type"] == pattern["type"] and condition["status"] == pattern.get(
                    "status", "True"
                ):
                    return action, (
                        f"Pod {pod_name} has condition {pattern['type']} matching {action} rule "
                        f"at index {index}"
                    )
    return None
