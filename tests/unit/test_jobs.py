"""Notebook jobs' pure builders and checks (core/jobs.py), the objects validated against strict
Kubernetes 1.35 schemas."""

from __future__ import annotations

import json

import pytest

import kubeschemas
from gpusessions.core import jobs as J
from gpusessions.core import labels as L

from .jobsamples import MIG, SETTINGS, _req


def test_job_with_gpu_is_valid_and_queued() -> None:
    req = _req(parameters={"epochs": 3, "lr": 0.1, "tag": "x"})
    job = J.build_job("abc123def456", "ns", "alice", req, SETTINGS, MIG, "MIG 3g.40gb")
    kubeschemas.validate(job)
    md, spec = job["metadata"], job["spec"]
    assert md["name"] == "nbjob-abc123def456"
    assert md["labels"][L.NOTEBOOK_COMPONENT] == "job"
    assert md["labels"][L.COMPONENT] == "job"
    assert md["labels"][L.MANAGED_BY] == "gpusessions"
    assert md["labels"]["kai.scheduler/queue"] == "team-a"
    assert md["annotations"][L.USER_ANNOTATION] == "alice"
    assert J.MIN_MEMBER_ANNOTATION not in md["annotations"]
    pod = spec["template"]
    assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    assert pod["metadata"]["labels"][L.USER_LABEL] == "alice"
    ps = pod["spec"]
    assert ps["schedulerName"] == "kai-scheduler"
    assert ps["priorityClassName"] == "train"
    assert ps["restartPolicy"] == "Never"
    assert ps["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "nbjob-abc123def456"}]
    c = ps["containers"][0]
    assert c["image"] == SETTINGS.image
    assert c["resources"]["claims"] == [{"name": "gpu"}]
    assert c["command"][:4] == ["sh", "-c", 'mkdir -p "$0" && exec "$@"', "jobs/abc123def456"]
    assert c["command"][4:9] == [
        "papermill",
        "work/train.ipynb",
        "jobs/abc123def456/train.ipynb",
        "--cwd",
        "work",
    ]
    assert json.loads(c["command"][10]) == {"epochs": 3, "lr": 0.1, "tag": "x"}
    assert {"name": "TEAM", "value": "a"} in c["env"]
    assert c["volumeMounts"] == [{"name": "home", "mountPath": "/home/jovyan"}]
    assert ps["volumes"][0]["persistentVolumeClaim"]["claimName"] == "claim-alice"
    assert c["workingDir"] == "/home/jovyan"
    # Preemption requeues (counted against the requeue limit), any other failure fails the job.
    assert spec["backoffLimit"] == 2
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "Count",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert rules[1]["action"] == "FailJob"
    assert J.read_request(job)["parameters"] == {"epochs": 3, "lr": 0.1, "tag": "x"}


def test_cpu_job_has_no_claim_and_several_workers_are_one_gang() -> None:
    cpu = J.build_job("abcdefgh", "ns", "bob", _req(size="cpu"), SETTINGS, None)
    kubeschemas.validate(cpu)
    assert "resourceClaims" not in cpu["spec"]["template"]["spec"]
    assert "claims" not in cpu["spec"]["template"]["spec"]["containers"][0]["resources"]
    two = J.build_job("abcdefgh", "ns", "bob", _req(workers=2), SETTINGS, MIG)
    kubeschemas.validate(two)
    assert two["metadata"]["annotations"][J.MIN_MEMBER_ANNOTATION] == "2"
    assert two["spec"]["completions"] == two["spec"]["parallelism"] == 2
    assert two["spec"]["completionMode"] == "Indexed"
    assert two["spec"]["template"]["spec"]["containers"][0]["command"][6] == (
        "jobs/abcdefgh/train.worker-$(JOB_COMPLETION_INDEX).ipynb"
    )


def test_claim_template_is_valid_and_labelled() -> None:
    t = J.build_claim_template("abc123def456", "ns", "alice", MIG, {"kai.scheduler/queue": "team-a"})
    kubeschemas.validate(t)
    assert t["spec"]["spec"] == MIG.spec()
    assert t["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    # Its claims are neither the culler's sessions nor counted in the hub's team quota.
    claim_labels = t["spec"]["metadata"]["labels"]
    assert L.MANAGED_BY not in claim_labels and "kai.scheduler/queue" not in claim_labels
    assert claim_labels[J.JOB_ID_LABEL] == "abc123def456"
    assert t["metadata"]["labels"][L.COMPONENT] == "job-claim"
    assert t["metadata"]["labels"][L.NOTEBOOK_COMPONENT] == "job"


def test_priority_size_then_queue_then_default() -> None:
    assert J.job_priority("train", {}, None, "team-a") == "train"
    assert J.job_priority("train", {"team-a": "build-preemptible"}, None, "team-a") == "build-preemptible"
    assert J.job_priority("train", {"team-a": "build-preemptible"}, "build", "team-a") == "build"
    assert J.job_priority("train", {"team-b": "build"}, None, "team-a") == "train"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"input": "/etc/passwd.ipynb"}, "relative to your home"),
        ({"input": "../bob/x.ipynb"}, "outside your home"),
        ({"input": "a/../../x.ipynb"}, "outside your home"),
        ({"input": "~bob/x.ipynb"}, "relative to your home"),
        ({"input": "x.py"}, "must be a notebook"),
        ({"input": "a\x00.ipynb"}, "characters"),
        ({"input": "a" * 300 + ".ipynb"}, "longer than"),
        ({"name": ""}, "name must be"),
        ({"name": "x" * 101}, "name must be"),
        ({"size": ""}, "size must be"),
        ({"size": 3}, "size must be"),
        ({"parameters": [1]}, "parameters must be"),
        ({"parameters": {"1x": 1}}, "not a Python identifier"),
        ({"parameters": {"__import__('os')": 1}}, "not a Python identifier"),
        ({"parameters": {"a": [1, 2]}}, "must be a string"),
        ({"parameters": {"a": "x" * 3000}}, "longer than"),
        ({"parameters": {f"p{i}": i for i in range(51)}}, "at most 50"),
        ({"workers": 0}, "workers must be"),
        ({"workers": 9}, "workers must be"),
        ({"workers": True}, "workers must be"),
        ({"output_formats": ["pdf"]}, "output_formats"),
        ({"namespace": "kube-system"}, "unknown field"),
        ({"image": "evil"}, "unknown field"),
    ],
)
def test_tampered_requests_are_refused_with_the_field(body: dict, words: str) -> None:
    with pytest.raises(J.InvalidJob, match=words):
        _req(**body)


