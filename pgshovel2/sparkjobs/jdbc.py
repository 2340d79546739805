"""The JDBC URL and properties (pgjdbc) of a libpq connection, for Spark's parallel reads.

Spark's partitions must read the very server, database and role whose connection exported the
snapshot, with the same TLS checks: so the URL is built from that psycopg2 connection as libpq
made it (:func:`jdbc_source`), not from the DSN text. Its effective parameters include what
libpq took from the environment (PGSSLMODE, PGSSLROOTCERT, ...), a service file, the password
file or PGPASSWORD (``conn.info.password``: the password libpq used), and, once resolved, a
password reference of the DSN.

libpq keyword -> pgjdbc property:

- host, port, dbname -> the URL (the host libpq connected to, of a list); user, password
- sslmode -> sslmode (the same six modes); sslrootcert -> sslrootcert, ``system`` -> the
  JVM's default trust store (``sslfactory=org.postgresql.ssl.DefaultJavaSSLFactory``)
- sslcert -> sslcert; sslkey -> sslkey, converted: pgjdbc reads a PKCS#8 DER key (or a PKCS#12
  file), libpq a PEM one, so a PEM key (decrypted with sslpassword when encrypted) is written
  as PKCS#8 DER to a file of this process's own (mode 600, in a private temporary folder
  removed at exit). A Spark cluster's executors need that path too: give them the same
  files (docs/security.rst).
- connect_timeout -> connectTimeout; application_name -> ApplicationName; options -> options
- channel_binding=require -> channelBinding=require

sslcrl, sslcrldir, sslsni, ssl_min_protocol_version and gssencmode have no pgjdbc form: they are
left out, with a log line when set.
"""

import atexit
import logging
import os
import shutil
import tempfile
from pathlib import Path

from pgshovel2.bootstrap.manifest import BootstrapError

log = logging.getLogger(__name__)

_PASSED = {"connect_timeout": "connectTimeout", "application_name": "ApplicationName", "options": "options",
           "sslcert": "sslcert"}
_UNMAPPED = ("sslcrl", "sslcrldir", "ssl_max_protocol_version")
_DER_KEYS: dict[tuple[str, str], str] = {}  # (PEM key path, password) -> the DER copy written by this process


def jdbc_source(conn, sslpassword: str = "") -> tuple[str, dict[str, str]]:
    """(JDBC URL, connection properties) reaching what psycopg2 connection conn reaches, as it does
    (module docstring); sslpassword: the DSN's (libpq does not tell it), for an encrypted sslkey.
    Raises BootstrapError when pgjdbc cannot (a Unix socket, an unreadable key)."""
    info, params = conn.info, conn.get_dsn_parameters()
    host = info.host
    if not host or host.startswith("/"):
        raise BootstrapError(f"the set's database is reached over a Unix socket ({host}), which JDBC cannot use: "
                             "give its DSN a host name or address")
    if ":" in host:
        host = f"[{host}]"
    url = f"jdbc:postgresql://{host}:{info.port}/{info.dbname}"
    props = {"user": info.user}
    if info.password:
        props["password"] = info.password
    props.update({prop: params[key] for key, prop in _PASSED.items() if params.get(key)})
    props.update(_ssl(params, sslpassword))
    if params.get("channel_binding") == "require":
        props["channelBinding"] = "require"
    for key in _UNMAPPED:
        if params.get(key):
            log.warning("the DSN's %s has no JDBC form: Spark's reads go without it", key)
    return url, props


def _ssl(params: dict[str, str], sslpassword: str) -> dict[str, str]:
    """pgjdbc's TLS properties of libpq's effective ones."""
    out = {"sslmode": params.get("sslmode") or "prefer"}
    root = params.get("sslrootcert")
    if root == "system":
        out["sslfactory"] = "org.postgresql.ssl.DefaultJavaSSLFactory"
    elif root:
        out["sslrootcert"] = root
    key = params.get("sslkey")
    if key and params.get("sslcert"):
        out["sslkey"] = der_key(key, sslpassword)
    return out


def der_key(path: str, password: str = "") -> str:
    """The path of a PKCS#8 DER form of the PEM private key at path (decrypted with password when
    it is encrypted), written once per process; path itself when it is not PEM (DER, PKCS#12).
    Raises BootstrapError naming the file when it cannot be read or decrypted (never the password)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BootstrapError(f"cannot read the DSN's sslkey {path}: {exc.strerror}") from exc
    if b"-----BEGIN" not in data:
        return path
    done = _DER_KEYS.get((path, password))
    if done is not None and os.path.exists(done):
        return done
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415  (Spark jobs only)

    try:
        key = serialization.load_pem_private_key(data, password.encode() or None)
    except (ValueError, TypeError) as exc:
        raise BootstrapError(f"cannot read the private key {path} (sslkey) for JDBC: {exc} (an encrypted key "
                             "needs the DSN's sslpassword)") from None
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    folder = tempfile.mkdtemp(prefix="pgshovel2-jdbc-")  # mode 700
    atexit.register(shutil.rmtree, folder, True)
    out = os.path.join(folder, "client.pk8")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(der)
    _DER_KEYS[(path, password)] = out
    return out
