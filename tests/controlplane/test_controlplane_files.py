"""PKI, token files, kubeconfigs and command lines, checked without starting anything."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import yaml
from cryptography import x509

from k8s_ai_orchestrator.testing.controlplane import Gates, flags, pki, write_kubeconfig

VCLUSTER_VALUES = Path(__file__).resolve().parents[2] / "helm" / "vcluster-values.yaml"


def test_serving_certificate_is_signed_by_the_ca_for_loopback(tmp_path: Path) -> None:
    ca = pki.write_ca(tmp_path / "ca")
    serving = pki.write_serving_cert(ca, tmp_path / "srv", ["127.0.0.1", "localhost"])
    cert = x509.load_pem_x509_certificate(serving.cert.read_bytes())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert.read_bytes()))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert serving.key.stat().st_mode & 0o077 == 0


def test_token_file_lines_follow_the_apiserver_csv_format(tmp_path: Path) -> None:
    admin = pki.Identity("t0ken", "admin", ("system:masters", "ops"))
    path = pki.write_token_file(tmp_path / "tokens.csv", [admin])
    assert path.read_text() == 't0ken,admin,admin,"system:masters,ops"\n'


def test_kubeconfig_points_at_the_server_with_the_token(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "k", "https://127.0.0.1:1", tmp_path / "ca.crt", "u", "t")
    config = json.loads(path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:1"
    assert config["users"][0] == {"name": "u", "user": {"token": "t"}}


def test_only_the_host_runs_node_lifecycle_and_neither_runs_volume_or_ipam_controllers() -> None:
    assert "-node-lifecycle-controller" not in flags.HOST_CONTROLLERS
    assert "-node-lifecycle-controller" in flags.TENANT_CONTROLLERS
    for disabled in ("-node-ipam-controller", "-persistentvolume-binder-controller"):
        assert disabled in flags.HOST_CONTROLLERS and disabled in flags.TENANT_CONTROLLERS


def test_tenants_run_no_taint_eviction_as_our_recommended_vcluster_values_set() -> None:
    """The tenant's taint manager would act on lagging copies of host nodes; our vCluster
    values turn it off (their controller list is vCluster's own less it), and so does the
    plane's tenant controller manager."""
    values = yaml.safe_load(VCLUSTER_VALUES.read_text())
    manager = values["controlPlane"]["distro"]["k8s"]["controllerManager"]
    [controllers] = [a for a in manager["extraArgs"] if a.startswith("--controllers=")]
    disabled = controllers.removeprefix("--controllers=").split(",")
    assert "-taint-eviction-controller" in disabled and "-nodelifecycle" in disabled
    assert "-taint-eviction-controller" in flags.TENANT_CONTROLLERS
    assert "-taint-eviction-controller" not in flags.HOST_CONTROLLERS


def test_apiserver_gets_quota_admission_gates_and_runtime_config(tmp_path: Path) -> None:
    files = flags.ApiServerFiles(*(tmp_path / n for n in ("c", "k", "ca", "tok", "sa", "pub")))
    gates = Gates({"GenericWorkload": True}, ["scheduling.k8s.io/v1beta1=true"])
    args = flags.apiserver_args(6443, flags.EtcdPorts(1, 2), "/kubeplane/t", files, gates)
    assert "--etcd-prefix=/kubeplane/t" in args
    assert (
        "--enable-admission-plugins=NodeRestriction,ResourceQuota,LimitRanger,Priority,PodSecurity"
        in args
    )
    assert args[-2:] == [
        "--feature-gates=GenericWorkload=true",
        "--runtime-config=scheduling.k8s.io/v1beta1=true",
    ]
