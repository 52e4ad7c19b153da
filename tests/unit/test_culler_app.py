"""The culler's settings (gpusessions.culler.app.CullerApp): one declaration for the command line,
a config file and the defaults (policy.Rules'); every flag the chart and hub/cullerservice.py pass works."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from gpusessions.culler.app import CullerApp
from gpusessions.culler.policy import Rules
from helmtools import template


def _app(*argv: str) -> CullerApp:
    CullerApp.clear_instance()
    app = CullerApp()
    app.initialize(list(argv))
    return app


def test_defaults_are_the_policy_rules() -> None:
    app = _app()
    assert app.policy.rules == Rules()
    assert (app.interval, app.dry_run, app.namespace, app.policy.per_profile) == (60.0, False, "", {})
    for f in dataclasses.fields(Rules):
        assert getattr(CullerApp, f.name).default_value == f.default
        flag = f.name.replace("_", "-")
        if isinstance(f.default, bool):  # a flag that turns it on
            assert CullerApp.flags[flag][0] == {"CullerApp": {f.name: True}}
        else:
            assert CullerApp.aliases[flag] == f"CullerApp.{f.name}"


def test_every_flag_spelling() -> None:
    app = _app(
        "--interval=5",
        "--stopped-keep",
        "30",
        "--stopped-keep-contended=10",
        "--idle-limit=600",
        "--gpu-idle-limit=0",
        "--max-age=86400",
        "--warn-before=60",
        "--orphan-grace=7",
        '--per-profile={"mig-1g-10gb": {"idle_limit": 1800}}',
        "--namespace=jhub",
        "--dry-run",
        "--cull-unread-on-hub-idle",
        "--agent-concurrency=7",
        "--agent-timeout=1.5",
        "--agent-retry-timeout=0",
    )
    assert (app.agent_concurrency, app.agent_timeout, app.agent_retry_timeout) == (7, 1.5, 0)
    assert app.interval == 5.0 and app.dry_run and app.namespace == "jhub"
    assert app.policy.rules == Rules(
        stopped_keep=30,
        stopped_keep_contended=10,
        idle_limit=600,
        gpu_idle_limit=0,
        max_age=86400,
        warn_before=60,
        orphan_grace=7,
        cull_unread_on_hub_idle=True,
    )
    assert app.policy.dry_run
    assert app.policy.for_profile("mig-1g-10gb").idle_limit == 1800
    assert app.policy.for_profile("other").idle_limit == 600
    # the long form traitlets gives every setting
    assert _app("--CullerApp.idle_limit=42").policy.rules.idle_limit == 42


def test_a_flag_given_twice_takes_its_last_value() -> None:
    """As with argparse before: the tests' hubs append overrides to the default flags."""
    app = _app("--stopped-keep", "3", "--interval=1", "--stopped-keep", "600", "--interval", "2")
    assert (app.policy.rules.stopped_keep, app.interval) == (600, 2)
    assert _app("--namespace=a", "--namespace=b").namespace == "b"
    assert _app('--per-profile={"a": {}}', '--per-profile={"b": {}}').policy.per_profile == {"b": {}}


def test_config_file_and_the_command_line_wins(tmp_path: Path) -> None:
    cfg = tmp_path / "culler_config.py"
    cfg.write_text(
        "c.CullerApp.idle_limit = 1200\nc.CullerApp.warn_before = 120\nc.CullerApp.dry_run = True\n"
    )
    app = _app(f"--config={cfg}", "--warn-before=30")
    assert (app.policy.rules.idle_limit, app.policy.rules.warn_before, app.dry_run) == (1200, 30, True)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (['--per-profile={"x": {"idle": 1}}'], "bad policy settings: unknown culler settings ['idle']"),
        (["--per-profile=[1]"], "bad policy settings: --per-profile: not a JSON object"),
        (["--per-profile={nope"], "bad policy settings: --per-profile: not JSON"),
        (["--idle-limit=soon"], "idle"),
        (['--per-profile={"x": {"cull_unread_on_hub_idle": 1}}'], "is true or false, not 1"),
        (["--agent-concurrency=0"], "agent_concurrency must be at least 1"),
    ],
)
def test_bad_settings_stop_with_a_message(argv: list[str], message: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpusessions.culler", *argv], capture_output=True, text=True, timeout=60
    )
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


def test_the_charts_culler_command_parses(tmp_path: Path) -> None:
    objs = template(tmp_path, {"culler": {"dryRun": True}}, namespace="team-ns")
    (dep,) = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpusessions-culler"]
    command = dep["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python3", "-m", "gpusessions.culler"]
    app = _app(*command[3:])
    assert app.namespace == "team-ns" and app.dry_run
    assert app.policy.rules == Rules()  # the chart's defaults are the culler's
    defaults = _app()
    for name in ("agent_concurrency", "agent_timeout", "agent_retry_timeout"):
        assert getattr(app, name) == getattr(defaults, name), name
    on = template(tmp_path, {"culler": {"cullUnreadOnHubIdle": True, "agentConcurrency": 500}})
    (dep,) = [o for o in on if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpusessions-culler"]
    app = _app(*dep["spec"]["template"]["spec"]["containers"][0]["command"][3:])
    assert app.policy.rules.cull_unread_on_hub_idle and app.agent_concurrency == 500


def test_hubconfig_args_parse() -> None:
    from traitlets.config import Config

    from gpusessions.hub.cullerservice import configure_culler

    c = Config()
    c.KubeSpawner.namespace = "jhub"
    configure_culler(c, admins=["admin"], args=["--interval", "1", "--idle-limit", "20", "--dry-run"])
    (svc,) = c.JupyterHub.services
    app = _app(*svc["command"][3:])
    assert (app.interval, app.policy.rules.idle_limit, app.dry_run, app.namespace) == (1, 20, True, "jhub")
    # The agents' token: read from the spawner's Secret (its default name, or as configured).
    assert app.agent_token_secret == "gpusessions-agent-token"
    c = Config()
    c.GPUSessionSpawner.agent_token_secret = "ours"
    configure_culler(c)
    assert _app(*c.JupyterHub.services[0]["command"][3:]).agent_token_secret == "ours"
    c = Config()
    configure_culler(c, agent_token="given")
    (svc,) = c.JupyterHub.services
    assert svc["environment"]["GPUSESSIONS_AGENT_TOKEN"] == "given"
    assert "--agent-token-secret" not in svc["command"]


def test_the_parking_rules_are_settings_with_the_policys_defaults() -> None:
    from gpusessions.culler.policy import PARKING

    assert _app().policy.parking == PARKING
    app = _app(
        "--park-gpu-idle-limit=300", "--park-warn-before", "30", "--park-keep-limit=600", "--keep-limit=7200"
    )
    assert app.policy.parking == {**PARKING, "gpu_idle_limit": 300, "warn_before": 30, "keep_limit": 600}
    assert app.policy.for_profile("x", parks=True).gpu_idle_limit == 300
    assert app.policy.for_profile("x").keep_limit == 7200
    for name in PARKING:
        flag = "park-" + name.replace("_", "-")
        assert CullerApp.aliases[flag] == f"CullerApp.park_{name}"
        assert getattr(CullerApp, f"park_{name}").help
