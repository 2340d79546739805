"""The relay's online snapshots where there are none (:class:`NoOnlineSnapshot`): what the loop
asks of :class:`pgshovel2.relay.snapshot.online.OnlineSnapshot`, answered as by a set that never
has a chunk in flight (a relay built without one: the loop's unit tests)."""

from pgshovel2.catalog import Table
from pgshovel2.relay.source import Control
from pgshovel2.setrecord import SetRecord
from pgshovel2.wire import Position


class NoOnlineSnapshot:
    """No online snapshot ever: no chunk, nothing requested, the positions' progress kept."""

    enabled = False
    chunk = None

    def resume(self, progress: dict | None) -> None:
        """Nothing to resume."""

    def progress_of(self, position: Position) -> dict | None:
        """The progress position carries already (a handoff's or a resumed one's)."""
        return position.snapshot

    def request_all(self, tables: tuple[Table, ...]) -> None:
        """None: no online snapshot can be requested."""
        return None

    def request_more(self, table: Table) -> None:
        """None: no online snapshot can be requested."""
        return None

    def step(self, record: SetRecord) -> None:
        """Nothing to step."""

    def control(self, item: Control) -> bool:
        """False: no control event is a watermark of ours."""
        return False

    def close(self) -> None:
        """Nothing to close."""
