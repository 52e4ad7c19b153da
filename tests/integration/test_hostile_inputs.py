"""The hostile-input probe (issue 30), against the real hub, culler and cluster: every
gpusessions route as another user, without a login, with a bogus token, without XSRF,
oversized, deeply nested, NaN; job inputs a command line would misread; a scripted "Keep my
GPU"; the culler's admin keep; availability with a names-only token; the limits under
concurrent requests. Each case asserts the exact refusal (status and words) and that nothing
in the namespace was created or changed (claims and their annotations, Jobs, CronJobs, claim
templates, ConfigMaps). One hub for the module (`shared_hub`); docs/reliability.md lists the
cases."""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .cullertools import annotations, wait_warned
from .hostiletools import declared_only, hostile_hub, message, objects, raw
from .hubtools import follow_spawn, logged_in, server_model, spawn, start, stop, user_token

pytestmark = [pytest.mark.cluster, pytest.mark.shared_hub.with_args(hostile_hub)]

JOB = {"name": "probe", "input": "probe.ipynb", "size": "cpu"}
DEFINITION = {**JOB, "schedule": "0 3 * * *"}
# Every gpusessions route of the hub on a user's name: (method, path after
# /hub/api/gpusessions/users/<user>/, a good body).
ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "gpu", None),
    ("POST", "gpu/release", {}),
    ("GET", "warnings", None),
    ("POST", "keep", {}),
    ("POST", "release", {}),
    ("POST", "cull", {"since": 1.0}),
    ("GET", "jobs", None),
    ("POST", "jobs", JOB),
    ("GET", "jobs/sizes", None),
    ("GET", "jobs/abc123", None),
    ("DELETE", "jobs/abc123", None),
    ("GET", "jobs/abc123/log", None),
    ("GET", "jobdefinitions", None),
    ("POST", "jobdefinitions", DEFINITION),
    ("GET", "jobdefinitions/abc123", None),
    ("PATCH", "jobdefinitions/abc123", {"active": False}),
    ("DELETE", "jobdefinitions/abc123", None),
    ("POST", "jobdefinitions/abc123/jobs", {}),
]
WRITES = [r for r in ROUTES if r[0] != "GET"]


def _url(hub: Hub, user: str, path: str) -> str:
    return f"{hub.hub_api}/gpusessions/users/{user}/{path}"


def _json(body: Any) -> bytes | None:
    return None if body is None else json.dumps(body).encode()


def _bodies(kind: str) -> bytes:
    return {
        "oversized": b'{"name": "' + b"x" * (65 * 1024) + b'"}',
        "nested": b"[" * 20000 + b"]" * 20000,
        "nan": b'{"name": "n", "input": "a.ipynb", "size": "cpu", "since": NaN, "until": NaN}',
    }[kind]


# What each hostile caller gets on each route: (status, words). Routes behind JupyterHub's own
# scope check (`needs_scope`: release, cull) answer in JupyterHub's words.
SCOPED = ("release", "cull")


def _refusal(who: str, path: str) -> tuple[int, str]:
    if who == "other user":
        if path in SCOPED:
            return 404, "No access to resources or resources not found"
        return 404, "No access to the servers of victim"
    if path in SCOPED:
        return 403, "Missing or invalid credentials"
    return 403, "Not authenticated"


@pytest.mark.parametrize("who", ["other user", "bogus token", "no login"])
def test_every_route_refuses_a_caller_who_is_not_the_user(
    hub: Hub, api: KubeAPI, namespace: str, who: str
) -> None:
    user_token(hub, "victim")
    token = {"other user": user_token(hub, "mallory"), "bogus token": "0123456789abcdef", "no login": ""}[who]
    before = objects(api, namespace)
    wrong: list[Any] = []
    for method, path, body in ROUTES:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"token {token}"
        code, answer = raw(_url(hub, "victim", path), method, _json(body), headers)
        want = _refusal(who, path)
        if (code, want[1] in message(answer)) != (want[0], True):
            wrong.append((method, path, code, answer))
    assert wrong == [], (who, wrong)
    assert objects(api, namespace) == before


