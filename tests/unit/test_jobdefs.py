"""Job definitions' pure builders and checks (core/schedule.py, core/jobdefs.py): the CronJob,
its claim template and a run now validate against strict Kubernetes 1.35 schemas."""

from __future__ import annotations

import json

import pytest

import kubeschemas
from gpusessions.core import jobdefs as D
from gpusessions.core import jobs as J
from gpusessions.core import labels as L
from gpusessions.core import schedule as S

from .jobsamples import MIG, SETTINGS

GOOD = {"name": "nightly", "input": "work/train.ipynb", "size": "mig-3g-40gb", "schedule": "0 2 * * *"}


def _def(**kw: object) -> D.Definition:
    return D.check_definition({**GOOD, **kw}, J.Limits(), 15)


@pytest.mark.parametrize(
    ("expr", "gap"),
    [
        ("* * * * *", 1),
        ("*/15 * * * *", 15),
        ("0 2 * * *", 24 * 60),
        ("0,30 9-17 * * mon-fri", 30),
        ("5/20 * * * *", 20),
        ("0 0,23 * * 1", 60),
        ("0 */6 1 jan,JUL ?", 6 * 60),
        ("45 23 * * *", 24 * 60),
    ],
)
def test_schedules_and_their_shortest_gap(expr: str, gap: int) -> None:
    assert S.parse(expr).shortest_gap() == gap


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("", "five fields"),
        ("* * * *", "five fields"),
        ("0 * * * * *", "five fields"),
        ("@daily", "not a macro"),
        ("TZ=UTC 0 2 * * *", "TZ= prefix"),
        ("60 * * * *", "minute 60 is outside 0-59"),
        ("0 24 * * *", "hour 24 is outside 0-23"),
        ("0 0 0 * *", "day of month 0 is outside 1-31"),
        ("0 0 * 13 *", "month 13"),
        ("0 0 * * 7", "day of week 7 is outside 0-6"),
        ("0 0 * * funday", "not a number or a name"),
        ("5-1 * * * *", "runs backwards"),
        ("*/0 * * * *", "step"),
        ("? * * * *", "'?' is for the day fields"),
        ("0 2 * * *; rm -rf /", "five fields"),
        ("0 2\n* * *", "printable"),
        (3, "cron expression"),
    ],
)
def test_bad_schedules_are_refused_with_why(expr: object, words: str) -> None:
    with pytest.raises(S.InvalidSchedule, match=words):
        S.check_schedule(expr, 1)


def test_the_minimum_interval_and_time_zones() -> None:
    assert S.check_schedule("*/15  * * * *", 15) == "*/15 * * * *"
    with pytest.raises(S.InvalidSchedule, match="runs every 1 minute"):
        S.check_schedule("* * * * *", 15)
    assert S.check_timezone(None) is None and S.check_timezone("") is None
    assert S.check_timezone("Europe/Paris") == "Europe/Paris" and S.check_timezone("UTC") == "UTC"
    for bad in ("Mars/Olympus", "../../etc/passwd", "Local", "a b", 5):
        with pytest.raises(S.InvalidSchedule):
            S.check_timezone(bad)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({**GOOD, "schedule": "* * * * *"}, "shortest interval allowed is 15"),
        ({**GOOD, "schedule": "bad"}, "five fields"),
        ({**GOOD, "timezone": "Nowhere/City"}, "not a known time zone"),
        ({**GOOD, "workers": 2}, "workers must be 1 for a schedule"),
        ({**GOOD, "workers": True}, "workers must be 1"),
        ({**GOOD, "input": "../x.ipynb"}, "outside your home"),
        ({**GOOD, "active": "yes"}, "active must be true or false"),
        ({**GOOD, "suspend": False}, "unknown field"),
        ({k: v for k, v in GOOD.items() if k != "schedule"}, "cron expression"),
        ([], "JSON object"),
    ],
)
def test_tampered_definitions_are_refused(body: object, words: str) -> None:
    with pytest.raises(D.InvalidDefinition, match=words):
        D.check_definition(body, J.Limits(), 15)