def test_paths_are_normalized() -> None:
    assert _req(input="./a//b/../c.ipynb").input == "a/c.ipynb"
    assert J.check_request({"name": "n", "input": "c.ipynb", "size": "cpu"}).workers == 1


def _job(status: dict, backoff: int = 3) -> dict:
    return {"metadata": {"name": "j"}, "spec": {"backoffLimit": backoff}, "status": status}


def _pod(phase: str, conditions: list[dict]) -> dict:
    return {"metadata": {"name": "p"}, "status": {"phase": phase, "conditions": conditions}}


def test_states_for_people() -> None:
    waiting = _pod(
        "Pending",
        [{"type": "PodScheduled", "status": "False", "message": "OverLimit: team-a quota has reached ..."}],
    )
    s = J.job_state(_job({"active": 1}), [waiting])
    assert s["state"] == "queued" and "OverLimit: team-a" in s["message"]
    assert J.job_state(_job({"active": 1, "ready": 1}), [_pod("Running", [])])["state"] == "running"
    done = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    assert J.job_state(_job(done))["state"] == "completed"
    evicted = _pod(
        "Failed",
        [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "message": "Pod ns/p was preempted by workload ns/pg-x",
            }
        ],
    )
    s = J.job_state(_job({"active": 1, "failed": 1}), [evicted, waiting])
    assert s["state"] == "queued" and s["requeues"] == 1
    assert "Preempted 1 time(s)" in s["message"] and "preempted by workload ns/pg-x" in s["message"]
    over = {
        "failed": 3,
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
    }
    s = J.job_state(_job(over, backoff=2), [evicted])
    assert s["state"] == "failed" and "more than the requeue limit of 2" in s["message"]
    crash = {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}]}
    assert "notebook failed" in J.job_state(_job(crash))["message"]


def test_owned_by_user_uses_the_exact_name() -> None:
    job = J.build_job("abcdefgh", "ns", "alice", _req(), SETTINGS, MIG)
    assert J.owned_by_user(job, "alice")
    assert not J.owned_by_user(job, "Alice")
    assert not J.owned_by_user(job, "bob")


