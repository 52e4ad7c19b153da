"""The pod that deletes a deleted user's parks (core/parkcleanup.py): its shape, and its script
run for real by sh in a home with parks of two servers."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpusessions.core import parkcleanup as P
from gpusessions.core.security import Contexts

SETTINGS = P.CleanupSettings(
    image="quay.io/jupyterhub/singleuser:5",
    volumes=({"name": "home", "persistentVolumeClaim": {"claimName": "claim-bob"}},),
    volume_mounts=({"name": "home", "mountPath": "/home/jovyan"},),
    security=Contexts(uid=1000, gid=100, fs_gid=100),
    init_containers=({"name": "block-cloud-metadata", "image": "busybox"},),
    node_selector={"pool": "users"},
    deadline_seconds=90,
)


def test_the_pod_runs_as_the_notebook_does_and_never_long() -> None:
    pod = P.build_cleanup_pod("gpu-park-cleanup-bob", "hub", "bob", "", SETTINGS)
    spec = pod["spec"]
    [c] = spec["containers"]
    assert c["image"] == SETTINGS.image and c["command"][:2] == ["sh", "-c"] and c["command"][3] == ""
    assert c["volumeMounts"] == [{"name": "home", "mountPath": "/home/jovyan"}]
    assert spec["volumes"] == [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-bob"}}]
    sc = c["securityContext"]
    assert sc["runAsUser"] == 1000 and sc["runAsNonRoot"] and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert spec["securityContext"]["fsGroup"] == 100
    assert [i["name"] for i in spec["initContainers"]] == ["block-cloud-metadata"]
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 90 and spec["nodeSelector"] == {"pool": "users"}
    labels = pod["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "park-cleanup"
    assert labels["hub.jupyter.org/username"] == "bob" and labels["hub.jupyter.org/servername"] == ""
    assert P.pod_name("gpu-holder-bob--exp") == "gpu-park-cleanup-bob--exp"
    assert len(P.pod_name("gpu-holder-" + "x" * 80)) <= 63


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    parked = home / ".gpusessions" / "parked"
    for d in (
        "_default/k1",
        "_default.restored-20261202T1000",
        "exp/k2/.k3.parking-12",
        "exp.restored-20261202T1100",
        "exp.unrestored-20261201T0900",
        "expert/k4",
    ):
        (parked / d).mkdir(parents=True)
        (parked / d / "manifest.json").write_text("{}")
    (home / "notebook.ipynb").write_text("{}")
    return home


def _run(home: Path, server: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", P.SCRIPT, server],
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_named_server_s_parks_go_and_no_other_server_s(tmp_path: Path) -> None:
    home = _home(tmp_path)
    r = _run(home, "exp")
    assert r.returncode == 0, r.stderr
    left = sorted(p.name for p in (home / ".gpusessions" / "parked").iterdir())
    assert left == ["_default", "_default.restored-20261202T1000", "expert"]
    assert (home / "notebook.ipynb").exists()


def test_the_user_s_deletion_takes_every_park_and_nothing_else(tmp_path: Path) -> None:
    home = _home(tmp_path)
    r = _run(home, "")
    assert r.returncode == 0 and "deleted" in r.stdout, r.stderr
    assert not (home / ".gpusessions" / "parked").exists()
    assert (home / "notebook.ipynb").exists()
    assert _run(home, "").returncode == 0  # nothing parked: nothing to do


def test_outcome_in_words() -> None:
    assert P.outcome({"status": {"phase": "Succeeded"}}) == (True, "")
    assert P.outcome({"status": {"phase": "Running"}}) == (None, "")
    failed = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}],
        }
    }
    assert P.outcome(failed) == (False, "its pod failed: Error")
    assert P.outcome(None)[0] is False
    pulling = {
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}
            ],
        }
    }
    assert P.outcome(pulling) == (False, "its pod cannot start: ImagePullBackOff: no such image")
