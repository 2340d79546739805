"""docker-compose.yml's shape; ``make test-compose`` (scripts/containers/test.sh) builds and runs it."""

import fnmatch
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_stack_services_present():
    assert {"postgres", "pgqd", "zookeeper", "kafka", "registry", "relay"} <= set(COMPOSE["services"])


def test_published_ports_are_loopback_only():
    for name, service in COMPOSE["services"].items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_built_images_have_dockerfiles():
    for service in COMPOSE["services"].values():
        if "build" in service:
            assert (ROOT / service["build"]["dockerfile"]).is_file()


def test_every_image_is_built_here_from_debian_bookworm():
    """No service pulls an image from a registry: each names an image one of docker/*.Dockerfile builds,
    and every stage of every Dockerfile starts from Debian bookworm (the base the users' distribution
    ships security fixes for) or an earlier stage of its own."""
    built = {s["image"] for s in COMPOSE["services"].values() if "build" in s}
    for name, service in COMPOSE["services"].items():
        assert service["image"] in built, f"{name} uses {service['image']}, which no Dockerfile here builds"
    for dockerfile in (ROOT / "docker").glob("*.Dockerfile"):
        stages: set[str] = set()
        for line in dockerfile.read_text().splitlines():
            words = line.split()
            if words[:1] == ["FROM"]:
                assert words[1] in stages | {"debian:bookworm"}, f"{dockerfile.name}: FROM {words[1]}"
                if len(words) == 4 and words[2].upper() == "AS":
                    stages.add(words[3])


def test_relay_command_parses_with_the_real_cli():
    """The relay service's command line is accepted by pgshovel-kafka-relay's own click parser."""
    from pgshovel2.cli.relay import main

    relay = COMPOSE["services"]["relay"]
    args = list(relay["command"])
    ctx = main.make_context("pgshovel-kafka-relay", list(args))  # click consumes its list
    assert ctx.params["set_name"] == args[0]
    for var in relay["environment"]:
        option = var.removeprefix("PGSHOVEL_").lower()
        assert option in ctx.params, f"{var} is not an option of pgshovel-kafka-relay"


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's patterns (Go filepath.Match, with ``**/`` for any depth) leave path, or a
    folder above it, out of the build context."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        for candidate in (pattern, pattern.replace("**/", "")):
            if any(fnmatch.fnmatchcase(p, candidate) for p in prefixes):
                return True
    return False


def test_dockerfiles_copy_only_what_the_build_context_has():
    """Every COPY source of the Dockerfiles exists and is not left out by .dockerignore (a COPY of a
    missing or ignored path fails the image build), and the local state is left out."""
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for dockerfile in (ROOT / "docker").glob("*.Dockerfile"):
        for line in dockerfile.read_text().splitlines():
            words = line.split()
            if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
                continue
            for source in words[1:-1]:
                assert (ROOT / source).exists(), f"{dockerfile.name}: COPY {source}: no such path"
                if source != ".":
                    assert not _ignored(source, patterns), f"{dockerfile.name}: COPY {source} is in .dockerignore"
    for local in (".venv/bin/python", ".stack/pg/PG_VERSION", "native/target/release"):
        assert _ignored(local, patterns), f"{local} is not in .dockerignore"
    assert not _ignored("native/src/lib.rs", patterns), "the native module's sources are in .dockerignore"
