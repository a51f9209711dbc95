"""An external program that knows only dagster-pipes: it processes tiles and reports them.

Environment knobs (set by the tests): PIPES_TEST_OUT (a folder: pid file, started marker),
NEED_MIB (the program holds this much memory when it is given less), HOLD_MIB and HOLD_S (it
holds this much, every page touched, for that long, whatever it is given), TILES and TILE_S
(the work; with a checkpoint extra it commits progress after every tile and resumes from it).
"""

import hashlib
import json
import os
import time
import uuid

from dagster_pipes import open_dagster_pipes


def load(ckpt):
    """The latest committed JSON state of the checkpoint, or None."""
    try:
        with open(os.path.join(ckpt["path"], "manifest.json")) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return None
    if manifest["fingerprint"] != ckpt["fingerprint"] or not manifest["commits"]:
        return None
    (data,) = manifest["commits"][0]["files"]
    with open(os.path.join(ckpt["path"], data["path"])) as f:
        return json.load(f)


def save(ckpt, state, progress):
    """Commit `state`: the data file first, then the manifest naming it (atomic rename)."""
    folder = ckpt["path"]
    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            commits = json.load(f)["commits"]
    except FileNotFoundError:
        commits = []
    seq = commits[0]["seq"] + 1 if commits else 1
    cid = f"{seq:06d}-{uuid.uuid4().hex[:8]}"
    data = json.dumps(state).encode()
    os.makedirs(os.path.join(folder, "data", cid))
    with open(os.path.join(folder, "data", cid, "state.json"), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    entry = {
        "path": f"data/{cid}/state.json",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    commit = {
        "id": cid,
        "seq": seq,
        "kind": "json",
        "files": [entry],
        "progress": progress,
        "saved_at": time.time(),
        "attempt": int(os.environ.get("K8S_AI_ATTEMPT", 0)),
        "run_id": None,
    }
    manifest = {
        "format": ckpt["format"],
        "fingerprint": ckpt["fingerprint"],
        "commits": [commit, *commits][:2],
    }
    tmp = os.path.join(folder, f".manifest.{cid}.tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f)
    os.replace(tmp, os.path.join(folder, "manifest.json"))


def main():
    out = os.environ.get("PIPES_TEST_OUT")
    attempt = os.environ.get("K8S_AI_ATTEMPT", "0")
    with open_dagster_pipes() as pipes:
        if out:
            with open(os.path.join(out, f"pid-{attempt}"), "w") as f:
                f.write(str(os.getpid()))
            with open(os.path.join(out, f"job-{attempt}"), "w") as f:
                f.write(os.environ.get("SLURM_JOB_ID", ""))
        pipes.log.info(f"tiles program attempt {attempt} started")
        need = int(os.environ.get("NEED_MIB", "0")) * 2**20
        if need > int(os.environ.get("K8S_AI_MEMORY_BYTES", need)):
            hog = bytearray(need)
            time.sleep(30)
            del hog
        held = int(os.environ.get("HOLD_MIB", "0")) * 2**20
        if held:
            hog = bytearray(held)
            hog[::4096] = b"\x01" * len(range(0, held, 4096))
            time.sleep(float(os.environ.get("HOLD_S", "0")))
            del hog
        ckpt = pipes.get_extra("k8s_ai_checkpoint") if "k8s_ai_checkpoint" in pipes.extras else None
        state = (load(ckpt) if ckpt else None) or {"next_tile": 0}
        resumed_at = state["next_tile"]
        for tile in range(resumed_at, int(os.environ.get("TILES", "3"))):
            time.sleep(float(os.environ.get("TILE_S", "0")))
            state = {"next_tile": tile + 1}
            if ckpt:
                save(ckpt, state, progress=tile + 1)
        pipes.report_asset_materialization(
            metadata={
                "tiles": state["next_tile"],
                "resumed_at": resumed_at,
                "attempt": int(attempt),
            }
        )
        pipes.report_asset_check(
            check_name="tiles_complete",
            passed=state["next_tile"] > 0,
            metadata={"tiles": state["next_tile"]},
        )


if __name__ == "__main__":
    main()
