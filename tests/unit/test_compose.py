"""docker-compose.yml cannot run here (no Docker engine): check its shape."""

from pathlib import Path

import yaml

COMPOSE = yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text())


def test_stack_services_present():
    assert {"postgres", "pgqd", "zookeeper", "kafka", "registry", "relay"} <= set(COMPOSE["services"])


def test_published_ports_are_loopback_only():
    for name, service in COMPOSE["services"].items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_built_images_have_dockerfiles():
    root = Path(__file__).resolve().parents[2]
    for service in COMPOSE["services"].values():
        if "build" in service:
            assert (root / service["build"]["dockerfile"]).is_file()


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