@pytest.mark.parametrize(
    ("kind", "status", "words"),
    [
        ("oversized", 413, "too large: at most 64 KiB"),
        ("nested", 400, "nests deeper than 32 levels"),
        ("nan", 400, "has NaN, which is not a number here"),
    ],
)
def test_every_write_refuses_a_hostile_body_in_words(
    hub: Hub, api: KubeAPI, namespace: str, kind: str, status: int, words: str
) -> None:
    token = user_token(hub, "eve")
    before = objects(api, namespace)
    headers = {"Authorization": f"token {token}", "Content-Type": "application/json"}
    wrong: list[Any] = []
    for method, path, _ in WRITES:
        if method == "DELETE":
            continue  # takes no body
        code, answer = raw(_url(hub, "eve", path), method, _bodies(kind), headers)
        if kind != "oversized" and path in ("gpu/release", "keep", "release", "jobdefinitions/abc123/jobs"):
            # These read no body: answered as with none (eve has no GPU, no such definition).
            want_code, plain = raw(_url(hub, "eve", path), method, b"", headers)
            if (code, answer) != (want_code, plain) or code >= 500:
                wrong.append((method, path, code, answer))
            continue
        want = (status, words)
        if (code, want[1] in message(answer)) != (want[0], True):
            wrong.append((method, path, code, answer))
    assert wrong == [], (kind, wrong)
    assert objects(api, namespace) == before


def test_a_cookie_request_without_xsrf_is_refused(hub: Hub, api: KubeAPI, namespace: str) -> None:
    opener = logged_in(hub, "eve")
    before = objects(api, namespace)
    wrong: list[Any] = []
    for method, path, body in WRITES:
        code, answer = raw(
            _url(hub, "eve", path), method, _json(body), {"Content-Type": "application/json"}, opener
        )
        if code != 403 or "xsrf" not in message(answer).lower():
            wrong.append((method, path, code, answer))
    assert wrong == []
    assert objects(api, namespace) == before


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("-y.ipynb", "starts with '-', which a command line reads as an option"),
        ("--cwd=/tmp/x.ipynb", "starts with '-', which a command line reads as an option"),
        ("./-x.ipynb", "starts with '-', which a command line reads as an option"),
        ("$(HOME).ipynb", "has '$(', which Kubernetes would expand as a variable"),
        ("a/$(JUPYTERHUB_API_TOKEN).ipynb", "has '$(', which Kubernetes would expand as a variable"),
    ],
)
def test_job_inputs_a_command_line_would_misread_are_refused(
    hub: Hub, api: KubeAPI, namespace: str, path: str, words: str
) -> None:
    token = user_token(hub, "eve")
    before = objects(api, namespace)
    for route, body in (("jobs", {**JOB, "input": path}), ("jobdefinitions", {**DEFINITION, "input": path})):
        code, answer = hub.api("POST", f"/gpusessions/users/eve/{route}", body, token=token)
        assert code == 400 and words in message(answer), (route, code, answer)
    assert objects(api, namespace) == before


def test_availability_needs_a_token_that_may_use_the_users_servers(hub: Hub) -> None:
    user_token(hub, "eve")
    code, tok = hub.api(
        "POST", "/users/eve/tokens", {"note": "names", "scopes": ["read:users:name!user=eve"]}
    )
    assert code == 201, tok
    code, answer = hub.api("GET", "/gpusessions/availability", token=tok["token"])
    assert code == 403 and "needs a token that may access your servers" in message(answer), (code, answer)
    code, answer = hub.api("GET", "/gpusessions/availability", token=user_token(hub, "eve"))
    assert code == 200 and answer["profiles"], (code, answer)


def test_limits_hold_under_concurrent_requests(hub: Hub, api: KubeAPI, namespace: str) -> None:
    token = user_token(hub, "eve")
    for route, body, limit, words in (
        ("jobs", JOB, 2, "unfinished job(s), the most one user may have"),
        ("jobdefinitions", DEFINITION, 2, "job definition(s), the most one user may have"),
    ):

        def post(_: int, route: str = route, body: Any = body) -> tuple[int, Any]:
            return hub.api("POST", f"/gpusessions/users/eve/{route}", body, token=token)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(post, range(8)))
        codes = sorted(code for code, _ in answers)
        assert codes == [201] * limit + [429] * (8 - limit), answers
        assert all(words in message(a) for code, a in answers if code == 429), answers
    assert len(api.list("Job", namespace)["items"]) == 2
    assert len(api.list("CronJob", namespace)["items"]) == 2


