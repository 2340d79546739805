"""librdkafka's security properties in the form of Kafka's Java client, for Spark's Kafka source
(``kafka.``-prefixed options of spark.read/readStream.format("kafka")). docs/security.rst has
the table; in short:

==================================================  ===================================================
librdkafka (consumer settings, pgshovel2.kafkaconf)  Java client
==================================================  ===================================================
security.protocol                                   security.protocol
sasl.mechanisms (one)                               sasl.mechanism
sasl.username, sasl.password (PLAIN, SCRAM-*)        sasl.jaas.config: PlainLoginModule / ScramLoginModule
enable.sasl.oauthbearer.unsecure.jwt=true,           sasl.jaas.config: OAuthBearerLoginModule with
sasl.oauthbearer.config (OAUTHBEARER)               unsecuredLoginStringClaim_sub=<principal>, ...
ssl.ca.location / ssl.ca.pem                        ssl.truststore.type=PEM, ssl.truststore.location /
                                                    ssl.truststore.certificates
ssl.certificate.location + ssl.key.location         ssl.keystore.type=PEM, ssl.keystore.certificate.chain
(or .pem), ssl.key.password                         and ssl.keystore.key (the files' contents; the key
                                                    must be PKCS#8), ssl.key.password
ssl.keystore.location / .password (PKCS#12)         ssl.keystore.type=PKCS12, same names
ssl.endpoint.identification.algorithm               same (none: empty)
client.id                                           client.id
==================================================  ===================================================

Other librdkafka properties have no meaning for Spark's Java consumers and are not passed; Java
properties go in as ``spark.<name>`` (they win over the translation). Anything that cannot be
translated (OIDC, GSSAPI, turning certificate verification off) is refused naming the property.
"""

import logging
import re

from pgshovel2.kafkaconf import KafkaSettings, KafkaSettingsError, Setting

log = logging.getLogger(__name__)
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
SAME = ("client.id", "ssl.key.password", "ssl.keystore.password", "ssl.endpoint.identification.algorithm",
        "security.protocol")
# consumed by the translation of another property
USED = {"sasl.mechanisms", "sasl.mechanism", "sasl.username", "sasl.password", "sasl.oauthbearer.config",
        "enable.sasl.oauthbearer.unsecure.jwt", "sasl.oauthbearer.method", "enable.ssl.certificate.verification",
        "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.key.location", "ssl.certificate.pem",
        "ssl.key.pem", "ssl.keystore.location", *SAME}
REFUSED = {
    "sasl.kerberos.service.name": "GSSAPI (Kerberos)",
    "enable.ssl.certificate.verification": "turning certificate verification off",
    "sasl.oauthbearer.token.endpoint.url": "OAUTHBEARER with OIDC",
}


def java_properties(kafka: KafkaSettings) -> dict[str, str]:
    """The Java client properties of kafka's consumer settings (module docstring), with its
    ``spark.`` properties over them. Raises KafkaSettingsError naming a property that has no
    Java form, or a file it cannot read (e.g. a key that is not PKCS#8)."""
    props = kafka.properties("consumer")
    out: dict[str, str] = {}
    for name in SAME:
        if name in props:
            out[name] = props[name].value
    if "ssl.endpoint.identification.algorithm" in out and out["ssl.endpoint.identification.algorithm"] == "none":
        out["ssl.endpoint.identification.algorithm"] = ""
    if "security.protocol" in out:
        out["security.protocol"] = out["security.protocol"].upper()
    for name, why in REFUSED.items():
        if name in props and not (name == "enable.ssl.certificate.verification" and props[name].value == "true"):
            raise _refuse(name, props[name], why)
    out.update(_sasl(props))
    out.update(_tls(props))
    left = sorted(set(props) - USED)
    if left:
        log.info("Spark's Kafka source: %s not passed (librdkafka only; give Java client properties as spark.<name>)",
                 ", ".join(left))
    out.update({name: s.value for name, s in kafka.roles.get("spark", {}).items()})
    return out


def _refuse(name: str, setting: Setting, why: str) -> KafkaSettingsError:
    return KafkaSettingsError(f"Kafka property {name} ({setting.origin}): {why} has no translation for Spark's Kafka "
                              "source: give its Java client properties as spark.<name> (docs/security.rst)")


