"""The GPU agents' token by default: the hub makes its Secret where it is missing, the culler
reads it per namespace (and again after an agent refused it)."""

from __future__ import annotations

import asyncio
from typing import Any

from gpusessions.core.claims import AGENT_TOKEN_SECRET, build_agent_token_secret
from gpusessions.culler.agentauth import AgentTokens
from gpusessions.hub import agenttoken
from gpusessions.hub.spawnersettings import GPUSessionSettings
from gpusessions.kube.api import Conflict

Obj = dict[str, Any]


class SecretsAPI:
    def __init__(self, existing: frozenset[tuple[str, str]] = frozenset(), conflict: bool = False) -> None:
        self.existing = set(existing)
        self.conflict = conflict
        self.calls: list[tuple[str, str, str]] = []
        self.created: list[Obj] = []

    async def get_secret_metadata(self, namespace: str, name: str) -> Obj | None:
        self.calls.append(("get", namespace, name))
        return {"name": name} if (namespace, name) in self.existing else None

    async def create_secret(self, body: Obj) -> None:
        md = body["metadata"]
        self.calls.append(("create", md["namespace"], md["name"]))
        if self.conflict:
            raise Conflict("exists")
        self.created.append(body)
        self.existing.add((md["namespace"], md["name"]))


def test_the_spawner_gives_agents_a_token_by_default() -> None:
    assert GPUSessionSettings.class_traits()["agent_token_secret"].default() == AGENT_TOKEN_SECRET


def test_the_hub_makes_the_secret_where_it_is_missing_with_a_random_token() -> None:
    api = SecretsAPI()
    for ns in ("a", "a", "b"):
        asyncio.run(agenttoken.ensure(api, ns, AGENT_TOKEN_SECRET))
    assert api.calls == [
        ("get", "a", AGENT_TOKEN_SECRET),
        ("create", "a", AGENT_TOKEN_SECRET),
        ("get", "a", AGENT_TOKEN_SECRET),
        ("get", "b", AGENT_TOKEN_SECRET),
        ("create", "b", AGENT_TOKEN_SECRET),
    ]
    tokens = [s["stringData"]["token"] for s in api.created]
    assert len(set(tokens)) == 2 and all(len(t) >= 40 for t in tokens)
    # Deleted under the running hub: the next holder's start makes it again.
    api.existing.discard(("a", AGENT_TOKEN_SECRET))
    asyncio.run(agenttoken.ensure(api, "a", AGENT_TOKEN_SECRET))
    assert api.calls[-1] == ("create", "a", AGENT_TOKEN_SECRET)
    # One that exists (the chart's) is used as it is; one made meanwhile (409) too.
    kept = SecretsAPI(frozenset({("c", "mine")}))
    asyncio.run(agenttoken.ensure(kept, "c", "mine"))
    assert kept.calls == [("get", "c", "mine")]
    raced = SecretsAPI(conflict=True)
    asyncio.run(agenttoken.ensure(raced, "d", "mine"))
    assert raced.calls[-1] == ("create", "d", "mine")


def test_the_secret_is_the_agents_not_a_sessions() -> None:
    s = build_agent_token_secret("t", "ns", "x")
    assert s["metadata"]["labels"]["app.kubernetes.io/component"] == "agent-token"
    assert "ownerReferences" not in s["metadata"], "it outlives every session"


def test_the_culler_reads_the_token_per_namespace_and_again_after_a_refusal() -> None:
    reads: list[tuple[str, str]] = []
    values = {"a": "token-a", "b": None}

    async def read(namespace: str, name: str) -> str | None:
        reads.append((namespace, name))
        return values[namespace]

    tokens = AgentTokens(None, "s", read, ttl=100, missing_ttl=10)

    async def run() -> list[str | None]:
        out = [await tokens.get("a", now=0), await tokens.get("a", now=50), await tokens.get("b", now=0)]
        tokens.refused("a")
        values["a"] = "token-a2"
        out += [await tokens.get("a", now=51), await tokens.get("b", now=5), await tokens.get("b", now=11)]
        return out

    assert asyncio.run(run()) == ["token-a", "token-a", None, "token-a2", None, None]
    assert reads == [("a", "s"), ("b", "s"), ("a", "s"), ("b", "s")]
    fixed = AgentTokens("given", "s", read)
    assert asyncio.run(fixed.get("a")) == "given" and len(reads) == 4, "a given token reads nothing"