def test_keep_answers_a_warning_once_and_the_admin_keep_is_checked(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    token = user_token(hub, "kate")
    spawn(hub, "kate", {"profile": "mig-1g-10gb"})
    wait_warned(api, namespace, "gpu-kate")
    code, kept = hub.api("POST", "/gpusessions/users/kate/keep", token=token)
    assert code == 200 and kept["kept_until"] > time.time() + 3000, (code, kept)
    first = annotations(api, namespace, "gpu-kate")
    assert first["gpusessions.io/kept-warning-at"] and "gpusessions.io/warned-at" not in first
    # A script pressing Keep in a loop: every later press is refused in words, nothing changes.
    before = objects(api, namespace)
    for _ in range(5):
        code, answer = hub.api("POST", "/gpusessions/users/kate/keep", token=token)
        assert code == 409 and "There is no warning to answer" in message(answer), (code, answer)
    assert annotations(api, namespace, "gpu-kate") == first

    # One GPU session per user (max_gpu_sessions_per_user = 1): a second named server is refused.
    code, answer = start(hub, "kate", {"profile": "mig-1g-10gb"}, "two")
    assert code in (201, 202, 400), (code, answer)
    waits.wait_for(
        lambda: not (server_model(hub, "kate", "two") or {}).get("pending"), 60, "kate/two to give up"
    )
    assert not (server_model(hub, "kate", "two") or {}).get("ready")
    assert "the most one user may have on this hub" in hub.log_text()

    # The culler's admin keep: the body checked, a claim that is no session a 404.
    admin = f"{hub.url}/services/gpusessions/api/sessions/{namespace}"
    headers = {"Authorization": f"token {hub.token}", "Content-Type": "application/json"}
    for body, words in (
        (b"not json", "not JSON"),
        (b"[1]", "must be a JSON object, not list"),
        (b'{"until": NaN}', "has NaN"),
        (b'{"until": 1e300}', "more than 30 days ahead"),
        (b'{"until": 1e400}', "too large"),
        (b'{"until": "soon"}', 'give {"until": <unix seconds or an ISO time>}'),
        (b'{"until": 1000}', "is in the past"),
        (b'{"until": [1]}', 'give {"until"'),
        (b"[" * 20000, "nests deeper than 32 levels"),
        (b"x" * (65 * 1024), "too large: at most 64 KiB"),
    ):
        code, answer = raw(f"{admin}/gpu-kate/keep", "POST", body, headers)
        want = 413 if body.startswith(b"xxx") else 400
        assert code == want and words in message(answer), (body[:30], code, answer)
    code, answer = raw(f"{admin}/gpu-ghost/keep", "POST", b'{"until": %d}' % (time.time() + 60), headers)
    assert code == 404 and "no session" in message(answer), (code, answer)
    assert objects(api, namespace) == before


def test_an_8_mb_body_is_refused_before_the_hub_reads_it(hub: Hub, api: KubeAPI, namespace: str) -> None:
    """Every write route answers a declared 8 MB body with a 413 in words without waiting for
    a byte of it (the hub streams bodies: tornado would buffer up to 100 MB first)."""
    token = user_token(hub, "eve")
    before = objects(api, namespace)
    headers = {"Authorization": f"token {token}", "Content-Type": "application/json"}
    wrong: list[Any] = []
    for method, path, _ in WRITES:
        got = declared_only(_url(hub, "eve", path), method, 8_000_000, headers)
        if not got.startswith(b"HTTP/1.1 413") or b"too large: at most 64 KiB" not in got:
            wrong.append((method, path, got[:200]))
    assert wrong == []
    assert objects(api, namespace) == before


def test_the_notebook_extension_and_the_agent_answer_only_their_own(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    """nora's notebook server's gpusessions routes refuse another user, no login and an
    oversized body (413 before the login); her holder's agent, with the token Secret the hub
    made itself (nothing made beforehand), refuses a missing or wrong token (401), any body
    (413), and a second fresh read within a second (the last sample, marked so)."""
    nora, mallory = user_token(hub, "nora"), user_token(hub, "mallory")
    spawn(hub, "nora", {"profile": "mig-1g-10gb"})
    before = objects(api, namespace)
    base = f"{hub.url}/user/nora/gpusessions"
    # Ready in the hub is a moment before the proxy's route answers (a 503 page): her own
    # reading first.
    waits.wait_for(
        lambda: raw(f"{base}/gpu", "GET", None, {"Authorization": f"token {nora}"})[0] == 200,
        60,
        "nora's notebook server to answer through the proxy",
    )
    wrong: list[Any] = []
    for method, path in (("GET", "gpu"), ("POST", "gpu/release"), ("GET", "warnings"), ("POST", "keep")):
        body = None if method == "GET" else b"{}"
        for who, tok in (("mallory", mallory), ("no login", None)):
            headers = {"Authorization": f"token {tok}"} if tok else {}
            code, answer = raw(f"{base}/{path}", method, body, headers)
            if code not in (401, 403):
                wrong.append((who, method, path, code, answer))
        big = b'{"a": "' + b"x" * (65 * 1024) + b'"}'
        code, answer = raw(f"{base}/{path}", method, big, {"Authorization": f"token {nora}"})
        if code != 413 or "too large: at most 64 KiB" not in message(answer):
            wrong.append(("oversized", method, path, code, answer))
    assert wrong == []
    code, answer = raw(f"{base}/gpu", "GET", None, {"Authorization": f"token {nora}"})
    assert code == 200, (code, answer)

    # The agent: the hub made its token Secret; the culler reads with it, nobody else does.
    secret = api.get("Secret", "gpusessions-agent-token", namespace)
    token = base64.b64decode(secret["data"]["token"]).decode()
    ip = api.get("Pod", "gpu-holder-nora", namespace)["status"]["podIP"]
    agent = f"http://{ip}:9400/api/status"
    waits.wait_for(
        lambda: raw(agent, "GET", None, {"Authorization": f"Bearer {token}"})[0] == 200, 30, "agent"
    )
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {nora}"}):
        code, answer = raw(agent, "GET", None, headers)
        assert code == 401 and "missing or wrong agent token" in message(answer), (headers, code, answer)
    code, answer = raw(agent, "POST", b"{}", {"Authorization": f"Bearer {token}"})
    assert code == 413 and "takes no request body" in message(answer), (code, answer)
    fresh = [raw(agent + "?fresh=1", "GET", None, {"Authorization": f"Bearer {token}"})[1] for _ in range(2)]
    assert fresh[0]["fresh"] is True and fresh[1]["fresh"] is False, fresh
    assert "at most one fresh read per 1 s per caller" in fresh[1]["fresh_refused"]
    assert objects(api, namespace) == before


def test_two_named_servers_started_at_once_take_one_gpu_session(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    """max_gpu_sessions_per_user = 1: olga starts two named GPU servers at the same moment;
    exactly one gets a claim, the other's progress says why, in words."""
    user_token(hub, "olga")
    with ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(lambda s: follow_spawn(hub, "olga", {"profile": "mig-1g-10gb"}, s), ("a", "b"))
        )
    ready = [s for s in ("a", "b") if (server_model(hub, "olga", s) or {}).get("ready")]
    assert len(ready) == 1, (answers, hub.log_tail(3000))
    refused = answers[1 if ready == ["a"] else 0][1]
    assert any("the most one user may have on this hub" in m for m in refused), refused
    claims = [
        c
        for c in api.list("ResourceClaim", namespace)["items"]
        if (c["metadata"].get("annotations") or {}).get("gpusessions.io/user") == "olga"
    ]
    assert len(claims) == 1, [c["metadata"]["name"] for c in claims]
    stop(hub, "olga", ready[0])
