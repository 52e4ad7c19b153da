"""Reading Prometheus text exposition in tests: series by name and labels, in any label order."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample: (name, labels) -> value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of one series (None: no such series)."""
    return samples(text).get((name, frozenset(labels.items())))


def families(text: str) -> list[tuple[str, str, str, list[tuple[str, dict[str, str], float]]]]:
    """Name, type, help and samples of each family, in order: what a scraper reads."""
    return [
        (f.name, f.type, f.documentation, [(s.name, s.labels, s.value) for s in f.samples])
        for f in text_string_to_metric_families(text)
    ]
