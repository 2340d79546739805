"""Reading a replication set's topics: source transactions reassembled from
the data topics and ``{prefix}.transactions``, validated against the wire
contract (WIRE.md, docs/wire.rst, docs/consumer.rst).

::

    with ClusterStore(zk, cluster) as store:   # secured: auth=ZooKeeperAuth.build({"auth": ...}, ...)
        reader = SetReader.for_set(store, "accounts", "127.0.0.1:9092", "http://registry:8081")
    with reader:
        for txn in reader.transactions(until_caught_up=True):
            for change in txn.changes:
                print(txn.txid, change.op, change.table, change.key, change.value)
"""

from pgshovel2.codec.jsonvalue import JsonValue
from pgshovel2.consumer.decode import Decoder
from pgshovel2.consumer.errors import ConsumerError, IncompleteTransactionError, OrderError
from pgshovel2.consumer.model import Change, DataMessage, Transaction, TxnRecord
from pgshovel2.consumer.reader import SetReader
from pgshovel2.consumer.reassembly import Reassembler
from pgshovel2.consumer.state import RowState
from pgshovel2.consumer.topics import SetTopics, TableTopic

__all__ = ["Change", "ConsumerError", "DataMessage", "Decoder", "IncompleteTransactionError", "JsonValue",
           "OrderError", "Reassembler", "RowState", "SetReader", "SetTopics", "TableTopic", "Transaction", "TxnRecord"]
