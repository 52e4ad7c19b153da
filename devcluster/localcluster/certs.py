"""Generated certificates and keys for the local control plane.

One CA signs the apiserver's serving certificate and client certificates (the
admin user and any identity a test asks for). The service-account key pair signs
service-account tokens. All of it lives under the cluster's cache folder.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class PKI:
    """Paths of the files a cluster needs."""

    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def server_crt(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def server_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_crt(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def kubelet_client_crt(self) -> Path:
        """The apiserver's client certificate towards kubelets (pods/log, exec, ...)."""
        return self.dir / "apiserver-kubelet-client.crt"

    @property
    def kubelet_client_key(self) -> Path:
        return self.dir / "apiserver-kubelet-client.key"

    @property
    def kubelet_crt(self) -> Path:
        """The simulated nodes' kubelet serving certificate (their addresses), made by the runtime."""
        return self.dir / "kubelet.crt"

    @property
    def kubelet_key(self) -> Path:
        return self.dir / "kubelet.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name(attrs)


def _load_ca(pki: PKI) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(pki.ca_crt.read_bytes())
    key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def _sign(
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    *,
    server_names: tuple[str, ...] = (),
    server_ips: tuple[str, ...] = (),
    client: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca[0].subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [ExtendedKeyUsageOID.SERVER_AUTH]
    builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in server_ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca[1], hashes.SHA256())


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def ensure_pki(directory: Path) -> PKI:
    """Create the CA, serving cert, admin client cert and SA keys once; reuse them later."""
    pki = PKI(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not (pki.ca_crt.exists() and pki.ca_key.exists()):
        ca_key = _new_key()
        _write_key(ca_key, pki.ca_key)
        _write_cert(_sign_self(_name("gpusessions-devcluster-ca"), ca_key), pki.ca_crt)
    ca = _load_ca(pki)
    if not (pki.server_crt.exists() and pki.server_key.exists()):
        key = _new_key()
        cert = _sign(
            _name("kube-apiserver"),
            key.public_key(),
            ca,
            server_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            server_ips=("127.0.0.1",),
        )
        _write_key(key, pki.server_key)
        _write_cert(cert, pki.server_crt)
    if not (pki.admin_crt.exists() and pki.admin_key.exists()):
        issue_client_cert(pki, "devcluster-admin", ("system:masters",), pki.admin_crt, pki.admin_key)
    if not (pki.kubelet_client_crt.exists() and pki.kubelet_client_key.exists()):
        # As kubeadm's apiserver-kubelet-client: the kubelets authorize it (system:masters).
        issue_client_cert(
            pki,
            "kube-apiserver-kubelet-client",
            ("system:masters",),
            pki.kubelet_client_crt,
            pki.kubelet_client_key,
        )
    if not (pki.sa_key.exists() and pki.sa_pub.exists()):
        key = _new_key()
        _write_key(key, pki.sa_key)
        pki.sa_pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return pki


def _sign_self(subject: x509.Name, key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )


def issue_client_cert(pki: PKI, user: str, groups: tuple[str, ...], crt_path: Path, key_path: Path) -> None:
    """Write a client certificate for `user` in `groups`, signed by the cluster CA.

    Tests use it to act as any identity (for example a hub service account) and
    prove what RBAC allows.
    """
    ca = _load_ca(pki)
    key = _new_key()
    cert = _sign(_name(user, groups), key.public_key(), ca, client=True)
    crt_path.parent.mkdir(parents=True, exist_ok=True)
    _write_key(key, key_path)
    _write_cert(cert, crt_path)


def issue_serving_cert(
    pki: PKI, name: str, names: tuple[str, ...], ips: tuple[str, ...], crt_path: Path, key_path: Path
) -> None:
    """A serving certificate for `names` and `ips`, signed by the cluster CA (the kubelets')."""
    ca = _load_ca(pki)
    key = _new_key()
    cert = _sign(_name(name), key.public_key(), ca, server_names=names, server_ips=ips)
    _write_key(key, key_path)
    _write_cert(cert, crt_path)
