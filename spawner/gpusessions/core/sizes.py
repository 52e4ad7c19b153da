"""One definition of a GPU size: a structured device match.

A `DeviceMatch` (driver, attributes that must equal a value, capacities that
must be at least a quantity, version attributes that must be at least a
semantic version) produces both the CEL selector the scheduler evaluates and
the Python matcher the availability figures use, so the two agree.

Version attributes (`driverVersion`, `cudaDriverVersion`, `cudaComputeCapability`
of the NVIDIA driver) are semantic versions in CEL: `driverVersion == '580.95.5'`
compares a version with a string, a CEL runtime error on the scheduler, so the
Python matcher never matches it either (`evaluate` says None: an error); compare them with
`.compareTo(semver('580.0.0')) >= 0` (`DeviceMatch.versions_at_least`).

`parse_cel` reads back exactly that form of CEL (and the NVIDIA driver's
DeviceClass selectors, which have it); any other CEL returns None and the
picker shows the availability of that size as unknown. It stays our own, and
narrow, on purpose: what the picker needs back is the structured match (to
merge a profile's selectors with its DeviceClass's, and to count devices),
not a CEL evaluator, and a general CEL library (cel-python) knows none of
Kubernetes' `quantity()`/`semver()`/`compareTo` functions nor DRA's `device`
variable. Reading back only the form we generate means a selector we cannot
read exactly is "unknown", never a guess. Keep it that way: a new kind of
term goes into `DeviceMatch` (both its `cel()` and `evaluate()`) first.

Libraries: versions are parsed by `semver` (python-semver, semver.org 2.0
exactly, as Kubernetes' CEL `semver()` does; `packaging` is PEP 440, which
reads `1.0.0-beta.11` differently). Quantities keep `quantity` below: the
released kubernetes_asyncio (36.1) ships no `utils.quantity`, the synchronous
`kubernetes` client's `parse_quantity` is in a distribution this package does
not otherwise need, and that function also takes what the API server refuses
(`NaN`, `Infinity`, `1_000`, `2K`); ours is the apimachinery grammar, exact
(`Fraction`) and refusing anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from semver import Version

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"

_SUFFIX_RAW: dict[str, int | Fraction] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "": 1,
}
_SUFFIX = {k: Fraction(v) for k, v in _SUFFIX_RAW.items()}
_QUANTITY = re.compile(
    r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(?:[eE]([+-]?[0-9]+))?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)


def quantity(q: str | int) -> Fraction:
    """A Kubernetes resource quantity ('9984Mi', '1.5G', '100m', '7') as an exact number."""
    if isinstance(q, int):
        return Fraction(q)
    m = _QUANTITY.match(str(q).strip())
    if not m:
        raise ValueError(f"not a quantity: {q!r}")
    num = Fraction(m.group(1))
    if m.group(2):
        num *= Fraction(10) ** int(m.group(2))
    return num * _SUFFIX[m.group(3) or ""]


def semver(v: str) -> Version:
    """A semantic version (semver.org 2.0, as the scheduler's CEL `semver()` parses it: strictly,
    no `v` prefix, no missing minor or patch, no leading zeros), ordered by precedence: a
    pre-release comes before its release; build metadata is ignored."""
    try:
        return Version.parse(v)
    except (ValueError, TypeError):
        raise ValueError(f"not a semantic version: {v!r}") from None


def _literal(v: str | int | bool) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class DeviceMatch:
    driver: str = DRIVER
    attributes: tuple[tuple[str, str | int | bool], ...] = ()
    capacity_at_least: tuple[tuple[str, str], ...] = ()
    versions_at_least: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(
        cls,
        attributes: dict[str, Any] | None = None,
        capacity: dict[str, str] | None = None,
        driver: str = DRIVER,
        versions: dict[str, str] | None = None,
    ) -> DeviceMatch:
        attrs = tuple(sorted((str(k), v) for k, v in (attributes or {}).items()))
        for k, v in attrs:
            if not isinstance(v, (str, int, bool)):
                raise ValueError(f"attribute {k} must be a string, number or boolean")
        caps = tuple(sorted((str(k), str(v)) for k, v in (capacity or {}).items()))
        for _, v in caps:
            quantity(v)
        vers = tuple(sorted((str(k), str(v)) for k, v in (versions or {}).items()))
        for _, v in vers:
            semver(v)
        return cls(driver, attrs, caps, vers)

    def cel(self) -> str:
        """The CEL selector: what the scheduler evaluates."""
        parts = [f"device.driver == {_literal(self.driver)}"]
        parts += [
            f"device.attributes[{_literal(self.driver)}].{k} == {_literal(v)}" for k, v in self.attributes
        ]
        parts += [
            f"device.capacity[{_literal(self.driver)}].{k}.compareTo(quantity({_literal(v)})) >= 0"
            for k, v in self.capacity_at_least
        ]
        parts += [
            f"device.attributes[{_literal(self.driver)}].{k}.compareTo(semver({_literal(v)})) >= 0"
            for k, v in self.versions_at_least
        ]
        return " && ".join(parts)

    def matches(self, driver: str, device: Obj) -> bool:
        """The same test in Python, on a device of a ResourceSlice."""
        return self.evaluate(driver, device) is True

    def evaluate(self, driver: str, device: Obj) -> bool | None:
        """What the scheduler's CEL gives on this device: True, False, or None for a CEL runtime
        error (an attribute or capacity the device lacks, a version compared with a string),
        which CEL's `&&` absorbs only when another term is false."""
        if driver != self.driver:
            return False
        error = False
        attrs = device.get("attributes") or {}
        for k, want in self.attributes:
            a = attrs.get(k)
            if a is None or "version" in a:  # no such key; a version == a string: no such overload
                error = True
                continue
            have = a.get("string", a.get("int", a.get("bool")))
            if type(have) is not type(want) or have != want:
                return False
        for k, least in self.versions_at_least:
            a = attrs.get(k) or {}
            try:
                if semver(a["version"]) < semver(least):
                    return False
            except (KeyError, ValueError):  # no such key, or not a version: no compareTo(semver)
                error = True
        caps = device.get("capacity") or {}
        for k, least in self.capacity_at_least:
            c = caps.get(k)
            if c is None:
                error = True
            elif quantity(c["value"]) < quantity(least):
                return False
        return None if error else True

    def merge(self, other: DeviceMatch) -> DeviceMatch | None:
        """Both matches at once (None if they can never hold together)."""
        if self.driver != other.driver:
            return None
        attrs = dict(self.attributes)
        for k, v in other.attributes:
            if k in attrs and attrs[k] != v:
                return None
            attrs[k] = v
        caps = dict(self.capacity_at_least)
        for k, v in other.capacity_at_least:
            caps[k] = max(caps.get(k, v), v, key=quantity)
        vers = dict(self.versions_at_least)
        for k, v in other.versions_at_least:
            vers[k] = max(vers.get(k, v), v, key=semver)
        return DeviceMatch(
            self.driver,
            tuple(sorted(attrs.items())),
            tuple(sorted(caps.items())),
            tuple(sorted(vers.items())),
        )


