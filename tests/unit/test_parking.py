"""Parking, the pure and file parts: the holder's kernels container with the park supervisor and
the session's variables, the holder's grace period, the park record, the restore's words."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from tornado import web, websocket

from gpusessions.core import kernels as K
from gpusessions.core.claims import HolderSettings, build_holder_pod
from gpusessions.core.labels import SESSION_ANNOTATION
from gpusessions.notebook import parkhost
from gpusessions.notebook import parkrecord as R
from gpusessions.notebook.restore import EXPIRY_ENV, Restore, expiry_seconds, summary


def holder(**kw: object) -> dict[str, object]:
    k = K.KernelSettings(image="nb:1", secret="s", **kw)  # type: ignore[arg-type]
    return build_holder_pod(
        "gpu-holder-ann", "ns", "gpu-ann", HolderSettings("holder:1", {}), "ann", "gpu1", kernels=k
    )


def test_the_kernels_get_the_session_variables_and_file_as_the_notebook_does() -> None:
    pod = holder(session_env=(("GPUSESSIONS_PROFILE", "mig-1g"), ("GPUSESSIONS_GPU", "MIG 1g.10gb")))
    gw = pod["spec"]["containers"][1]  # type: ignore[index]
    env = {e["name"]: e for e in gw["env"]}
    assert env["GPUSESSIONS_CLAIM"]["value"] == "gpu-ann"
    assert env["GPUSESSIONS_PROFILE"]["value"] == "mig-1g"
    assert env["GPUSESSIONS_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["GPUSESSIONS_SESSION_FILE"]["value"] == "/etc/gpusessions/session.json"
    passed = env["KG_ENV_PROCESS_WHITELIST"]["value"].split(",")
    assert {"GPUSESSIONS_CLAIM", "GPUSESSIONS_GPU", "GPUSESSIONS_SESSION_FILE"} <= set(passed)
    assert {"name": "gpusessions", "mountPath": "/etc/gpusessions", "readOnly": True} in gw["volumeMounts"]
    [vol] = [v for v in pod["spec"]["volumes"] if v["name"] == "gpusessions"]  # type: ignore[index]
    assert SESSION_ANNOTATION in vol["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"]


def test_parking_runs_the_gateway_under_the_supervisor_and_the_grace_period_is_the_budget() -> None:
    pod = holder(park=True, park_timeout=90)
    gw = pod["spec"]["containers"][1]  # type: ignore[index]
    assert gw["command"] == [
        "python",
        "-m",
        "gpusessions.notebook.parkhost",
        "--",
        "jupyter",
        "kernelgateway",
    ]
    env = {e["name"]: e.get("value") for e in gw["env"]}
    assert env["GPUSESSIONS_PARK_TIMEOUT"] == "90" and env["JUPYTERHUB_SERVER_NAME"] == "gpu1"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 90 + K.PARK_MARGIN  # type: ignore[index]
    off = holder(park=False)
    assert off["spec"]["containers"][1]["command"] == ["jupyter", "kernelgateway"]  # type: ignore[index]
    assert off["spec"]["terminationGracePeriodSeconds"] == 10  # type: ignore[index]


def test_a_holder_made_for_an_allocated_claim_carries_its_session_at_once() -> None:
    k = K.KernelSettings(image="nb:1", secret="s")
    info = json.dumps({"claim": "gpu-ann"})
    pod = build_holder_pod(
        "h", "ns", "gpu-ann", HolderSettings("holder:1", {}), "ann", "", kernels=k, session=info
    )
    assert pod["metadata"]["annotations"][SESSION_ANNOTATION] == info


def test_the_record_is_private_and_an_earlier_park_is_set_aside_not_deleted(tmp_path: Path) -> None:
    folder = tmp_path / "parked" / "_default"
    R.write_record(folder, {"kernels": [{"id": "k1", "status": "parked"}]})
    assert (folder / "session.json").stat().st_mode & 0o777 == 0o600
    assert folder.stat().st_mode & 0o777 == 0o700
    assert [k["id"] for k in R.unrestored(R.read_record(folder))] == ["k1"]
    aside = R.set_aside(folder)
    assert aside is not None and (aside / "session.json").exists() and not folder.exists()
    done = {
        "kernels": [
            {"id": "k1", "status": "parked", "restore": {"ok": True}},
            {"id": "../x", "status": "parked"},
        ]
    }
    assert R.unrestored(done) == []  # restored, and an id that is no folder name


def test_the_gateway_is_reached_on_the_pods_own_address() -> None:
    assert parkhost.gateway_base({"KG_IP": "0.0.0.0", "KG_PORT": "8888"}) == "http://127.0.0.1:8888"
    assert parkhost.gateway_base({"KG_IP": "127.0.3.4", "KG_PORT": "9"}) == "http://127.0.3.4:9"


@pytest.mark.parametrize(
    ("state", "start"),
    [
        ("restored", "Restored your session from 14:02 UTC: 2 variables, 1 not kept (f: open file)"),
        ("failed", "Your session from 14:02 UTC could not be restored"),
    ],
)
def test_the_restore_says_what_came_back_in_words(state: str, start: str) -> None:
    record = {
        "parked_at": 1764684120.0,  # 2025-12-02 14:02 UTC
        "kernels": [
            {
                "id": "k1",
                "name": "python3",
                "status": "parked",
                "report": {"not_saved": [{"name": "f", "type": "TextIOWrapper", "reason": "open file"}]},
                "restore": {"ok": state == "restored", "kernel": "k2", "report": {"restored": ["a", "b"]}},
            }
        ],
    }
    out = summary(record, state, now=1764684120.0 + 60)
    assert out["state"] == state and out["message"].startswith(start), out["message"]
    # Another day: the date too.
    later = summary(record, state, now=1764684120.0 + 3 * 86400)["message"]
    assert "from 2025-12-02 14:02 UTC" in later, later


def test_a_park_older_than_the_expiry_is_deleted_and_the_user_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """park_expiry_days (30 by default): an expired park is not restored; at the first start
    after it the status says it was deleted; a fresh one is restored as before."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))  # the park folder is under ~
    env = {"HOME": str(home), "JUPYTERHUB_SERVER_NAME": "", EXPIRY_ENV: "30"}
    restore = Restore(env)
    assert str(restore.folder).startswith(str(home))
    kernel = {"id": "0f6c1f2e-1111-4222-8333-444455556666", "name": "python3", "status": "parked"}
    R.write_record(
        R.private_dir(restore.folder), {"parked_at": time.time() - 31 * 86400, "kernels": [kernel]}
    )
    started: list[str] = []

    async def start(spec: str) -> str:
        started.append(spec)
        return "new"

    async def shutdown(kid: str) -> None:
        return None

    asyncio.run(restore.run(set(), start, shutdown))
    assert started == [] and not restore.folder.exists()
    st = restore.status()
    assert st["state"] == "expired", st
    assert "older than the hub keeps parked sessions (30 days) and was deleted" in st["message"]
    # Within the expiry, the restore goes ahead (and starts a kernel).
    R.write_record(
        R.private_dir(restore.folder), {"parked_at": time.time() - 29 * 86400, "kernels": [kernel]}
    )
    fresh = Restore(env)
    assert fresh.pending(set()) and not fresh._expired(R.read_record(fresh.folder) or {})
    assert expiry_seconds({EXPIRY_ENV: "0"}) is None and expiry_seconds({}) == 30 * 86400


