"""The relay's metrics endpoint with TLS and basic auth (pgshovel2.relay.monitor.metrics.serve, issue #67
item 8): it answers only with the credentials, and only over TLS when given a certificate."""

import http.client
import ssl
import subprocess
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path

import pytest

from pgshovel2.relay.monitor import metrics

REPO = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("certs")
    subprocess.run([str(REPO / "scripts" / "secure" / "certs.sh"), str(folder)], check=True, capture_output=True)
    return folder


def get(url: str, ca: Path | None, user_info: str | None) -> int:
    request = urllib.request.Request(url)
    if user_info is not None:
        request.add_header("Authorization", "Basic " + b64encode(user_info.encode()).decode())
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            assert b"pgshovel2_relay_changes_total" in resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        assert exc.headers["WWW-Authenticate"].startswith('Basic realm="pgshovel2 relay metrics"')
        return exc.code


def test_tls_and_basic_auth(certs):
    metrics.CHANGES.labels("auth").inc()
    server = metrics.serve(0, "127.0.0.1", str(certs / "server.pem"), str(certs / "server.key"), "prom:s3cret")
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/metrics"
        assert get(url, certs / "ca.pem", "prom:s3cret") == 200
        for wrong in (None, "prom:wrong", "prom", ""):
            assert get(url, certs / "ca.pem", wrong) == 401
        plain = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.request("GET", "/metrics")
            plain.getresponse()
    finally:
        server.shutdown()
        server.server_close()


def test_basic_auth_without_tls():
    server = metrics.serve(0, "127.0.0.1", credentials="prom:s3cret")
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        assert get(url, None, "prom:s3cret") == 200
        assert get(url, None, None) == 401
    finally:
        server.shutdown()
        server.server_close()