def _sasl(props: dict[str, Setting]) -> dict[str, str]:
    mechanism = props.get("sasl.mechanisms") or props.get("sasl.mechanism")
    if mechanism is None:
        return {}
    mech = mechanism.value.strip().upper()
    if mech in LOGIN_MODULES:
        user, password = props.get("sasl.username"), props.get("sasl.password")
        if user is None or password is None:
            raise KafkaSettingsError(f"Kafka property sasl.mechanisms={mech} ({mechanism.origin}) needs sasl.username "
                                     "and sasl.password")
        jaas = f"{LOGIN_MODULES[mech]} required username={_quote(user.value)} password={_quote(password.value)};"
        return {"sasl.mechanism": mech, "sasl.jaas.config": jaas}
    if mech == "OAUTHBEARER":
        return {"sasl.mechanism": mech, "sasl.jaas.config": _unsecured_jwt(props, mechanism)}
    raise _refuse("sasl.mechanisms", mechanism, f"SASL mechanism {mech}")


def _unsecured_jwt(props: dict[str, Setting], mechanism: Setting) -> str:
    """The JAAS config of librdkafka's unsecured JWT (sasl.oauthbearer.config: principal=...
    [principalClaimName=...] [scope=a,b] [lifeSeconds=N] [extension_K=V])."""
    method = props.get("sasl.oauthbearer.method")
    if method is not None and method.value.lower() != "default":
        raise _refuse("sasl.oauthbearer.method", method, f"OAUTHBEARER method {method.value}")
    unsecure = props.get("enable.sasl.oauthbearer.unsecure.jwt")
    config = props.get("sasl.oauthbearer.config")
    if unsecure is None or unsecure.value.lower() != "true" or config is None:
        raise _refuse("sasl.mechanisms", mechanism, "OAUTHBEARER without enable.sasl.oauthbearer.unsecure.jwt=true "
                      "and sasl.oauthbearer.config (a token callback)")
    fields = dict(part.split("=", 1) for part in config.value.split() if "=" in part)
    if "principal" not in fields:
        raise KafkaSettingsError(f"Kafka property sasl.oauthbearer.config ({config.origin}) has no principal=")
    claim = fields.get("principalClaimName", "sub")
    options = [f"unsecuredLoginStringClaim_{claim}={_quote(fields['principal'])}"]
    if claim != "sub":
        options.append(f"unsecuredLoginPrincipalClaimName={_quote(claim)}")
    if "scope" in fields:
        options.append(f"unsecuredLoginListClaim_scope={_quote(',' + fields['scope'])}")
    if "lifeSeconds" in fields:
        options.append(f"unsecuredLoginLifetimeSeconds={_quote(fields['lifeSeconds'])}")
    options += [f"unsecuredLoginExtension_{k[10:]}={_quote(v)}" for k, v in fields.items()
                if k.startswith("extension_")]
    return f"{OAUTH_MODULE} required {' '.join(options)};"


def _tls(props: dict[str, Setting]) -> dict[str, str]:
    out: dict[str, str] = {}
    if "ssl.ca.location" in props:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": props["ssl.ca.location"].value})
    elif "ssl.ca.pem" in props:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": props["ssl.ca.pem"].value})
    cert = _pem(props, "ssl.certificate.location", "ssl.certificate.pem")
    key = _pem(props, "ssl.key.location", "ssl.key.pem")
    if (cert is None) != (key is None):
        present = "ssl.certificate" if cert is not None else "ssl.key"
        raise KafkaSettingsError(f"Kafka property {present}.location/.pem is set without its pair: a client "
                                 "certificate needs both ssl.certificate.* and ssl.key.*")
    if cert is not None and key is not None:
        if not re.search(r"-----BEGIN (ENCRYPTED )?PRIVATE KEY-----", key[0]):
            raise KafkaSettingsError(f"Kafka property {key[1]}: Java's Kafka client takes PKCS#8 keys only "
                                     "(BEGIN PRIVATE KEY): convert it with openssl pkcs8 -topk8")
        out.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": cert[0],
                    "ssl.keystore.key": key[0]})
    elif "ssl.keystore.location" in props:
        out.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": props["ssl.keystore.location"].value})
    return out


def _pem(props: dict[str, Setting], location: str, inline: str) -> tuple[str, str] | None:
    """(PEM text, "name (origin)") of a file property or its inline form; None when neither is set."""
    if inline in props:
        return props[inline].value, f"{inline} ({props[inline].origin})"
    if location not in props:
        return None
    setting = props[location]
    try:
        with open(setting.value, encoding="ascii") as f:
            return f.read(), f"{location} ({setting.origin})"
    except (OSError, UnicodeDecodeError) as exc:
        raise KafkaSettingsError(f"Kafka property {location} ({setting.origin}): cannot read {setting.value} "
                                 f"({getattr(exc, 'strerror', None) or 'not a PEM file'})") from None


def _quote(value: str) -> str:
    """value as a JAAS option value: double-quoted, with \\ and " escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