def test_gpu_seconds_count_preempted_runs() -> None:
    def pod(state: dict) -> dict:
        return {"status": {"containerStatuses": [{"name": "notebook", "state": state}]}}

    ended = pod({"terminated": {"startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:40Z"}})
    running = pod({"running": {"startedAt": "2026-01-01T00:10:00Z"}})
    now = 1767225600.0 + 600 + 50  # 00:10:50
    assert J.gpu_seconds([ended, running], 2, now) == (100 + 50) * 2
    assert J.gpu_seconds([pod({"waiting": {}})], 1, now) == 0


def test_who_preempted_a_job_from_kais_evict_events() -> None:
    job = J.build_job("abcdefgh", "ns", "cy", _req(), SETTINGS, MIG)  # queue team-a
    event = {
        "reason": "Evict",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "message": "Pod ns/nbjob-abcdefgh-x7k2p was preempted by workload ns/pg-gpu-holder-ann-1.\n"
        "team-a uses <GPU: 1, CPU: 0> with a quota of <GPU: 0, CPU: 0>, fair-share of <GPU: 0>.\n"
        "team-b uses <GPU: 0, CPU: 0> with a quota of <GPU: 2, CPU: 0>, fair-share of <GPU: 2>.",
    }
    other = {**event, "message": "Pod ns/jupyter-bo was preempted by workload ns/pg-x."}
    assert J.preempted_by([other, event], "ns", job) == "team team-b's workload pg-gpu-holder-ann-1"
    assert J.preempted_by([other], "ns", job) == ""
    assert J.preempted_by([event], "elsewhere", job) == ""


