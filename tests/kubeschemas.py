"""Objects gpusessions builds, checked against the strict OpenAPI schemas of every Kubernetes
version it supports (kubernetes-validate): an object must be valid on each."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

# The supported versions (docs/install.md): the local cluster runs the newest.
VERSIONS = ("1.34.0", "1.35.0", "1.36.0")


def validate(obj: Any) -> None:
    """Raise kubernetes_validate's error for the first version whose strict schema refuses `obj`."""
    for version in VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)
