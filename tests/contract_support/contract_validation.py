"""The contract's validation checks: what the API server refuses, with its exact words.

Each refusal's code, reason, message and causes were copied from a real Kubernetes v1.37.2
API server; a manifest the backend builds wrongly must fail the same way on the emulator.
Accepted variants are sent with `dryRun=All`, so these checks start no pod.

Example:
    >>> LABEL_KEY_HELP.split(",")[0]
    'name part must consist of alphanumeric characters'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.contract_support.contract_target import Answer, ContractTarget, request

LABEL_KEY_HELP = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_HELP = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
ENV_NAME_HELP = (
    "a valid environment variable name must consist only of printable ASCII characters other "
    "than '='"
)
CONFIG_KEY_HELP = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
QUANTITY_HELP = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def _pod(pod_name: str, meta: dict[str, Any] | None = None, **container: Any) -> dict[str, Any]:
    main = {"name": "main", "image": "python:3.12-slim", **container}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, **(meta or {})},
        "spec": {"containers": [main], "restartPolicy": "Never"},
    }


def _create(target: ContractTarget, plural: str, body: dict[str, Any], dry: bool = False) -> Answer:
    group = "/apis/batch/v1" if plural == "jobs" else "/api/v1"
    if plural == "priorityclasses":
        path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    else:
        path = f"{group}/namespaces/{target.namespace}/{plural}"
    return request(target, "POST", path + ("?dryRun=All" if dry else ""), body)


def _invalid(answer: Answer, message: str, causes: list[tuple[str, str, str]]) -> None:
    """A 422 Invalid whose message and (field, reason, message) causes are exactly these."""
    assert (answer.status, answer.body.get("reason")) == (422, "Invalid"), answer
    assert answer.body["message"] == message, answer.body["message"]
    got = [(c["field"], c["reason"], c["message"]) for c in answer.body["details"]["causes"]]
    assert got == causes, got


def _one_invalid(answer: Answer, kind: str, name: str, field: str, text: str) -> None:
    """A 422 Invalid with a single cause."""
    reason = "FieldValueRequired" if text == "Required value" else "FieldValueInvalid"
    _invalid(answer, f'{kind} "{name}" is invalid: {field}: {text}', [(field, reason, text)])


def check_labels_and_annotations_are_validated(target: ContractTarget) -> None:
    """Label keys and values, annotation keys and size: 422 Invalid naming the field."""
    cases = [
        ("contract-lk", {"labels": {"bad key!": "x"}}, "metadata.labels",
         f'Invalid value: "bad key!": {LABEL_KEY_HELP}'),
        ("contract-lv", {"labels": {"ok": "bad value!"}}, "metadata.labels",
         f'Invalid value: "bad value!": {LABEL_VALUE_HELP}'),
        ("contract-ll", {"labels": {"ok": "x" * 64}}, "metadata.labels",
         f'Invalid value: "{"x" * 64}": must be no more than 63 bytes'),
        ("contract-ak", {"annotations": {"bad key!": "x"}}, "metadata.annotations",
         f'Invalid value: "bad key!": {LABEL_KEY_HELP}'),
    ]  # fmt: skip
    for name, meta, field, text in cases:
        _one_invalid(_create(target, "pods", _pod(name, meta)), "Pod", name, field, text)
    big = _pod("contract-ab", {"annotations": {"big": "x" * 262145}})
    _invalid(
        _create(target, "pods", big),
        'Pod "contract-ab" is invalid: metadata.annotations: Too long: may not be more than '
        "262144 bytes",
        [
            (
                "metadata.annotations",
                "FieldValueTooLong",
                "Too long: may not be more than 262144 bytes",
            )
        ],
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "contract-jl", "labels": {"bad key!": "x"}},
        "spec": {"template": {"spec": _pod("x")["spec"]}},
    }
    text = f'Invalid value: "bad key!": {LABEL_KEY_HELP}'
    _one_invalid(_create(target, "jobs", job), "Job.batch", "contract-jl", "metadata.labels", text)


def check_env_and_container_names_are_validated(target: ContractTarget) -> None:
    """Env names: any printable ASCII but '='; container names: DNS labels."""
    env = "spec.containers[0].env[0].name"
    bad = _pod("contract-env", env=[{"name": "1 BAD=", "value": "x"}])
    _one_invalid(
        _create(target, "pods", bad),
        "Pod",
        "contract-env",
        env,
        f'Invalid value: "1 BAD=": {ENV_NAME_HELP}',
    )
    empty = _pod("contract-env-empty", env=[{"name": "", "value": "x"}])
    _one_invalid(_create(target, "pods", empty), "Pod", "contract-env-empty", env, "Required value")
    for name in ("MY-VAR", "1BAD", "a.b"):
        relaxed = _pod("contract-env-ok", env=[{"name": name, "value": "x"}])
        assert _create(target, "pods", relaxed, dry=True).status == 201, name
    container = _pod("contract-cn", name="Main_1")
    label = (
        'Invalid value: "Main_1": a lowercase RFC 1123 label must consist of lower case '
        "alphanumeric characters or '-', and must start and end with an alphanumeric character "
        "(e.g. 'my-name',  or '123-abc', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    )
    _one_invalid(
        _create(target, "pods", container), "Pod", "contract-cn", "spec.containers[0].name", label
    )


def check_quantities_are_validated(target: ContractTarget) -> None:
    """A malformed quantity is 400; negative, request over limit or a fractional GPU: 422."""
    malformed = _create(
        target, "pods", _pod("contract-q", resources={"requests": {"memory": "2Gix"}})
    )
    assert (malformed.status, malformed.body["reason"]) == (400, "BadRequest"), malformed
    assert malformed.body["message"] == (
        f'Pod in version "v1" cannot be handled as a Pod: {QUANTITY_HELP}'
    )
    negative = _pod("contract-qn", resources={"requests": {"memory": "-1Gi"}})
    _one_invalid(
        _create(target, "pods", negative),
        "Pod",
        "contract-qn",
        "spec.containers[0].resources.requests[memory]",
        'Invalid value: "-1Gi": must be greater than or equal to 0',
    )
    over = _pod(
        "contract-qo", resources={"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}
    )
    _one_invalid(
        _create(target, "pods", over),
        "Pod",
        "contract-qo",
        "spec.containers[0].resources.requests",
        'Invalid value: "2Gi": must be less than or equal to memory limit of 1Gi',
    )
    half = {"nvidia.com/gpu": "500m"}
    gpu = _pod("contract-qg", resources={"requests": half, "limits": half})
    text = 'Invalid value: "500m": must be an integer'
    fields = [f"spec.containers[0].resources.{k}[nvidia.com/gpu]" for k in ("limits", "requests")]
    _invalid(
        _create(target, "pods", gpu),
        f'Pod "contract-qg" is invalid: [{fields[0]}: {text}, {fields[1]}: {text}]',
        [(field, "FieldValueInvalid", text) for field in fields],
    )


def check_priority_class_names_are_checked(target: ContractTarget) -> None:
    """A pod naming a class that cannot exist is 403 (admission); such a class is 422."""
    pod = _pod("contract-pc")
    pod["spec"]["priorityClassName"] = "Bad_PC"
    answer = _create(target, "pods", pod)
    assert (answer.status, answer.body["reason"]) == (403, "Forbidden"), answer
    assert answer.body["message"] == (
        'pods "contract-pc" is forbidden: no PriorityClass with name Bad_PC was found'
    )
    subdomain = (
        'Invalid value: "Bad_PC": a lowercase RFC 1123 subdomain must consist of lower case '
        "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
        "character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )
    klass = {"metadata": {"name": "Bad_PC"}, "value": 10}
    _one_invalid(
        _create(target, "priorityclasses", klass),
        "PriorityClass.scheduling.k8s.io",
        "Bad_PC",
        "metadata.name",
        subdomain,
    )


def check_config_keys_are_validated(target: ContractTarget) -> None:
    """ConfigMap and Secret keys outside `[-._a-zA-Z0-9]+`: 422 naming `data[key]`."""
    text = f'Invalid value: "bad key": {CONFIG_KEY_HELP}'
    for plural, kind, value in (("configmaps", "ConfigMap", "x"), ("secrets", "Secret", "eA==")):
        body = {"metadata": {"name": "contract-keys"}, "data": {"bad key": value}}
        _one_invalid(_create(target, plural, body), kind, "contract-keys", "data[bad key]", text)


VALIDATION_CHECKS: tuple[Callable[[ContractTarget], None], ...] = (
    check_labels_and_annotations_are_validated,
    check_env_and_container_names_are_validated,
    check_quantities_are_validated,
    check_priority_class_names_are_checked,
    check_config_keys_are_validated,
)
"""The validation part of the API checks."""
