"""The set's slot command by server version, set status's failover wording, and the text form of a
replicate target's handoff (pure parts)."""

from pgshovel2.backends.logical import create_slot_command
from pgshovel2.ops.status import failover_text
from pgshovel2.txids import ConsistentPoint, TxidSnapshot, parse_handoff

PRIMARY17 = {"server_version": 170005, "in_recovery": False, "failover": True, "standby_slots": ["standby1"]}
STANDBY = {"dsn": "host=s", "in_recovery": True, "exists": True, "synced": True, "temporary": False,
           "confirmed_flush_lsn": "0/18F74C8"}


def test_slot_command_is_a_failover_slot_from_17_only():
    assert create_slot_command("s", "pgoutput", True, False, 170005) == \
        'CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput (SNAPSHOT \'export\', FAILOVER)'
    assert create_slot_command("s", "pgoutput", False, False, 180001) == \
        'CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput (SNAPSHOT \'nothing\', FAILOVER)'
    assert create_slot_command("s", "pgshovel2_decoder", True, False, 150019) == \
        'CREATE_REPLICATION_SLOT "s" LOGICAL pgshovel2_decoder EXPORT_SNAPSHOT'
    # a temporary slot (a bootstrap's) cannot fail over: the old form on every version
    assert create_slot_command("b", "pgoutput", True, True, 170005) == \
        'CREATE_REPLICATION_SLOT "b" TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT'


def test_below_17_the_slot_does_not_survive():
    text = failover_text({"server_version": 150019, "in_recovery": False, "failover": None, "standby_slots": [],
                          "standby": None})
    assert text == "the slot will not survive a failover: see docs/runbooks.rst (PostgreSQL 15)"


def test_17_without_failover_flag():
    text = failover_text({**PRIMARY17, "failover": False, "standby": None})
    assert text.startswith("the slot will not survive a failover: it was created without failover")


def test_17_synced_to_the_standby():
    text = failover_text({**PRIMARY17, "standby": STANDBY})
    assert text == ("failover slot; changes wait for standby slot(s) standby1; "
                    "synced to standby host=s (at 0/18F74C8)")


def test_17_standby_states():
    assert "synced to a standby: not checked (give --standby DSN)" in failover_text({**PRIMARY17, "standby": None})
    assert "NOT synced to standby host=s: the slot is not there" in failover_text(
        {**PRIMARY17, "standby": {**STANDBY, "exists": False, "synced": None, "temporary": None}})
    assert "still temporary" in failover_text({**PRIMARY17, "standby": {**STANDBY, "temporary": True}})
    assert "is not a standby" in failover_text({**PRIMARY17, "standby": {**STANDBY, "in_recovery": False}})
    assert "standby does not answer" in failover_text(
        {**PRIMARY17, "standby": {"dsn": "host=s", "error": "standby does not answer: refused"}})


def test_17_without_synchronized_standby_slots_warns():
    text = failover_text({**PRIMARY17, "standby_slots": [], "standby": STANDBY})
    assert "synchronized_standby_slots is not set on the primary" in text


def test_no_slot_yet_and_no_answer():
    assert failover_text({**PRIMARY17, "failover": None, "standby": None}).startswith("no slot yet")
    assert failover_text({"error": "database x does not answer: y"}) == "database x does not answer: y"


def test_parse_handoff_by_form():
    assert parse_handoff("0/18F74C8") == ConsistentPoint.parse("0/18F74C8")
    assert parse_handoff("10:20:12,15") == TxidSnapshot(10, 20, frozenset({12, 15}))
    assert str(parse_handoff("0/18F74C8")) == "0/18F74C8"
