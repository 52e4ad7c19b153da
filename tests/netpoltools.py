"""NetworkPolicies evaluated (what a pod may reach), and Zero to JupyterHub 4.4's singleuser
policy as its chart renders it (jupyterhub/templates/singleuser/netpol.yaml with the
egressAllowRules of _helpers-netpol.tpl; values.yaml's defaults), to compare ours with.

The local cluster does not enforce NetworkPolicy: the tests compare the objects."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
PRIVATE = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
METADATA_IP = "169.254.169.254"
# z2jh 4.4 values.yaml: singleuser.networkPolicy.egressAllowRules
Z2JH_ALLOW = {
    "cloudMetadataServer": False,
    "dnsPortsCloudMetadataServer": True,
    "dnsPortsKubeSystemNamespace": True,
    "dnsPortsPrivateIPs": True,
    "nonPrivateIPs": True,
    "privateIPs": False,
}


def z2jh_singleuser_egress(
    release: str = "jhub", allow: Obj | None = None, extra: list[Obj] | None = None, ip: str = METADATA_IP
) -> list[Obj]:
    """The egress rules z2jh 4.4 gives notebook pods: its hub, proxy and autohttps pods, then
    the rules of egressAllowRules, then singleuser.networkPolicy.egress."""
    allow = {**Z2JH_ALLOW, **(allow or {})}

    def z2jh_pods(component: str) -> Obj:
        return {
            "podSelector": {"matchLabels": {"app": "jupyterhub", "release": release, "component": component}}
        }

    private = [{"ipBlock": {"cidr": c}} for c in PRIVATE]
    rules: list[Obj] = [
        {"to": [z2jh_pods("hub")], "ports": [{"port": 8081}]},
        {"to": [z2jh_pods("proxy")], "ports": [{"port": 8000}]},
        {"to": [z2jh_pods("autohttps")], "ports": [{"port": 8080}, {"port": 8443}]},
    ]
    dns = []
    if allow["dnsPortsCloudMetadataServer"]:
        dns.append({"ipBlock": {"cidr": f"{ip}/32"}})
    if allow["dnsPortsKubeSystemNamespace"]:
        dns.append({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}})
    if allow["dnsPortsPrivateIPs"]:
        dns += private
    if dns:
        rules.append({"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}], "to": dns})
    if allow["nonPrivateIPs"]:
        rules.append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [*PRIVATE, f"{ip}/32"]}}]})
    if allow["privateIPs"]:
        rules.append({"to": private})
    if allow["cloudMetadataServer"]:
        rules.append({"to": [{"ipBlock": {"cidr": f"{ip}/32"}}]})
    return rules + list(extra or [])


@dataclass(frozen=True)
class Dest:
    """Somewhere a pod may try to connect to: an address, or a pod (its labels, namespace)."""

    ip: str
    port: int
    protocol: str = "TCP"
    labels: Obj = field(default_factory=dict)  # a pod's; empty: not a pod
    namespace: str = "jhub"
    namespace_labels: Obj = field(default_factory=dict)

    def __str__(self) -> str:
        who = f" pod {self.labels}" if self.labels else ""
        return f"{self.ip}:{self.port}/{self.protocol}{who} in {self.namespace}"


def _selects(selector: Obj | None, labels: Obj) -> bool:
    """matchLabels only (what these policies use); an empty selector selects everything."""
    if selector is None:
        return True
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_matches(peer: Obj, dest: Dest, namespace: str) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        addr = ipaddress.ip_address(dest.ip)
        return addr in ipaddress.ip_network(block["cidr"]) and not any(
            addr in ipaddress.ip_network(e) for e in block.get("except") or []
        )
    if not dest.labels:
        return False  # a pod or namespace selector matches pods only
    ns = peer.get("namespaceSelector")
    if ns is None and dest.namespace != namespace:
        return False
    if ns is not None and not _selects(
        ns, {"kubernetes.io/metadata.name": dest.namespace, **dest.namespace_labels}
    ):
        return False
    return _selects(peer.get("podSelector"), dest.labels)


def _port_matches(ports: list[Obj] | None, dest: Dest) -> bool:
    if not ports:
        return True
    return any(p.get("port") == dest.port and p.get("protocol", "TCP") == dest.protocol for p in ports)


def rule_allows(rule: Obj, dest: Dest, namespace: str, peers_key: str = "to") -> bool:
    peers = rule.get(peers_key)
    return _port_matches(rule.get("ports"), dest) and (
        not peers or any(_peer_matches(p, dest, namespace) for p in peers)
    )


def policies_for(policies: list[Obj], labels: Obj, kind: str) -> list[Obj]:
    """The policies that select a pod with these labels for Ingress or Egress."""
    return [
        p
        for p in policies
        if kind in p["spec"].get("policyTypes", ["Ingress"]) and _selects(p["spec"]["podSelector"], labels)
    ]


def egress_allowed(policies: list[Obj], labels: Obj, dest: Dest, namespace: str = "jhub") -> bool:
    chosen = policies_for(policies, labels, "Egress")
    if not chosen:
        return True  # not isolated for egress: anything goes
    return any(rule_allows(r, dest, namespace) for p in chosen for r in p["spec"].get("egress") or [])


def ingress_allowed(
    policies: list[Obj], labels: Obj, source: Dest, port: int, namespace: str = "jhub"
) -> bool:
    chosen = policies_for(policies, labels, "Ingress")
    if not chosen:
        return True
    probe = Dest(source.ip, port, "TCP", source.labels, source.namespace, source.namespace_labels)
    return any(
        rule_allows(r, probe, namespace, "from") for p in chosen for r in p["spec"].get("ingress") or []
    )


def policy(name: str, selector: Obj, egress: list[Obj], ingress: list[Obj] | None = None) -> Obj:
    """A NetworkPolicy object (for z2jh's, which the tests do not render)."""
    return {
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress or [],
            "egress": egress,
        },
    }
