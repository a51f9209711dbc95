"""The real node's files, without starting it: the OCI archives `ctr images import` reads, the
containerd, CNI and kubelet configurations, and the record its cleanup works from."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import tarfile
import tomllib
from pathlib import Path

from k8s_ai_orchestrator.testing.controlplane import nodecleanup, nodeconfig, ociimage

LAYOUT = nodeconfig.NodeLayout(Path("/tmp/k8sai-rn-x"))


def test_an_oci_archive_names_its_image_and_its_blobs_match_their_digests(tmp_path: Path) -> None:
    image = ociimage.write_image(
        tmp_path / "base.tar", "k8s-ai.test/base:1", ociimage.base_layer(), ociimage.ImageConfig()
    )

    with tarfile.open(image.archive) as archive:
        blobs = {
            m.name.rsplit("/", 1)[-1]: archive.extractfile(m).read()  # type: ignore[union-attr]
            for m in archive.getmembers()
            if m.isfile() and m.name.startswith("blobs/")
        }
        index = json.load(archive.extractfile("index.json"))  # type: ignore[arg-type]
    for digest, data in blobs.items():
        assert hashlib.sha256(data).hexdigest() == digest
    entry = index["manifests"][0]
    assert entry["annotations"]["io.containerd.image.name"] == "k8s-ai.test/base:1"
    assert entry["digest"] == image.manifest_digest
    manifest = json.loads(blobs[entry["digest"][7:]])
    config = json.loads(blobs[manifest["config"]["digest"][7:]])
    layer = manifest["layers"][0]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"  # uncompressed
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]


def test_the_base_layer_links_merged_usr_and_has_the_mount_points() -> None:
    entries = {e.path: e for e in ociimage.base_layer()}

    assert entries["bin"].target == "usr/bin" and entries["lib64"].target == "usr/lib64"
    assert {"usr", "dev", "proc", "sys", "tmp"} <= set(entries)
    assert entries["tmp"].mode == 0o1777


def test_containerd_runs_runc_on_cgroupfs_with_the_local_pause_image_and_its_own_paths() -> None:
    config = tomllib.loads(nodeconfig.containerd_config(LAYOUT, "k8s-ai.test/pause:1", Path("/b")))

    plugins = config["plugins"]
    runtime = plugins["io.containerd.cri.v1.runtime"]
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert config["version"] == 4
    assert runc == {
        "SystemdCgroup": False,
        "BinaryName": "/usr/sbin/runc",
        "Root": "/tmp/k8sai-rn-x/runc",
    }
    assert runtime["restrict_oom_score_adj"] is True
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == (
        "k8s-ai.test/pause:1"
    )
    assert plugins["io.containerd.server.v1.grpc"]["address"] == "/tmp/k8sai-rn-x/containerd.sock"
    paths = [
        config["root"],
        config["state"],
        plugins["io.containerd.shim.v1.manager"]["socket_dir"],
    ]
    assert all(p.startswith("/tmp/k8sai-rn-x/") for p in paths)


def test_the_pod_network_is_a_documentation_range_without_routes_or_masquerade() -> None:
    bridge = nodeconfig.cni_network(LAYOUT)["plugins"][0]

    subnet = ipaddress.ip_network(bridge["ipam"]["ranges"][0][0]["subnet"])
    assert subnet.subnet_of(ipaddress.ip_network("203.0.113.0/24"))
    assert bridge["ipMasq"] is False and "routes" not in bridge["ipam"]
    assert "isDefaultGateway" not in bridge


def test_the_kubelet_tolerates_this_machine_and_registers_tainted() -> None:
    files = nodeconfig.KubeletFiles(Path("k"), Path("ca"), Path("crt"), Path("key"))
    config = nodeconfig.kubelet_config(LAYOUT, files, "192.0.2.2", 10250, 10248, "/k8sai-n1")

    assert config["failCgroupV1"] is False and config["failSwapOn"] is False
    assert config["cgroupDriver"] == "cgroupfs" and config["cgroupRoot"] == "/k8sai-n1"
    assert config["shutdownGracePeriod"] == "0s"
    assert config["imageGCHighThresholdPercent"] == 100
    assert config["registerWithTaints"] == [nodeconfig.REAL_NODE_TAINT]
    args = nodeconfig.kubelet_args(Path("c.json"), LAYOUT, Path("k"), "n1", "192.0.2.2")
    assert "--node-labels=k8s-ai.test/real-node=true" in args


def test_a_node_record_survives_its_json() -> None:
    record = nodecleanup.NodeRecord(
        "n1", "/tmp/n1", "k8sai-n1", "/k8sai-n1", {"kernel/panic": "0"}, ["/var/lib/cni"]
    )

    assert nodecleanup.NodeRecord.from_json(record.to_json()) == record
