"""twophase.retry_on_deadlock: an admin command rolled back as a deadlock's victim starts over."""

import pytest

from pgshovel2.errors import CaptureError
from pgshovel2.ops import twophase
from pgshovel2.ops.twophase import DeadlockError


def counting(failures: int, error: Exception):
    calls = []

    @twophase.retry_on_deadlock
    def command(name: str) -> str:
        calls.append(name)
        if len(calls) <= failures:
            raise error
        return f"done {name}"
    return command, calls


def test_a_deadlock_victim_is_run_again_until_it_succeeds(monkeypatch):
    monkeypatch.setattr(twophase.time, "sleep", lambda _: None)
    command, calls = counting(2, DeadlockError("drop set 's': deadlocked"))
    assert command("s") == "done s" and calls == ["s", "s", "s"]


def test_the_last_deadlock_is_raised(monkeypatch):
    monkeypatch.setattr(twophase.time, "sleep", lambda _: None)
    command, calls = counting(5, DeadlockError("drop set 's': deadlocked"))
    with pytest.raises(DeadlockError, match="deadlocked"):
        command("s")
    assert len(calls) == twophase.DEADLOCK_ATTEMPTS


def test_other_errors_are_not_retried():
    command, calls = counting(1, CaptureError("refused"))
    with pytest.raises(CaptureError):
        command("s")
    assert calls == ["s"]