def test_a_park_over_budget_is_recorded_as_timed_out_with_what_was_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel that never answers (busy past the budget): the record says so, the rest goes on."""

    class Kernels(web.RequestHandler):
        def get(self) -> None:
            assert self.request.headers["Authorization"] == "token t"
            self.write(json.dumps([{"id": "k1", "name": "python3", "execution_state": "idle"}]))

    class Silent(websocket.WebSocketHandler):
        def on_message(self, message: str | bytes) -> None:
            pass  # the kernel never reports

    async def run() -> dict[str, object] | None:
        app = web.Application([(r"/api/kernels", Kernels), (r"/api/kernels/k1/channels", Silent)])
        server = app.listen(0, "127.0.0.1")
        port = next(iter(server._sockets.values())).getsockname()[1]
        env = {
            "KG_IP": "127.0.0.1",
            "KG_PORT": str(port),
            "KG_AUTH_TOKEN": "t",
            "GPUSESSIONS_PARK_TIMEOUT": "1",
        }
        try:
            return await parkhost.park_all(env)
        finally:
            server.stop()

    monkeypatch.setenv("HOME", str(tmp_path))
    asyncio.run(run())
    record = R.read_record(tmp_path / ".gpusessions" / "parked" / "_default")
    assert record is not None and record["complete"] is False
    [k] = record["kernels"]
    assert k["status"] == "timeout" and "no report within" in k["error"]
    assert R.unrestored(record) == []  # nothing half-saved is restored


def test_a_park_request_the_kernel_aborted_is_sent_again() -> None:
    """ipykernel aborts a request that arrives while an interrupted cell's error is handled
    (stop_on_error): idle with neither a report nor an error. The park sends it again."""
    from gpusessions.notebook.kernelexec import run_for_report

    got: list[str] = []

    class Kernel(websocket.WebSocketHandler):
        def on_message(self, message: str | bytes) -> None:
            msg = json.loads(message)
            got.append(msg["content"]["code"])
            parent = {"msg_id": msg["header"]["msg_id"]}

            def send(kind: str, content: dict[str, object]) -> None:
                self.write_message(
                    json.dumps({"parent_header": parent, "header": {"msg_type": kind}, "content": content})
                )

            send("status", {"execution_state": "busy"})
            if len(got) > 1:  # the first one is aborted: no output at all
                send("display_data", {"data": {"application/x-park": {"ok": True}}})
            send("status", {"execution_state": "idle"})

    async def run() -> dict[str, object]:
        app = web.Application([(r"/api/kernels/k1/channels", Kernel)])
        server = app.listen(0, "127.0.0.1")
        port = next(iter(server._sockets.values())).getsockname()[1]
        try:
            base = f"http://127.0.0.1:{port}"
            return await run_for_report(base, "t", "k1", "park()", "application/x-park", 5)
        finally:
            server.stop()

    assert asyncio.run(run()) == {"ok": True}
    assert got == ["park()", "park()"]
