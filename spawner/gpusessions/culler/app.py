"""The culler's settings and start-up: a traitlets `Application`.

One declaration gives the command line (the flag spellings the chart and
gpusessions.hub.cullerservice pass: `--idle-limit=7200`, `--dry-run`, ...), a config file
(`--config=culler_config.py`, `c.CullerApp.idle_limit = 7200`) and the
defaults, which are `policy.Rules`' own (the policy stays pure and testable).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from traitlets import Bool, Dict, Float, Integer, TraitError, Unicode, validate
from traitlets.config import Application

from gpusessions.culler.agentauth import AgentTokens
from gpusessions.culler.agents import AgentReader
from gpusessions.culler.cycle import Culler, run_forever
from gpusessions.culler.history import History
from gpusessions.culler.hub import HubAPI
from gpusessions.culler.jobtime import note_forever
from gpusessions.culler.kube import ClusterSide
from gpusessions.culler.policy import PARKING, Policy, Rules
from gpusessions.culler.web import make_app


class JSONDict(Dict):
    """A Dict trait given on the command line as one JSON object (`--per-profile='{...}'`)."""

    def from_string(self, s: str) -> Any:
        try:
            value = json.loads(s)
        except json.JSONDecodeError as e:
            raise ValueError(f"not JSON: {e}") from None
        if not isinstance(value, dict):
            raise ValueError(f"not a JSON object: {s!r}")
        return value

    def from_string_list(self, s_list: list[str]) -> Any:
        return self.from_string(s_list[-1])

    def validate(self, obj: Any, value: Any) -> Any:
        # traitlets hands on the raw strings when from_string_list fails: say why it failed.
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            try:
                self.from_string(value[-1])
            except ValueError as e:
                flag = (self.name or "").replace("_", "-")
                raise TraitError(f"bad policy settings: --{flag}: {e}") from None
        return super().validate(obj, value)


class LastFloat(Float):
    """A flag given twice takes its last value, as argparse did (the tests' hubs add overrides)."""

    def from_string_list(self, s_list: list[str]) -> Any:
        return self.from_string(s_list[-1])


class LastInt(Integer):
    """A flag given twice takes its last value, as argparse did."""

    def from_string_list(self, s_list: list[str]) -> Any:
        return self.from_string(s_list[-1])


class LastUnicode(Unicode):
    """A flag given twice takes its last value, as argparse did."""

    def from_string_list(self, s_list: list[str]) -> Any:
        return self.from_string(s_list[-1])


def _rule(name: str, help_text: str) -> LastFloat:
    """A policy setting: its default is the one in policy.Rules."""
    return LastFloat(getattr(Rules, name), help=help_text).tag(config=True)


def _park(name: str, help_text: str) -> LastFloat:
    """A rule for sessions that park (their claim says so; a cull saves their kernels' variables
    and the next start restores them): its default is policy.PARKING's."""
    return LastFloat(
        PARKING[name],
        help=f"{help_text}, in seconds; the shorter of this and the plain rule applies (0: the "
        "plain rule). A cull of such a session loses no state; the other rules apply to it as set",
    ).tag(config=True)


class CullerApp(Application):
    name = "gpusessions.culler"
    description = "The gpusessions culler: releases idle and kept GPUs, serves the admin page and metrics."

    interval = LastFloat(60.0, help="seconds between cycles").tag(config=True)
    stopped_keep = _rule("stopped_keep", "keep a stopped server's GPU this long")
    stopped_keep_contended = _rule(
        "stopped_keep_contended",
        "keep a stopped server's GPU only this long while someone waits for that GPU size (0: off)",
    )
    idle_limit = _rule("idle_limit", "cull after notebook AND GPU idle this long")
    gpu_idle_limit = _rule(
        "gpu_idle_limit", "cull after the GPU alone was idle this long, even with notebook activity (0: off)"
    )
    gpu_idle_limit_contended = _rule(
        "gpu_idle_limit_contended",
        "cull after the GPU alone was idle this long while another user waits for that GPU size "
        "and no kept GPU serves them (0: off)",
    )
    keep_contended = _rule(
        "keep_contended",
        "a user's Keep my GPU holds only this long after the click while another user waits for "
        "that GPU size (0: its full length; an admin's keep always holds)",
    )
    keep_limit = _rule(
        "keep_limit",
        "a user's Keep my GPU holds at most this long after the warning it answered, whoever "
        "waits; then the session is warned again (0: the keep's own length, the spawner's "
        "gpu_keep_extension)",
    )
    max_age = _rule("max_age", "end any session this old (0: off)")
    warn_before = _rule("warn_before", "warn this long before a cull")
    orphan_grace = _rule("orphan_grace", "release orphan claims this old")
    cull_unread_on_hub_idle = Bool(
        Rules.cull_unread_on_hub_idle,
        help="""a running session whose GPU could not be read this cycle (its agent did not answer,
        also when asked again within the cycle; NVML failed) may be culled by idle_limit on the
        notebook's (the hub's) activity alone. Off (the default): such a session is never culled
        by a rule that needs its GPU idle (idle_limit, gpu_idle_limit, gpu_idle_limit_contended);
        max_age still ends it""",
    ).tag(config=True)
    agent_concurrency = LastInt(
        100,
        help="""agent reads in flight at once (every holder's agent is read in every cycle); the
        culler's HTTP client to the agents has as many connections, so no read waits in a queue
        while its timeout runs""",
    ).tag(config=True)
    agent_timeout = LastFloat(2.0, help="seconds one agent read may take (to connect, and to answer)").tag(
        config=True
    )
    agent_retry_timeout = LastFloat(
        10.0,
        help="""seconds a failed agent read (no connection, a timeout, a 5xx or 429 answer) is tried
        again within the cycle, with exponential backoff (0: not tried again); a GPU still not read
        after that is never counted as idle""",
    ).tag(config=True)
    park_gpu_idle_limit = _park(
        "gpu_idle_limit",
        "gpu_idle_limit for a session that parks: cull after its GPU alone was idle this long",
    )
    park_idle_limit = _park(
        "idle_limit", "idle_limit for a session that parks: notebook AND GPU idle this long"
    )
    park_stopped_keep = _park(
        "stopped_keep", "stopped_keep for a session that parks: its stopped server's GPU"
    )
    park_warn_before = _park("warn_before", "warn_before for a session that parks")
    park_keep_limit = _park(
        "keep_limit", "keep_limit for a session that parks: how long a user's Keep my GPU holds at most"
    )
    park_keep_contended = _park(
        "keep_contended", "keep_contended for a session that parks: a Keep while someone waits for its size"
    )
    per_profile = JSONDict(
        help='per profile slug, any of the rules above: {"<profile slug>": {"idle_limit": 600}}'
    ).tag(config=True)
    dry_run = Bool(False, help="decide and log, change nothing").tag(config=True)
    jobs = Bool(
        False,
        help="also list the hub's notebook jobs (sessions JSON, /metrics) and note on each Job the run "
        "time of its pods (so a preempted pod's GPU time is kept); needs list/watch/patch on batch jobs "
        "and list/watch on pods",
    ).tag(config=True)
    namespace = LastUnicode(
        "", help="the namespace of this hub's sessions; '*' for all namespaces (one hub per cluster only)"
    ).tag(config=True)
    history_file = LastUnicode(
        "",
        help="""where the culler keeps its record of GPU time (held, busy, idle, kept, reclaimed
        per profile and queue, 5-minute buckets, 8 days) across restarts: a JSON file, written
        at most once a minute and at exit; "" keeps it in memory only (lost at a restart)""",
    ).tag(config=True)
    agent_token_secret = LastUnicode(
        "",
        help="""the Secret (key `token`, in each session's namespace) whose token the holders'
        GPU agents require, read from the cluster (needs get on that Secret); the spawner's
        `agent_token_secret`. GPUSESSIONS_AGENT_TOKEN, when set, is used instead""",
    ).tag(config=True)
    admin_keep_max = LastFloat(
        30 * 86400.0,
        help="the longest keep an admin may give a session from the admin page or its API, in "
        "seconds ahead (a later or non-finite time is refused with a 400)",
    ).tag(config=True)
    max_body_bytes = LastFloat(
        64 * 1024,
        help="the largest request body, in bytes, the culler's web routes read (a larger one is "
        "answered 413 before it is parsed)",
    ).tag(config=True)
    config_file = LastUnicode("", help="a config file (Python or JSON) setting any of these").tag(config=True)

    aliases = {
        "interval": "CullerApp.interval",
        "stopped-keep": "CullerApp.stopped_keep",
        "stopped-keep-contended": "CullerApp.stopped_keep_contended",
        "idle-limit": "CullerApp.idle_limit",
        "gpu-idle-limit": "CullerApp.gpu_idle_limit",
        "gpu-idle-limit-contended": "CullerApp.gpu_idle_limit_contended",
        "keep-contended": "CullerApp.keep_contended",
        "keep-limit": "CullerApp.keep_limit",
        "park-gpu-idle-limit": "CullerApp.park_gpu_idle_limit",
        "park-idle-limit": "CullerApp.park_idle_limit",
        "park-stopped-keep": "CullerApp.park_stopped_keep",
        "park-warn-before": "CullerApp.park_warn_before",
        "park-keep-limit": "CullerApp.park_keep_limit",
        "park-keep-contended": "CullerApp.park_keep_contended",
        "max-age": "CullerApp.max_age",
        "warn-before": "CullerApp.warn_before",
        "orphan-grace": "CullerApp.orphan_grace",
        "agent-concurrency": "CullerApp.agent_concurrency",
        "agent-timeout": "CullerApp.agent_timeout",
        "agent-retry-timeout": "CullerApp.agent_retry_timeout",
        "per-profile": "CullerApp.per_profile",
        "namespace": "CullerApp.namespace",
        "history-file": "CullerApp.history_file",
        "agent-token-secret": "CullerApp.agent_token_secret",
        "admin-keep-max": "CullerApp.admin_keep_max",
        "max-body-bytes": "CullerApp.max_body_bytes",
        "config": "CullerApp.config_file",
    }
    flags = {
        "dry-run": ({"CullerApp": {"dry_run": True}}, "decide and log, change nothing"),
        "jobs": ({"CullerApp": {"jobs": True}}, "also list the hub's notebook jobs"),
        "cull-unread-on-hub-idle": (
            {"CullerApp": {"cull_unread_on_hub_idle": True}},
            "a session whose GPU could not be read may be culled on the hub's activity alone",
        ),
    }

    policy: Policy

    @validate("agent_concurrency")
    def _positive_concurrency(self, proposal: Any) -> int:
        if proposal["value"] < 1:
            raise TraitError(f"agent_concurrency must be at least 1, not {proposal['value']}")
        return int(proposal["value"])

    @validate("agent_timeout")
    def _positive_timeout(self, proposal: Any) -> float:
        if proposal["value"] <= 0:
            raise TraitError(f"agent_timeout must be more than 0 seconds, not {proposal['value']}")
        return float(proposal["value"])

    def rules(self) -> Rules:
        return Rules(**{name: getattr(self, name) for name in Rules.__dataclass_fields__})

    def parking(self) -> dict[str, float]:
        """The rules for sessions that park, over the plain ones (the park_* settings)."""
        return {name: float(getattr(self, f"park_{name}")) for name in PARKING}

    def initialize(self, argv: list[str] | None = None) -> None:
        self.parse_command_line(argv)
        if self.config_file:
            self.load_config_file(self.config_file)
            self.parse_command_line(argv)  # the command line wins over the file
        try:
            self.policy = Policy(self.rules(), dict(self.per_profile), self.dry_run, self.parking())
            for profile in self.policy.per_profile:
                self.policy.for_profile(profile)
                self.policy.for_profile(profile, parks=True)
        except (ValueError, TypeError) as e:
            print(f"{self.name}: error: bad policy settings: {e}", file=sys.stderr)
            self.exit(2)

    def start(self) -> None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        asyncio.run(self.run())

    async def run(self) -> None:
        api_url = os.environ["JUPYTERHUB_API_URL"]
        token = os.environ["JUPYTERHUB_API_TOKEN"]
        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpusessions/")
        bind = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
        # Stop at once when the hub stops us (SIGINT, then SIGTERM): a culler that lingers while
        # its cancelled watches unwind can still act on a hub that is going away. Nothing here
        # needs flushing: every decision is already in the claims' annotations.
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _exit_now, sig)
        cluster = ClusterSide(
            namespace=None if self.namespace in ("", "*") else self.namespace, jobs=self.jobs
        )
        await cluster.ready()
        agents = AgentReader(
            tokens=AgentTokens(
                os.environ.get("GPUSESSIONS_AGENT_TOKEN"), self.agent_token_secret, cluster.secret_token
            ),
            timeout=self.agent_timeout,
            concurrency=self.agent_concurrency,
            retry_timeout=self.agent_retry_timeout,
        )
        culler = Culler(
            cluster,
            HubAPI(api_url, token),
            self.policy,
            agents=agents,
            history=History(self.history_file or None),
        )
        _AT_EXIT.append(lambda: culler.history.save(time.time(), force=True))
        if cluster.job_times is not None:  # --jobs: note the run time of the jobs' pods
            _TASKS.append(
                asyncio.ensure_future(note_forever(cluster, min(self.interval, 30.0), self.dry_run))
            )
        limit = int(self.max_body_bytes)
        app = make_app(culler, prefix, keep_max=self.admin_keep_max, max_body_bytes=limit)
        # tornado's own limit (it closes the connection past it) well above ours, which answers in words.
        app.listen(
            bind.port or 80, address=bind.hostname or "127.0.0.1", max_body_size=max(4 * limit, 1 << 20)
        )
        logging.getLogger("gpusessions.culler").info(
            "culler on %s%s every %.0fs%s",
            bind.netloc,
            prefix,
            self.interval,
            " (dry run)" if self.dry_run else "",
        )
        await run_forever(culler, self.interval)


# Tasks beside the cycle (kept referenced while they run).
_TASKS: list[asyncio.Future[None]] = []
# What to do before exiting at a signal (save the record).
_AT_EXIT: list[Callable[[], None]] = []


def _exit_now(sig: int) -> None:
    logging.getLogger("gpusessions.culler").info("stopping (%s)", signal.Signals(sig).name)
    for fn in _AT_EXIT:
        try:
            fn()
        except Exception as e:  # never block the exit
            logging.getLogger("gpusessions.culler").warning("at exit: %s", e)
    logging.shutdown()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    app = CullerApp()
    app.initialize(argv)
    app.start()
    return 0
