"""Schema registry access (Confluent protocol): register schemas, with retries.

The relay never writes a message without a schema id: while the registry is
unreachable, :meth:`SchemaRegistry.register` waits and retries.
"""

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pgshovel2 import registryconf
from pgshovel2.errors import RelayError, SchemaRejectedError, StopRequestedError
from pgshovel2.registryconf import Registry

log = logging.getLogger(__name__)


class SchemaRegistry:
    """url: the registry's settings (pgshovel2.registryconf.RegistrySettings: its Confluent-compatible
    base URL, basic auth, TLS), or its URL completed from this process's PGSHOVEL_SCHEMA_REGISTRY_*
    variables. self.url is the URL without credentials. on_connection(up, error): told after each
    request whether the registry answered (up, error "": a refusal is an answer too) or could not be
    reached (error: why). Raises RegistrySettingsError for settings the client refuses."""

    def __init__(self, url: Registry, retry_seconds: float = 2.0, max_wait: float | None = None,
                 stop: threading.Event | None = None, on_connection: Callable[[bool, str], None] | None = None):
        settings = registryconf.settings(url)
        self.settings, self.url = settings, str(settings)
        # confluent_kafka.schema_registry takes ~0.3 s to import (httpx, authlib): only processes
        # that make a SchemaRegistry pay for it, not every CLI call
        self._client = settings.client()
        self._retry, self._max_wait, self._stop = retry_seconds, max_wait, stop or threading.Event()
        self._connection = on_connection or (lambda up, error: None)

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """Register an Avro schema under subject; returns its schema id.

        Retries while the registry is unreachable (up to max_wait s, forever
        when None). Raises SchemaRejectedError when the registry rejects the schema.
        """
        from confluent_kafka.schema_registry import Schema

        return self._call(lambda: self._client.register_schema(subject, Schema(json.dumps(schema), "AVRO")),
                          f"the schema of {subject!r}")

    def schema(self, schema_id: int) -> dict[str, Any]:
        """The Avro schema registered under schema_id (retried as register; SchemaRejectedError
        for an id the registry does not know)."""
        text = self._call(lambda: self._client.get_schema(schema_id).schema_str, f"schema id {schema_id}")
        return json.loads(text)

    def set_compatibility(self, subject: str, level: str) -> None:
        """Set subject's compatibility level (``NONE`` for one registration an operator accepted
        regardless of compatibility, :mod:`pgshovel2.relay.control`; then BACKWARD again).
        Retries and raises as require_backward."""
        self._call(lambda: self._client.set_compatibility(subject, level), f"compatibility {level} on {subject!r}")
        if level == "NONE":
            self._call(lambda: self._apicurio_rule(subject, level), f"Apicurio's compatibility rule on {subject!r}")

    def _apicurio_rule(self, subject: str, level: str) -> None:
        """On Apicurio Registry (a base URL under ``/apis/ccompat/``), level as the subject's own
        COMPATIBILITY rule through Apicurio's native API: its Confluent API takes ``NONE`` as "no rule
        of the subject", so the global rule (BACKWARD) still applies and refuses the schema an
        operator accepted. The Confluent client's HTTP session is used for its auth and TLS settings.
        Raises SchemaRegistryError on an HTTP error; does nothing on other registries."""
        from urllib.parse import quote

        from confluent_kafka.schema_registry.error import SchemaRegistryError

        rest = self._client._rest_client
        base = rest.base_urls[0]
        if "/apis/ccompat/" not in base:
            return
        rules = (f"{base.split('/apis/ccompat/')[0]}/apis/registry/v2/groups/default/artifacts/"
                 f"{quote(subject, safe='')}/rules")
        body = {"type": "COMPATIBILITY", "config": level}
        response = rest.session.post(rules, json=body)
        if response.status_code == 409:  # the subject has a rule: replace it
            response = rest.session.put(f"{rules}/COMPATIBILITY", json=body)
        if response.status_code >= 300:
            raise SchemaRegistryError(response.status_code, -1, response.text[:300])

    def require_backward(self, subject: str) -> None:
        """Set subject's compatibility level to BACKWARD (a new version must read the data of
        the previous one), so the registry itself checks a schema change before accepting it.

        Retries while the registry is unreachable, as register does. Raises
        SchemaRejectedError when the registry refuses.
        """
        self.set_compatibility(subject, "BACKWARD")

    def _call(self, request: Callable[[], Any], what: str) -> Any:
        """request(), retried while the registry is unreachable; a 4xx is SchemaRejectedError naming what."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        started = time.monotonic()
        while True:
            try:
                answer = request()
                self._connection(True, "")
                return answer
            except SchemaRegistryError as exc:
                if exc.http_status_code and exc.http_status_code < 500:
                    self._connection(True, "")
                if exc.http_status_code in (401, 403):
                    raise RelayError(f"schema registry {self.url} refused {what}: "
                                     f"{registryconf.failure(exc, self.settings)}") from exc
                if exc.http_status_code and 400 <= exc.http_status_code < 500:
                    raise SchemaRejectedError(f"schema registry {self.url} rejected {what}: "
                                              f"{registryconf.failure(exc, self.settings)}") from exc
                error: Exception = exc
            except Exception as exc:  # connection errors come from httpx
                error = exc
            why = registryconf.failure(error, self.settings)
            self._connection(False, f"schema registry {self.url}: {why}")
            if "CERTIFICATE_VERIFY_FAILED" in str(error):  # a wrong CA: retrying does not help
                raise RelayError(f"schema registry {self.url}: {why}")
            if self._max_wait is not None and time.monotonic() - started > self._max_wait:
                raise RelayError(f"schema registry {self.url} unreachable: {why}")
            log.warning("schema registry %s unreachable (%s); retrying in %.0fs", self.url, why, self._retry)
            if self._stop.wait(self._retry):
                raise StopRequestedError(f"stopped while waiting for the schema registry {self.url} ({what})")
