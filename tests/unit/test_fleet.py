"""The admin page's data: the fleet map and totals from real-shaped slices (the fake driver's,
as the NVIDIA DRA driver publishes them), the chart from the culler's record, the one page
document, and the page itself rendered in JupyterHub's page.html."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from gpusessions.culler.chart import chart, charts
from gpusessions.culler.fleet import BUSY, FREE, IDLE, KEPT, PENDING, STATES, fleet, layout
from gpusessions.culler.history import History
from gpusessions.culler.model import Session
from gpusessions.culler.pagedata import PageData
from gpusessions.culler.policy import Policy, Rules
from gpusessions.culler.web import _TEMPLATES, COLUMNS, hub_page_vars
from localcluster.paths import SHAPES_DIR
from localcluster.shapes import build_slices, load_shape

Obj = dict[str, Any]


def _slices(shape: str) -> list[Obj]:
    return [s for n in load_shape(shape, SHAPES_DIR).nodes for s in build_slices(n)]


def _gpu_devices(slices: list[Obj]) -> list[tuple[str, Obj]]:
    return [
        (s["spec"]["pool"]["name"], d)
        for s in slices
        if s["spec"]["driver"] == "gpu.nvidia.com"
        for d in s["spec"].get("devices") or []
    ]


def _session(claim: str, device: str, **kw: Any) -> Session:
    s = Session("ns", claim, claim.removeprefix("gpu-"), "", profile="p", queue="team-a", allocated=True)
    s.devices = [device]
    s.node = device.split("/")[0]
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def _cells(doc: Obj) -> dict[str, list[Any]]:
    return {c[0]: c for n in doc["nodes"] for g in n[2] for c in g[3] if c[0]}


def test_static_mig_and_whole_gpus_each_device_a_cell() -> None:
    slices = _slices("small")
    devices = _gpu_devices(slices)
    lay = layout(slices)
    doc = fleet(lay, [])
    # Every GPU device the driver published is a cell; GPUs are the whole GPUs and the MIG parents.
    assert len(_cells(doc)) == len(devices)
    parents = {d["attributes"]["parentUUID"]["string"] for _, d in devices if "parentUUID" in d["attributes"]}
    wholes = [d for _, d in devices if d["attributes"]["type"]["string"] == "gpu"]
    assert doc["totals"]["gpus"] == len(parents) + len(wholes)
    assert doc["totals"]["gpus_by_state"][FREE] == doc["totals"]["gpus"]
    assert doc["totals"]["equivalents"][FREE] == doc["totals"]["gpus"]


def test_cells_take_the_state_of_their_session() -> None:
    slices = _slices("small")
    lay = layout(slices)
    mig = next(n for _, n in ((p, d["name"]) for p, d in _gpu_devices(slices)) if "mig-1g10gb" in n)
    migs = [d["name"] for _, d in _gpu_devices(slices) if "mig-1g10gb" in d["name"]]
    whole = next(d["name"] for _, d in _gpu_devices(slices) if d["attributes"]["type"]["string"] == "gpu")
    busy = _session("gpu-ann", f"gpu-node-0/{mig}", running=True, gpu=[{"busy": True}])
    idle = _session("gpu-bob", f"gpu-node-0/{migs[1]}", running=True, gpu=[{"busy": False}])
    kept = _session("gpu-cat", f"gpu-node-0/{whole}")
    starting = _session("gpu-dan", f"gpu-node-0/{migs[2]}", pending="spawn")
    waiting = Session("ns", "gpu-eve", "eve", "", allocated=False, running=True)
    sessions = [busy, idle, kept, starting, waiting]
    doc = fleet(lay, sessions, idle_gpu_hours_today=1.234)
    cells = _cells(doc)
    assert [STATES[cells[mig][1]], cells[mig][3]] == [BUSY, 0]
    assert [STATES[cells[migs[1]][1]], cells[migs[1]][3]] == [IDLE, 1]
    assert [STATES[cells[whole][1]], cells[whole][2]] == [KEPT, 7]
    assert STATES[cells[migs[2]][1]] == PENDING
    t = doc["totals"]
    assert t["waiting"] == 1
    assert t["idle_gpu_hours_today"] == 1.23
    assert t["equivalents"][BUSY] == round(1 / 7, 2) and t["equivalents"][KEPT] == 1.0
    assert t["gpus_by_state"][KEPT] == 1  # the whole GPU
    assert sum(t["gpus_by_state"].values()) == t["gpus"]


def test_a_partitionable_gpu_shows_what_is_held_and_the_rest_free() -> None:
    slices = _slices("small-dynamic")
    lay = layout(slices)
    assert lay.gpus == 2
    three = next(
        d["name"]
        for _, d in _gpu_devices(slices)
        if (d["attributes"].get("profile") or {}).get("string") == "3g.40gb" and d["name"].startswith("gpu-0")
    )
    doc = fleet(lay, [_session("gpu-ann", f"gpu-node-d/{three}", running=True, gpu=[{"busy": True}])])
    gpu0 = next(g for g in doc["nodes"][0][2] if any(c[0] == three for c in g[3]))
    assert gpu0[2] == "dynamic"
    assert sorted((STATES[c[1]], c[2]) for c in gpu0[3]) == [(BUSY, 3), (FREE, 4)]
    # Only what is held and one remainder: not every profile x placement the driver offers.
    assert len(gpu0[3]) == 2
    assert doc["totals"]["equivalents"][FREE] == round((4 + 7) / 7, 2)


def test_nodes_group_by_pool_label_else_by_shape() -> None:
    slices = _slices("demo")
    by_shape = layout(slices)
    assert len(by_shape.groups) >= 2 and all(" x " in g for g in by_shape.groups)
    nodes = {
        n: {"metadata": {"name": n, "labels": {"karpenter.sh/nodepool": "gpu-pool"}}}
        for n in {s["spec"]["nodeName"] for s in slices}
    }
    pooled = layout(slices, nodes)
    assert pooled.groups == ["pool gpu-pool"]
    assert len(pooled.nodes) == len(nodes)


def test_chart_averages_each_step_per_queue() -> None:
    h = History()
    t0 = 1_000_000 * 300.0
    h.add(t0 + 10, "p", "team-a", held=600.0, busy=300.0)  # 2 GPU-equivalents held over 300 s
    h.add(t0 + 610, "p", "team-b", held=300.0)
    c = chart(h.series(t0, t0 + 900, 300, by="queue"), t0, 300)
    assert c["queues"]["team-a"]["held"] == [2.0, None, 0.0]
    assert c["queues"]["team-a"]["busy"] == [1.0, None, 0.0]
    assert c["queues"]["team-b"]["held"] == [0.0, None, 1.0]
    both = charts(h, t0 + 899)
    assert set(both) == {"24h", "7d"}
    assert len(both["24h"]["queues"]["team-a"]["held"]) == 288
    assert len(both["7d"]["queues"]["team-a"]["held"]) == 168
    assert max(v or 0 for v in both["7d"]["queues"]["team-a"]["held"]) == round(600 / 3600, 3)


class _Cache:
    def __init__(self, objects: dict[str, Obj], error: str | None = None):
        self.objects, self.version, self.error = objects, 1, error
        self.ready = asyncio.Event()
        if error is None:
            self.ready.set()


class _Cluster:
    def __init__(self, slices: list[Obj], error: str | None = None):
        self.slices = _Cache({s["metadata"]["name"]: s for s in slices}, error)
        self.nodes = _Cache({})


class _Culler:
    def __init__(self, cluster: _Cluster, sessions: list[Session]):
        self.cluster, self.sessions, self.history = cluster, sessions, History()
        self.cycles, self.last_cycle, self.last_error = 3, None, None
        self.policy = Policy(Rules(), {}, False)

    def describe(self, now: float) -> list[Obj]:
        return [{"claim": s.claim, "user": s.user} for s in self.sessions]


def test_page_document_and_its_cache() -> None:
    slices = _slices("small")
    mig = next(d["name"] for _, d in _gpu_devices(slices) if "mig-1g10gb" in d["name"])
    culler = _Culler(_Cluster(slices), [_session("gpu-ann", f"gpu-node-0/{mig}", running=True)])
    now = time.time()
    culler.history.add(now, "p", "team-a", idle=7200.0, held=7200.0)
    pd = PageData(culler)
    doc = json.loads(pd.body(now))
    assert doc["fleet_error"] is None and doc["sessions"]["rows"][0][0] == "gpu-ann"
    assert doc["fleet"]["totals"]["idle_gpu_hours_today"] == 2.0
    assert doc["chart"]["24h"]["queues"]["team-a"]["held"][-1] == round(7200.0 / 300, 3)
    assert pd.body(now) and pd.builds == 1  # cached within the ttl and the cycle
    culler.cycles += 1
    pd.body(now)
    assert pd.builds == 2
    pd.invalidate()
    pd.body(now)
    assert pd.builds == 3


def test_page_says_why_the_fleet_is_missing() -> None:
    culler = _Culler(_Cluster([], error="ApiException: (403) resourceslices is forbidden"), [])
    doc = PageData(culler).build()
    assert doc["fleet"] is None
    assert "list and watch on resourceslices" in doc["fleet_error"] and "403" in doc["fleet_error"]


def test_page_extends_jupyterhubs_page() -> None:
    html = _TEMPLATES.get_template("admin.html").render(
        **hub_page_vars({"name": "ad<min", "admin": True}, "/hub/", "/services/gpusessions/"),
        columns=COLUMNS,
        dry_run=True,
        xsrf="tok",
        xsrf_token="tok",
    )
    # The hub's navbar, styles and dark-mode toggle, from the hub's own static files.
    for part in (
        'id="thenavbar"',
        'href="/hub/static/css/style.min.css"',
        'src="/hub/static/js/darkmode.js"',
        'id="dark-theme-toggle"',
        'href="/hub/home"',
        'href="/hub/admin"',
        'href="/hub/logout"',
    ):
        assert part in html, part
    assert "ad&lt;min" in html and "ad<min" not in html
    for section in ("gs-totals", "gs-fleet", "gs-charts", 'id="sessions"', "Dry run"):
        assert section in html, section


def test_columns_keep_every_value_of_every_row() -> None:
    from gpusessions.culler.pagedata import columns

    same = [{"a": 1, "b": 2, "c": 3}, {"a": 4, "b": 5, "c": 6}]
    assert columns(same, ("c",)) == {"columns": ["a", "b"], "rows": [[1, 2], [4, 5]]}
    mixed = [{"a": 1}, {"a": 2, "z": 9}]
    assert columns(mixed) == {"columns": ["a", "z"], "rows": [[1, None], [2, 9]]}
    assert columns([]) == {"columns": [], "rows": []}
