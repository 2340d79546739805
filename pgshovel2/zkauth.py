"""How every pgshovel2 process authenticates to ZooKeeper, over what, and the ACL of its znodes.

Settings (command-line options, ``PGSHOVEL_ZOOKEEPER_*`` variables or a YAML file, pgshovel2.cli.common)::

    auth: none | sasl:USER:REF | digest:USER:REF
          sasl: SASL DIGEST-MD5 (the server's JAAS file knows USER); ACL id ``sasl:USER``
          digest: ZooKeeper's digest scheme (addauth; no server setup); ACL id
                  ``digest:USER:<base64 SHA-1 of USER:PASSWORD>``
          REF: the password as a reference, env:VAR or file:PATH (pgshovel2.secretref)
    tls: true            connect with TLS (ZooKeeper's secureClientPort)
    ca: PATH             CA certificates (PEM) the server's certificate must chain to
    cert: PATH           client certificate (PEM), for servers that want one (mutual TLS)
    key: PATH            its private key (PEM); key_password: REF when it is encrypted
    acl: [scheme:id:perms, ...]   more ACL entries (perms: letters of cdrwa), e.g. a
                         second principal (sasl:relay:cdrwa) or a TLS client (x509:CN=...:cdrwa)

Every znode pgshovel2 creates gets the ACL of :meth:`ZooKeeperAuth.acl`: the authenticated
principal with all rights plus the extra entries, nothing for ``world``. Without any, znodes
are created as before (``world:anyone:cdrwa``). Passwords are resolved when the client is made,
in the process that makes it; they are never stored or printed.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kazoo.security import ACL, Id, make_acl, make_digest_acl

from pgshovel2 import secretref
from pgshovel2.errors import ConfigError

MECHANISMS = ("none", "sasl", "digest")
PERMS = {"c": "create", "d": "delete", "r": "read", "w": "write", "a": "admin"}
FILE_KEYS = ("auth", "tls", "ca", "cert", "key", "key_password", "acl")


@dataclass(frozen=True)
class ZooKeeperAuth:
    """ZooKeeper client security. mechanism: ``none``, ``sasl`` or ``digest``; password and
    key_password are references (env:VAR / file:PATH), never secrets; acl: extra ACL entries
    (``scheme:id:perms``)."""

    mechanism: str = "none"
    user: str | None = None
    password: str | None = None
    tls: bool = False
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    key_password: str | None = None
    acl_entries: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def build(cls, settings: dict[str, Any], source: str) -> "ZooKeeperAuth":
        """From settings (FILE_KEYS; absent or None: the default), checked; source names where they
        came from in errors. Raises ConfigError (unknown mechanism, a password that is not a
        reference, a bad ACL entry, a key without its certificate); nothing is resolved yet."""
        auth = settings.get("auth") or "none"
        mechanism, user, password = _parse_auth(auth, source)
        acl = settings.get("acl") or ()
        entries = tuple(e.strip() for e in (acl.split(";") if isinstance(acl, str) else acl) if e and e.strip())
        for entry in entries:
            _acl_entry(entry, source)
        key_password = settings.get("key_password")
        if key_password and not secretref.is_reference(key_password):
            raise ConfigError(source, "zookeeper key password", "(not shown)",
                              f"must be a reference ({secretref.FORMS}), not the password itself")
        cert, key = settings.get("cert"), settings.get("key")
        if bool(cert) != bool(key):
            raise ConfigError(source, "zookeeper client certificate", cert or key,
                              "give both the certificate and its key")
        tls = bool(settings.get("tls")) or bool(settings.get("ca") or cert)
        return cls(mechanism, user, password, tls, settings.get("ca"), cert, key, key_password, entries)

    @classmethod
    def load(cls, path: str, overrides: dict[str, Any], source: str = "ZooKeeper settings") -> "ZooKeeperAuth":
        """Settings of the YAML file at path (a mapping of FILE_KEYS; None: no file) with overrides
        (options and variables given) on top. Raises ConfigError naming the file."""
        settings: dict[str, Any] = {}
        if path:
            try:
                data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise ConfigError(path, "file", path, f"cannot read it as YAML: {exc}") from exc
            if not isinstance(data, dict) or set(data) - set(FILE_KEYS):
                raise ConfigError(path, "(document)", sorted(data) if isinstance(data, dict) else data,
                                  f"must be a mapping of {', '.join(FILE_KEYS)}")
            settings, source = data, path
        settings = {**settings, **{k: v for k, v in overrides.items() if v is not None}}
        return cls.build(settings, source)

    @property
    def secured(self) -> bool:
        """True when znodes get an ACL (an authenticated principal or extra entries)."""
        return self.mechanism != "none" or bool(self.acl_entries)

    def describe(self) -> str:
        """``SASL DIGEST-MD5 as 'admin' over TLS`` and the like, for messages (no secret)."""
        how = {"none": "no authentication", "sasl": f"SASL DIGEST-MD5 as {self.user!r}",
               "digest": f"digest authentication as {self.user!r}"}[self.mechanism]
        return how + (" over TLS" if self.tls else "")

    def client_options(self) -> dict[str, Any]:
        """KazooClient keyword arguments (sasl_options, auth_data, TLS files, default_acl), with the
        passwords read now. Raises SecretReferenceError when a reference does not resolve."""
        out: dict[str, Any] = {}
        password = secretref.required(self.password, "--zookeeper-auth") if self.mechanism != "none" else None
        if self.mechanism == "sasl":
            out["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": self.user, "password": password}
        elif self.mechanism == "digest":
            out["auth_data"] = [("digest", f"{self.user}:{password}")]
        if self.tls:
            out.update(use_ssl=True, verify_certs=True, check_hostname=True, ca=self.ca, certfile=self.cert,
                       keyfile=self.key)
            if self.key_password:
                out["keyfile_password"] = secretref.required(self.key_password, "--zookeeper-key-password")
        acl = self.acl(password)
        if acl:
            out["default_acl"] = acl
        return out

    def acl(self, password: str | None = None) -> list[ACL]:
        """The ACL of every znode pgshovel2 creates ([]: ZooKeeper's open default). password: the
        resolved one (digest ids are made from it; resolved here when not given)."""
        out = []
        if self.mechanism == "sasl":
            out.append(make_acl("sasl", self.user, all=True))
        elif self.mechanism == "digest":
            password = password or secretref.required(self.password, "--zookeeper-auth")
            out.append(make_digest_acl(self.user, password, all=True))
        return out + [_acl_entry(e, "--zookeeper-acl") for e in self.acl_entries]


def _parse_auth(value: str, source: str) -> tuple[str, str | None, str | None]:
    if value == "none":
        return "none", None, None
    mechanism, _, rest = value.partition(":")
    user, _, password = rest.partition(":")
    if mechanism not in MECHANISMS[1:] or not user or not password:
        shown = f"{mechanism}:{user}:(not shown)" if password else value
        raise ConfigError(source, "zookeeper auth", shown, "must be none, sasl:USER:REF or digest:USER:REF "
                          f"(REF: the password as {secretref.FORMS})")
    if not secretref.is_reference(password):
        raise ConfigError(source, "zookeeper auth", f"{mechanism}:{user}:(not shown)",
                          f"the password must be a reference ({secretref.FORMS}), not the password itself: "
                          "it would show in ps and in shell histories")
    return mechanism, user, password


def _acl_entry(entry: str, source: str) -> ACL:
    """ACL of ``scheme:id:perms`` (the id may hold colons: digest ids do)."""
    scheme, _, rest = entry.partition(":")
    ident, _, perms = rest.rpartition(":")
    if not scheme or not ident or not perms or set(perms) - set(PERMS):
        raise ConfigError(source, "zookeeper acl", entry, "must be scheme:id:perms, perms letters of cdrwa "
                          "(e.g. sasl:relay:cdrwa)")
    if scheme == "world":
        raise ConfigError(source, "zookeeper acl", entry, "world entries would open the znodes to anyone")
    return make_acl(scheme, ident, **{PERMS[p]: True for p in perms})


def acl_text(acl: ACL | Any) -> str:
    """``scheme:id:perms`` of a kazoo ACL (perms as cdrwa letters)."""
    bits = {"r": 1, "w": 2, "c": 4, "d": 8, "a": 16}
    perms = "".join(p for p in "cdrwa" if acl.perms & bits[p])
    ident: Id = acl.id
    return f"{ident.scheme}:{ident.id}:{perms}"
