"""Errors, log records and Sentry events never carry a secret (#67): a malformed DSN's error, the
handlers' filter and Sentry's scrubber (pgshovel2.cli.logconfig) over real logging and the real
Sentry client (a capturing transport: nothing leaves the process)."""

import json
import logging

import pytest

from pgshovel2 import db
from pgshovel2.bootstrap.manifest import BootstrapError
from pgshovel2.errors import CaptureError

SECRET = "hunter2x"


def test_a_malformed_dsn_shows_no_part_of_its_password():
    # libpq's own error quotes the word after the space: 'missing "=" after "pieces"'
    malformed = f"host=127.0.0.1 port=1 password={SECRET} pieces dbname=x"
    with pytest.raises(CaptureError) as err:
        db.connect(malformed, "set 'x'")
    assert SECRET not in str(err.value) and "pieces" not in str(err.value)
    assert "malformed DSN of set 'x'" in str(err.value)
    with pytest.raises(BootstrapError) as err:
        db.libpq_dsn(malformed, "set 'x'", BootstrapError)  # what the bootstrap's JDBC source reads first
    assert SECRET not in str(err.value) and "pieces" not in str(err.value)


def test_log_records_are_redacted(caplog):
    from pgshovel2.cli.common import setup_logging

    setup_logging("INFO")
    log = logging.getLogger("pgshovel2.test")
    with caplog.at_level(logging.INFO):
        log.info("connecting to %s", f"host=h password={SECRET}")
        try:
            raise RuntimeError(f"boom with https://u:{SECRET}@h/")
        except RuntimeError:
            log.exception("failed")
    assert "connecting to host=h password=***" in caplog.text
    assert SECRET not in caplog.text
    assert SECRET not in "".join(str(r.exc_text) for r in caplog.records)


def _capture_transport(options: dict):
    """A Sentry transport (the SDK's own base class) keeping the events it is given: nothing leaves
    the process."""
    from sentry_sdk.transport import Transport

    class Capture(Transport):
        def __init__(self):
            super().__init__(options)
            self.events: list[dict] = []

        def capture_envelope(self, envelope) -> None:
            self.events += [item.payload.json for item in envelope.items if item.type == "event"]

    return Capture()


def _fails_with_a_dsn_in_scope():
    dsn = f"host=h dbname=d password={SECRET}"  # a local variable, as in a connect helper
    settings = {"password": SECRET, "registry": f"https://u:{SECRET}@r/"}
    raise CaptureError(f"cannot use {dsn} with {settings['registry']}")


def test_sentry_events_carry_no_secret():
    import sentry_sdk

    from pgshovel2.cli import logconfig

    logconfig.start_sentry("http://publickey@127.0.0.1:9/1")
    capture = _capture_transport(sentry_sdk.get_client().options)
    sentry_sdk.get_client().transport = capture
    try:
        try:
            _fails_with_a_dsn_in_scope()
        except CaptureError as exc:
            logconfig.report(exc)
        logging.getLogger("pgshovel2.test").error("relay failed on host=h password=%s", SECRET)
        sentry_sdk.flush()
    finally:
        sentry_sdk.get_client().close()
        logconfig._sentry = None
    assert capture.events, "no event was captured"
    text = json.dumps(capture.events)
    assert SECRET not in text
    assert "password=***" in text and len(capture.events) == 2