def test_the_cronjob_runs_the_one_off_job_in_the_team_queue() -> None:
    d = _def(parameters={"epochs": 3}, timezone="Europe/Paris")
    cj = D.build_cronjob("abc123def456", "ns", "alice", d, SETTINGS, MIG, "MIG 3g.40gb", history_limit=2)
    kubeschemas.validate(cj)
    md, spec = cj["metadata"], cj["spec"]
    assert md["name"] == "nbdef-abc123def456"
    assert (
        md["labels"][L.NOTEBOOK_COMPONENT] == "jobdefinition" and md["labels"][L.COMPONENT] == "jobdefinition"
    )
    assert md["labels"][D.DEFINITION_LABEL] == "abc123def456"
    assert D.owned_definition(cj, "alice") and not D.owned_definition(cj, "alic")
    assert not J.owned_by_user(cj, "alice"), "a definition is not a job"
    assert (spec["schedule"], spec["timeZone"], spec["suspend"]) == ("0 2 * * *", "Europe/Paris", False)
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["successfulJobsHistoryLimit"] == spec["failedJobsHistoryLimit"] == 2
    tmpl = spec["jobTemplate"]
    # Its runs are jobs to every list of jobs (the culler's watch, the user's clean-up).
    for labels in (tmpl["metadata"]["labels"], tmpl["spec"]["template"]["metadata"]["labels"]):
        assert labels[L.NOTEBOOK_COMPONENT] == "job" and labels[L.MANAGED_BY] == "gpusessions"
        assert labels["kai.scheduler/queue"] == "team-a" and labels[D.DEFINITION_LABEL] == "abc123def456"
        assert J.JOB_ID_LABEL not in labels
    assert J.owned_by_user(tmpl, "alice")
    assert J.read_request(tmpl)["parameters"] == {"epochs": 3}
    ps = tmpl["spec"]["template"]["spec"]
    assert ps["schedulerName"] == "kai-scheduler" and ps["priorityClassName"] == "train"
    assert ps["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "nbdef-abc123def456"}]
    assert tmpl["spec"]["podFailurePolicy"]["rules"][0]["action"] == "Count"
    c = ps["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert "GPUSESSIONS_JOB_ID" not in env  # the shell sets it from the run's Job name
    assert env["GPUSESSIONS_JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['batch.kubernetes.io/job-name']"
    )
    assert env["GPUSESSIONS_JOB_DEFINITION_ID"]["value"] == "abc123def456"
    assert c["command"][:2] == ["sh", "-c"] and c["command"][3] == "train.ipynb"
    assert c["command"][4:8] == ["papermill", "work/train.ipynb", "--cwd", "work"]
    assert json.loads(c["command"][9]) == {"epochs": 3}
    assert D.read_definition(cj)["schedule"] == "0 2 * * *"
    described = D.describe({**cj, "status": {"active": [{"name": "x"}]}})
    assert (described["id"], described["active"], described["active_runs"]) == ("abc123def456", True, 1)
    assert described["queue"] == "team-a" and described["size_text"] == "MIG 3g.40gb"


def test_the_run_script_writes_to_the_runs_folder(tmp_path: object) -> None:
    import os
    import subprocess

    cmd = D.run_command(_def(parameters={"x": 1}).job, "echo")
    env = {"PATH": os.environ["PATH"], "GPUSESSIONS_JOB_NAME": "nbdef-abc123def456-29000000"}
    out = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, check=True)
    # papermill <input> --cwd <dir> -y <json> <output>: the output last, in jobs/<run id>/.
    assert out.stdout.split() == [
        "work/train.ipynb",
        "--cwd",
        "work",
        "-y",
        '{"x":',
        "1}",
        "jobs/abc123def456-29000000/train.ipynb",
    ]
    assert (tmp_path / "jobs" / "abc123def456-29000000").is_dir()  # type: ignore[operator]


def test_a_paused_cpu_definition_has_no_claim() -> None:
    cj = D.build_cronjob("abc123def456", "ns", "alice", _def(active=False, size="cpu"), SETTINGS, None)
    kubeschemas.validate(cj)
    assert cj["spec"]["suspend"] is True and "timeZone" not in cj["spec"]
    assert "resourceClaims" not in cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def test_the_claim_template_and_a_run_now() -> None:
    t = D.build_claim_template("abc123def456", "ns", "alice", MIG, {"kai.scheduler/queue": "team-a"})
    kubeschemas.validate(t)
    assert t["metadata"]["name"] == "nbdef-abc123def456"
    assert t["metadata"]["labels"][L.NOTEBOOK_COMPONENT] == "job"
    assert t["spec"]["metadata"]["labels"][D.DEFINITION_LABEL] == "abc123def456"
    assert J.JOB_ID_LABEL not in t["spec"]["metadata"]["labels"]
    cj = D.build_cronjob("abc123def456", "ns", "alice", _def(), SETTINGS, MIG)
    cj["metadata"]["uid"] = "u-1"
    run = D.build_run(cj, "m1a2b3c4d")
    kubeschemas.validate(run)
    assert run["metadata"]["name"] == "nbdef-abc123def456-m1a2b3c4d"
    [owner] = run["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("CronJob", "u-1", True)
    assert (
        run["spec"] == cj["spec"]["jobTemplate"]["spec"]
        and run["spec"] is not cj["spec"]["jobTemplate"]["spec"]
    )
    assert D.job_id_of(run) == "abc123def456-m1a2b3c4d" and D.definition_of(run) == "abc123def456"
    with pytest.raises(ValueError):
        D.build_run(cj, "../x")


def test_job_ids_and_names() -> None:
    assert D.job_name_for("abc123def456") == "nbjob-abc123def456"
    assert D.job_name_for("abc123def456-29000000") == "nbdef-abc123def456-29000000"
    for bad in ("x", "ABC123DEF456", "abc123def456-", "abc123def456-1-2", "../abc123def456"):
        assert D.job_name_for(bad) is None, bad
    one_off = {"metadata": {"name": "nbjob-abc123def456", "labels": {J.JOB_ID_LABEL: "abc123def456"}}}
    assert D.job_id_of(one_off) == "abc123def456" and D.definition_of(one_off) is None


def test_a_patch_is_merged_on_the_stored_definition() -> None:
    stored = {**_def().json(), "size_text": "MIG 3g.40gb"}
    body = D.merged(stored, {"active": False})
    assert "size_text" not in body
    assert D.check_definition(body, J.Limits(), 15).active is False
    with pytest.raises(D.InvalidDefinition, match="unknown field"):
        D.merged(stored, {"image": "evil"})
