"""The small pure pieces every part shares (core/): RFC 3339 times, owner references, scopes."""

from __future__ import annotations

import datetime

import pytest

from gpusessions.core import jobdefs as D
from gpusessions.core import jobs as J
from gpusessions.core import kernels as K
from gpusessions.core import owners, scopes
from gpusessions.core.timestamps import epoch, rfc3339

T = 1796119200.0  # 2026-12-01T10:00:00Z


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-01T10:00:00Z",  # Kubernetes
        "2026-12-01T10:00:00.000000Z",  # Kubernetes MicroTime, JupyterHub's REST API
        "2026-12-01T10:00:00.000000000Z",  # more digits than Python keeps
        "2026-12-01T11:00:00+01:00",
        "2026-12-01T10:00:00",  # no zone: UTC
        datetime.datetime(2026, 12, 1, 10, 0, tzinfo=datetime.UTC),  # the Kubernetes client
        datetime.datetime(2026, 12, 1, 10, 0),  # JupyterHub's database: naive UTC
    ],
)
def test_epoch_reads_every_way_a_time_reaches_us(value: object) -> None:
    assert epoch(value) == T


@pytest.mark.parametrize("value", [None, "", "yesterday", "2026-13-01T00:00:00Z", 0, [], {}])
def test_epoch_of_nothing_or_garbage_is_none(value: object) -> None:
    assert epoch(value) is None


def test_rfc3339_writes_what_epoch_reads() -> None:
    assert rfc3339(T) == "2026-12-01T10:00:00Z"
    assert rfc3339(T + 0.7) == "2026-12-01T10:00:00Z"  # to the second
    assert rfc3339(None) is None
    assert epoch(rfc3339(T)) == T


OWNER = {"metadata": {"name": "o", "uid": "u-1", "namespace": "ns"}}


def test_owner_reference_writes_only_what_it_is_given() -> None:
    assert owners.owner_reference(OWNER, "v1", "Thing") == {
        "apiVersion": "v1",
        "kind": "Thing",
        "name": "o",
        "uid": "u-1",
    }
    ref = owners.owner_reference(OWNER, "batch/v1", "Job", block_owner_deletion=False, controller=True)
    assert ref["blockOwnerDeletion"] is False and ref["controller"] is True


def test_the_three_owner_references_are_as_they_were() -> None:
    assert K.owner_reference(OWNER) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "name": "o",
        "uid": "u-1",
    }
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "o", "uid": "u-1", "blockOwnerDeletion": False}
    assert J.owner_reference(OWNER) == job
    assert D.owner_reference(OWNER) == {**job, "kind": "CronJob"}
    assert D.owner_reference(OWNER, controller=True) == {**job, "kind": "CronJob", "controller": True}


def test_owned_by_and_owner_name_read_both_spellings() -> None:
    ref = owners.owner_reference(OWNER, "batch/v1", "Job")
    assert owners.owned_by({"ownerReferences": [ref]}, OWNER)
    assert owners.owned_by({"owner_references": [ref]}, OWNER)  # the Python client's
    assert not owners.owned_by({"ownerReferences": [ref]}, {"metadata": {"uid": "other"}})
    assert not owners.owned_by({}, OWNER)
    assert owners.owner_name({"ownerReferences": [ref]}, "Job") == "o"
    assert owners.owner_name({"ownerReferences": [ref]}, "CronJob") is None


def test_scopes_on_a_user_or_one_server() -> None:
    assert scopes.on_user_or_server("servers", "ann", None) == ["servers!user=ann"]
    assert scopes.on_user_or_server("read:servers", "ann", "") == [
        "read:servers!user=ann",
        "read:servers!server=ann/",
    ]
    assert scopes.SERVERS in scopes.CULLER and scopes.READ_SERVERS in scopes.CULLER
    assert all(s.endswith(("!server", "!user")) for s in scopes.SERVER_TOKEN)
