"""Labels and annotations that mark gpusessions objects and their owner.

Every object carries `app.kubernetes.io/managed-by: gpusessions`, its
component, and the user's and server's names: label-safe slugs (for one label
query per user) plus the exact names in annotations (to tell owners apart when
two names slug alike).
"""

from __future__ import annotations

from kubespawner.slugs import is_valid_label, safe_slug

MANAGED_BY = "app.kubernetes.io/managed-by"
COMPONENT = "app.kubernetes.io/component"
USER_LABEL = "hub.jupyter.org/username"
SERVER_LABEL = "hub.jupyter.org/servername"
USER_ANNOTATION = "gpusessions.io/user"
SERVER_ANNOTATION = "gpusessions.io/server"
REQUEST_HASH = "gpusessions.io/request-hash"
PROFILE_ANNOTATION = "gpusessions.io/profile"
CLAIM_ANNOTATION = "gpusessions.io/claim"
# The session's claim as a label (slugged) on the holder and notebook pods: what the
# kernel gateway's NetworkPolicy selects on.
CLAIM_LABEL = "gpusessions.io/claim"
MANAGER = "gpusessions"
# The notebook pod is KubeSpawner's and keeps every label KubeSpawner sets (its
# `app.kubernetes.io/component` and `managed-by`, and the legacy `component`, are what Zero to
# JupyterHub's NetworkPolicies, PodDisruptionBudget and tools select on): gpusessions marks it
# with a label of its own, and everything of ours that looks for notebook pods selects on it.
NOTEBOOK_COMPONENT = "gpusessions.io/component"
NOTEBOOK = "notebook"
# KAI Scheduler's queue label: on the notebook pod, the holder pod and the claim.
QUEUE_LABEL = "kai.scheduler/queue"
# The notebook pod's session (claim, node, devices) as JSON, read back as /etc/gpusessions/session.json.
SESSION_ANNOTATION = "gpusessions.io/session"
# The label selector of our holder pods (the hub's and the culler's watches).
HOLDERS = f"{MANAGED_BY}={MANAGER},{COMPONENT}=holder"

# The culler's memory of a session, in annotations on its claim (the hub reads and clears them
# when a user answers the culler's warning).
KEEP_UNTIL = "gpusessions.io/keep-until"
# When the user answered a warning with "Keep my GPU" (an admin's exemption has none): while
# someone waits for that size the culler honours a user's keep only `keep_contended` from here.
KEPT_AT = "gpusessions.io/kept-at"
# The warning a user's keep answered (its `warned-at`): while someone waits for that size the
# culler counts `keep_contended` from this warning, not from the click, and a keep whose hold
# ran out under contention counts as that warning given (no new warning, no second keep).
KEEP_FROM = "gpusessions.io/kept-warning-at"
# Written with each warning: seconds a keep of it holds from the warning while someone waits
# for that size (the culler's `keep_contended` of the profile; what the hub tells the user).
KEEP_CONTENDED = "gpusessions.io/keep-contended"
WARNED_AT = "gpusessions.io/warned-at"
# On the claim, from its creation: "true" when the session's holder parks its kernels at its
# termination (the spawner's park_kernels with persist_kernels): a cull of it loses no state,
# and the culler applies its parking rules (culler/policy.py). Absent: the culler's plain rules.
PARKS = "gpusessions.io/parks"
STOPPED_SINCE = "gpusessions.io/stopped-since"
CULL_AT = "gpusessions.io/cull-at"
CULL_REASON = "gpusessions.io/cull-reason"


def label_value(name: str) -> str:
    """A valid label value for any name (KubeSpawner's safe slug: escaped and hashed when needed)."""
    return str(safe_slug(name, is_valid=is_valid_label)) if name else ""


def owner_labels(component: str, username: str, servername: str) -> dict[str, str]:
    return {
        MANAGED_BY: MANAGER,
        COMPONENT: component,
        USER_LABEL: label_value(username),
        SERVER_LABEL: label_value(servername),
    }


def owner_annotations(username: str, servername: str) -> dict[str, str]:
    return {USER_ANNOTATION: username, SERVER_ANNOTATION: servername}


def park_annotations(parks: bool) -> dict[str, str]:
    """The claim's parking mark: what the culler reads to choose its rules for the session."""
    return {PARKS: "true"} if parks else {}


def parks(obj_metadata: dict[str, object]) -> bool:
    """Whether a claim says its session parks (an older claim without the mark does not)."""
    ann = obj_metadata.get("annotations") or {}
    return isinstance(ann, dict) and ann.get(PARKS) == "true"


def owned_by(obj_metadata: dict[str, object], username: str, servername: str) -> bool:
    """True if the object is ours and belongs to exactly this user's server."""
    labels = obj_metadata.get("labels") or {}
    ann = obj_metadata.get("annotations") or {}
    assert isinstance(labels, dict) and isinstance(ann, dict)
    return (
        labels.get(MANAGED_BY) == MANAGER
        and ann.get(USER_ANNOTATION) == username
        and ann.get(SERVER_ANNOTATION, "") == servername
    )