_STR = r"'((?:[^'\\]|\\.)*)'"
_TERM_DRIVER = re.compile(rf"^device\.driver\s*==\s*{_STR}$")
_TERM_ATTR = re.compile(
    rf"^device\.attributes\[{_STR}\]\.([A-Za-z][A-Za-z0-9_]*)\s*==\s*({_STR}|-?[0-9]+|true|false)$"
)
_TERM_VER = re.compile(
    rf"^device\.attributes\[{_STR}\]\.([A-Za-z][A-Za-z0-9_]*)\.compareTo\(\s*semver\(\s*{_STR}\s*\)\s*\)\s*>=\s*0$"
)
_TERM_CAP = re.compile(
    rf"^device\.capacity\[{_STR}\]\.([A-Za-z][A-Za-z0-9_]*)\.compareTo\(\s*quantity\(\s*{_STR}\s*\)\s*\)\s*>=\s*0$"
)


def _unquote(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


def _value(token: str) -> str | int | bool:
    if token.startswith("'"):
        return _unquote(token[1:-1])
    if token in ("true", "false"):
        return token == "true"
    return int(token)


def parse_cel(expression: str) -> DeviceMatch | None:
    """The structured match a CEL selector of the supported form stands for, else None."""
    expr = expression.strip()
    while expr.startswith("(") and expr.endswith(")") and _balanced(expr[1:-1]):
        expr = expr[1:-1].strip()
    if "||" in expr or "!" in expr.replace("!=", "") or "!=" in expr:
        return None
    driver: str | None = None
    attrs: dict[str, str | int | bool] = {}
    caps: dict[str, str] = {}
    vers: dict[str, str] = {}
    domains: set[str] = set()
    for raw in expr.split("&&"):
        term = raw.strip()
        while term.startswith("(") and term.endswith(")") and _balanced(term[1:-1]):
            term = term[1:-1].strip()
        if m := _TERM_DRIVER.match(term):
            d = _unquote(m.group(1))
            if driver is not None and driver != d:
                return None
            driver = d
        elif m := _TERM_ATTR.match(term):
            domains.add(_unquote(m.group(1)))
            v = _value(m.group(3))
            if m.group(2) in attrs and attrs[m.group(2)] != v:
                return None
            attrs[m.group(2)] = v
        elif m := _TERM_CAP.match(term):
            domains.add(_unquote(m.group(1)))
            try:
                q = _unquote(m.group(3))
                quantity(q)
            except ValueError:
                return None
            caps[m.group(2)] = max(caps.get(m.group(2), q), q, key=quantity)
        elif m := _TERM_VER.match(term):
            domains.add(_unquote(m.group(1)))
            v = _unquote(m.group(3))
            try:
                semver(v)
            except ValueError:
                return None
            vers[m.group(2)] = max(vers.get(m.group(2), v), v, key=semver)
        else:
            return None
    if len(domains) > 1:
        return None
    domain = next(iter(domains), None)
    if driver is None:
        driver = domain or DRIVER
    if domain is not None and domain != driver:
        return None
    return DeviceMatch(
        driver, tuple(sorted(attrs.items())), tuple(sorted(caps.items())), tuple(sorted(vers.items()))
    )


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


# A MIG profile's name, `<N>g.<M>gb`: N of the GPU's 7 compute slices and about M GB of memory.
MIG_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb$")


def mig_slices(device: Obj | None) -> int | None:
    """The compute slices (of 7) of a MIG device, from its `profile` attribute; None for a
    whole GPU (or a device that says no profile)."""
    profile = (((device or {}).get("attributes") or {}).get("profile") or {}).get("string", "")
    m = MIG_PROFILE.match(profile)
    return int(m.group(1)) if m else None


def device_class(name: str, match: DeviceMatch, labels: dict[str, str] | None = None) -> Obj:
    """A DeviceClass manifest for one GPU size."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "gpusessions", **(labels or {})},
        },
        "spec": {"selectors": [{"cel": {"expression": match.cel()}}]},
    }


def size_selectors(size: dict[str, Any] | None) -> tuple[str, ...]:
    """The CEL selector of a `gpu_size` setting (empty for no size)."""
    if not size:
        return ()
    unknown = set(size) - {"attributes", "capacity", "driver", "versions"}
    if unknown:
        raise ValueError(f"gpu_size accepts attributes, capacity, versions and driver, not {sorted(unknown)}")
    match = DeviceMatch.of(
        size.get("attributes"), size.get("capacity"), size.get("driver", DRIVER), size.get("versions")
    )
    return (match.cel(),)
