"""pgshovel2.cli.allocator: when the relay re-executes itself under jemalloc, and with what."""

import click
import pytest

from pgshovel2.cli.allocator import JEMALLOC_CONF, describe, exec_env

LIB = "libjemalloc.so.2"


def env_for(mode: str, env: dict, found: str | None = LIB, current: str = "system") -> dict | None:
    return exec_env(mode, env, lambda: found, lambda: current)


@pytest.mark.parametrize("mode", ["auto", "jemalloc"])
def test_preloads_jemalloc_with_the_relays_settings(mode):
    env = env_for(mode, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "LD_PRELOAD": LIB, "MALLOC_CONF": JEMALLOC_CONF}


def test_the_operators_malloc_conf_wins():
    assert env_for("auto", {"MALLOC_CONF": "narenas:4"})["MALLOC_CONF"] == "narenas:4"


@pytest.mark.parametrize("mode", ["auto", "jemalloc", "system"])
def test_runs_on_when_jemalloc_is_already_loaded(mode):
    assert env_for(mode, {"LD_PRELOAD": LIB}, current="jemalloc") is None


def test_system_never_re_executes():
    assert env_for("system", {}) is None


def test_auto_leaves_another_preload_alone_and_jemalloc_joins_it():
    assert env_for("auto", {"LD_PRELOAD": "libfoo.so"}) is None
    assert env_for("jemalloc", {"LD_PRELOAD": "libfoo.so"})["LD_PRELOAD"] == f"{LIB} libfoo.so"


def test_without_the_library_auto_runs_on_and_jemalloc_is_an_error():
    assert env_for("auto", {}, found=None) is None
    with pytest.raises(click.UsageError, match="not installed"):
        env_for("jemalloc", {}, found=None)


def test_a_preload_the_linker_refused_is_not_retried():
    """LD_PRELOAD names jemalloc yet it is not mapped: re-executing again would loop forever."""
    assert env_for("auto", {"LD_PRELOAD": LIB}) is None
    with pytest.raises(click.UsageError, match="did not load"):
        env_for("jemalloc", {"LD_PRELOAD": LIB})


def test_describe_says_why_not_jemalloc():
    assert describe("auto", {}, lambda: "jemalloc") == "jemalloc"
    assert describe("system", {}, lambda: "system") == "system (--allocator system)"
    assert "LD_PRELOAD='libfoo.so'" in describe("auto", {"LD_PRELOAD": "libfoo.so"}, lambda: "system")
    assert "apt install libjemalloc2" in describe("auto", {}, lambda: "system")


def test_the_relay_refuses_to_start_without_the_jemalloc_it_was_told_to_use(monkeypatch):
    from click.testing import CliRunner

    from pgshovel2.cli import allocator, relay

    monkeypatch.setattr(allocator, "find_jemalloc", lambda: None)
    monkeypatch.setattr(allocator, "running", lambda: "system")
    got = CliRunner().invoke(relay.main, ["someset", "--allocator", "jemalloc"], obj=relay.EXEC_ALLOCATOR, env={})
    assert got.exit_code == 2, got.output
    assert "--allocator jemalloc: the jemalloc library is not installed (Debian and Ubuntu: apt install" in got.output