def test_the_cullers_view_of_jobs_and_their_metrics() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from gpusessions.culler import jobs as CJ

    job = J.build_job("abcdefgh", "ns", "alice", _req(workers=2), SETTINGS, MIG, "MIG 3g.40gb")
    job["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    job["status"] = {"startTime": "2026-01-01T00:00:00Z", "active": 2, "ready": 2}
    cpu = J.build_job("cpu12345", "ns", "bob", _req(size="cpu"), SETTINGS, None)
    cpu["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    [a, b] = CJ.rows([cpu, job], now=1767225600.0 + 100)
    assert (a["user"], a["state"], a["queue"], a["size"], a["priority"]) == (
        "alice",
        "running",
        "team-a",
        "mig-3g-40gb",
        "train",
    )
    assert a["gpu_seconds"] == 200  # 100 s x 2 GPU workers
    assert (b["user"], b["state"], b["gpu_seconds"]) == ("bob", "completed", 0)

    class Cache:
        objects = {"ns/a": job, "ns/b": cpu}

    class Culler:
        class cluster:
            jobs = Cache

    registry = CollectorRegistry(auto_describe=False)
    registry.register(CJ.JobsCollector(Culler))
    text = generate_latest(registry).decode()
    assert 'gpusessions_jobs{queue="team-a",size="mig-3g-40gb",state="running"} 1.0' in text
    assert 'gpusessions_job_gpu_seconds{queue="team-a",size="cpu"} 0.0' in text
    assert list(CJ.JobsCollector(object()).collect()) == []  # no Job watch: no families


def test_a_sizes_job_priority_from_the_settings_document() -> None:
    from gpusessions.hub import hubsetup

    size = {"name": "big", "displayName": "Big", "deviceClass": "gpu.nvidia.com", "jobPriorityClass": "build"}
    [_, big] = hubsetup.profiles(hubsetup.check({"sizes": [size]}))
    assert big["kubespawner_override"]["job_priority_class"] == "build"
    with pytest.raises(hubsetup.SettingsError, match="jobPriorityClass"):
        hubsetup.check({"sizes": [{**size, "jobPriorityClass": "urgent"}]})


def test_jobs_are_off_in_a_settings_document_unless_enabled() -> None:
    from traitlets.config import Config

    from gpusessions.hub import hubsetup
    from gpusessions.hub.jobs import NotebookJobs

    size = {"name": "s", "displayName": "S", "deviceClass": "gpu.nvidia.com"}
    for doc, on in [({"sizes": [size]}, False), ({"sizes": [size], "jobs": {"enabled": True}}, True)]:
        c = Config()
        hubsetup.apply(c, doc)
        assert NotebookJobs(config=c).enabled is on
    assert NotebookJobs().enabled  # a hub configured by hand: on


def _job_pod(uid: str, job: str, state: dict, **md: object) -> dict:
    return {
        "metadata": {
            "uid": uid,
            "namespace": "ns",
            "name": f"{job}-{uid}",
            "ownerReferences": [{"kind": "Job", "name": job}],
            **md,
        },
        "status": {"containerStatuses": [{"name": "notebook", "state": state}]},
    }


def test_a_preempted_pods_gpu_time_is_kept_on_its_job() -> None:
    from gpusessions.culler import jobs as CJ
    from gpusessions.culler.jobtime import NOTE_EVERY, JobTimes

    t0 = 1767225600.0  # 2026-01-01T00:00:00Z
    job = J.build_job("abcdefgh", "ns", "cy", _req(), SETTINGS, MIG)
    name = job["metadata"]["name"]
    first = _job_pod("u1", name, {"running": {"startedAt": "2026-01-01T00:00:00Z"}})
    times = JobTimes()
    times.observe([first], t0 + 100)
    assert times.notes([job]) == []  # running, 100 s: not yet worth a note
    # KAI evicts it: the pod is deleted, ends (terminated at 120 s), and goes.
    evicted = _job_pod(
        "u1",
        name,
        {"terminated": {"startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:02:00Z"}},
        deletionTimestamp="2026-01-01T00:01:55Z",
    )
    times.observe([evicted], t0 + 125)
    times.observe([], t0 + 130)  # gone
    [(ns, jname, value)] = times.notes([job])
    assert (ns, jname, value) == ("ns", name, {"u1": 120.0})
    # The note is on the Job: the hub counts the gone pod with the new one.
    job["metadata"]["annotations"][J.RUN_SECONDS] = json.dumps(value)
    second = _job_pod("u2", name, {"running": {"startedAt": "2026-01-01T00:10:00Z"}})
    now = t0 + 600 + 30
    assert J.gpu_seconds([second], 1, now, J.recorded_run_seconds(job)) == 120 + 30
    assert J.gpu_seconds([second], 1, now) == 30  # what was lost before
    # A culler restarted since: nothing seen, the note is enough; a long run is noted as it goes.
    fresh = JobTimes()
    fresh.observe([second], now)
    assert fresh.merged(job) == {"u1": 120.0, "u2": 30.0}
    assert fresh.notes([job]) == []
    fresh.observe([second], t0 + 600 + NOTE_EVERY)
    assert fresh.notes([job]) == [("ns", name, {"u1": 120.0, "u2": NOTE_EVERY})]
    # The admin page and metrics: the same sum (1 GPU claim per pod).
    job["status"] = {"startTime": "2026-01-01T00:00:00Z", "active": 1, "ready": 1, "failed": 1}

    class Cache:
        objects = {f"ns/{name}": job}
        ready = type("E", (), {"is_set": staticmethod(lambda: False)})

    class Culler:
        class cluster:
            jobs = Cache
            job_times = fresh
            job_pods = Cache

    [row] = CJ.rows(CJ.watched(Culler) or [], now=t0 + 600 + NOTE_EVERY)
    assert row["gpu_seconds"] == 120 + NOTE_EVERY and row["requeues"] == 1
    # A Job whose pods the culler never saw and that has no note (it ended while no culler with
    # --jobs ran) keeps the estimate from its own start and end, not 0.
    old = json.loads(json.dumps(job))
    old["metadata"]["name"] = "nbjob-old"
    del old["metadata"]["annotations"][J.RUN_SECONDS]
    old["status"] = {"startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:05:00Z"}
    Cache.objects = {"ns/nbjob-old": old}
    [row] = CJ.rows(CJ.watched(Culler) or [], now=t0 + 3600)
    assert row["gpu_seconds"] == 300, row
    Cache.objects = {f"ns/{name}": job}
    # The Job is deleted: its pods are forgotten.
    fresh.prune([])
    assert fresh.pods == {}
    # A bad note counts nothing rather than failing.
    job["metadata"]["annotations"][J.RUN_SECONDS] = "{not json"
    assert J.recorded_run_seconds(job) == {}
