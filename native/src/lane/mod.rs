//! The relay's native lane (`Lane`): a run of one transaction's changes -- our output plugin's
//! change records (sql/decoder/README.rst, record format 3), pgoutput's Insert/Update/Delete
//! messages, or the trigger backend's PgQ event rows -- turned into Kafka messages with their
//! headers, in one call (pgshovel2.relay.lane). For a table of the row envelope it does what
//! RecordDecoder.decode (or PgoutputDecoder.feed), RowEnvelope.change and Emitter._headers do for
//! each record; for one of the debezium envelope, what DebeziumEnvelope.change does through
//! DebeziumEvents, numbering events as the transaction's TxnOrder would. Byte for byte; it stops
//! at the first record it would not handle exactly so (a table it has no writer for, a row its
//! codec leaves to Python, a record with no row or with unchanged values): the caller takes that
//! record the Python way.
//!
//! Here: `Lane` and its calls. `records`: a run record read as a change; `messages`: a change's
//! messages by its table's envelope; `out`: where the messages go (a list, or the native
//! producer); `txns`: `Lane.encode_txns`, whole transactions with their BEGIN and END records.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

mod messages;
mod out;
mod records;
mod txns;

use messages::{debezium_messages, row_messages, Out};
use out::{Direct, Heads, Msg, Target};
use records::Rec;
use crate::debezium::DebeziumEvents;
use crate::digits::position;
use crate::producer::Producer;
use crate::row_codec::RowCodec;

/// bytes of encoded values an encode call holds before it hands them over (a run of large rows
/// is not all in memory at once)
const FLUSH_BYTES: usize = 16 << 20;


/// Lane.encode's txn argument: (txid, ts_ms, ts_us, last_lsn, total_order, per table index
/// data_collection_order).
type TxnArg = (i64, i64, i64, Option<i64>, i64, Vec<i64>);

/// Lane.encode's result: (messages, or the number produced, done, counts, events, tally).
type Encoded = (PyObject, usize, Vec<usize>, Vec<i64>, Tally);

/// Per table index, the changes the lane relayed by op (c, u, d) and their messages' key and value
/// bytes: [creates, updates, deletes, bytes] (the relay's per-table metrics).
pub(crate) type Tally = Vec<[u64; 4]>;

/// How a lane table's messages are written.
enum Writer {
    Row(Py<RowCodec>),
    Debezium(Py<DebeziumEvents>),
}

/// The debezium envelope's per-transaction state for a run: the Context fields a change shares
/// with its transaction, and the event numbering (TxnOrder) as it stands.
struct Txn {
    txid: i64,
    ts_ms: i64,
    ts_us: i64,
    last_lsn: Option<i64>,
    total: i64,
    per: Vec<i64>,
    events: Vec<i64>,
}

/// The lane of a set version: per table index (the plugin's ``tables`` order), its writer and
/// topic, or None where the table takes the Python path.
#[pyclass(frozen)]
pub struct Lane {
    writers: Vec<Option<Writer>>,
    topics: Vec<PyObject>,
    /// per table index, its topic's name ("" where it has no lane)
    topic_names: Vec<String>,
    /// per table index, its topic's name when a transactions-topic record may carry it unescaped
    /// (printable ASCII without quote or backslash); None: such a record is Python's
    plain_topics: Vec<Option<String>>,
    indexes: HashMap<String, usize>,
    /// bytes: the most key and value of one message may take together; a change with a larger
    /// message is left to Python (the set's oversized policy, pgshovel2.relay.oversized)
    limit: usize,
}

#[pymethods]
impl Lane {
    /// writers: per table index, the RowCodec of the row envelope (keyed or not) or, for a keyed
    /// table, the DebeziumEvents of the debezium envelope (None: no lane); topics: per table index, its data
    /// topic (str; anything where writers has None); tags: per table index, the table's tag (the
    /// table of a trigger row); limit: the most bytes of key and value one message may take
    /// (None: no limit), a change with a larger one is left to Python. Raises TypeError for
    /// another writer.
    #[new]
    #[pyo3(signature = (writers, topics, tags, limit=None))]
    fn new(py: Python<'_>, writers: Vec<Option<Bound<'_, PyAny>>>, topics: Vec<PyObject>, tags: Vec<String>,
           limit: Option<usize>) -> PyResult<Self> {
        if writers.len() != topics.len() || writers.len() != tags.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("Lane: writers, topics and tags differ in length"));
        }
        let indexes = tags.into_iter().enumerate().map(|(i, tag)| (tag, i)).collect();
        let writers = writers.into_iter().map(|w| match w {
            None => Ok(None),
            Some(w) => if let Ok(codec) = w.downcast::<RowCodec>() {
                Ok(Some(Writer::Row(codec.clone().unbind())))
            } else {
                Ok(Some(Writer::Debezium(w.downcast::<DebeziumEvents>()?.clone().unbind())))
            },
        }).collect::<PyResult<Vec<_>>>()?;
        let topic_names: Vec<String> = topics.iter().map(|t| t.extract(py).unwrap_or_default()).collect();
        let plain_topics = topic_names.iter().map(|name| {
            let plain = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
            plain.then(|| name.clone())
        }).collect();
        Ok(Lane { writers, topics, topic_names, plain_topics, indexes, limit: limit.unwrap_or(usize::MAX) })
    }

    /// (messages, done, counts, events, tally) for records[start:], a run of one transaction's changes:
    /// change records of our plugin (bytes); pgoutput changes (PgoutputRows of the relation,
    /// table index, the I/U/D message (bytes), its XLogData start LSN, anything: the
    /// relation for Python); or PgQ event rows (txid, ts_ms, op, data, table,
    /// extra) of the trigger backend (data and extra: the row and the old row, str). messages, [(topic, key, value or None, headers)] to produce in order; done, how
    /// many records they are (records[start + done] is left to Python); counts, per table index
    /// the messages made; events, per table index the debezium events numbered (tombstones are
    /// not); tally, per table index [creates, updates, deletes, key and value bytes] of the
    /// changes taken. headers: (op c, op u, op d, txid, ts_ms, set, version) header tuples and the position
    /// header's name; a message's headers are [op, txid, (name, prefix + 10-digit ordinal),
    /// ts_ms, set, version]; ordinal: the position ordinal of records[start]. txn (needed by a
    /// debezium table, else None): (txid, ts_ms, ts_us, last_lsn or None, total_order so far,
    /// per table index its data_collection_order so far) of the transaction (Begin, TxnOrder).
    /// producer (a pgshovel2_native.Producer) and wait (called when its queue is full): the
    /// messages are produced into it, in a Kafka transaction the caller opened, and messages is
    /// their number.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (records, start, prefix, ordinal, ops, fixed, position_name, txn=None, producer=None, wait=None))]
    fn encode<'py>(&self, py: Python<'py>, records: &Bound<'py, PyList>, start: usize, prefix: &str,
                   ordinal: u64, ops: (Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>),
                   fixed: (Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>),
                   position_name: &Bound<'py, PyString>, txn: Option<TxnArg>,
                   producer: Option<Bound<'py, Producer>>, wait: Option<Bound<'py, PyAny>>) -> PyResult<Encoded> {
        let mut counts = vec![0usize; self.writers.len()];
        let mut tally = vec![[0u64; 4]; self.writers.len()];
        let mut txn = txn.map(|(txid, ts_ms, ts_us, last_lsn, total, per)| {
            Txn { txid, ts_ms, ts_us, last_lsn, total, per, events: vec![0; self.writers.len()] }
        });
        let heads = Heads { ops: [ops.0, ops.1, ops.2], position: position_name.clone(), txid: fixed.0, ts_ms: fixed.1,
                            set: fixed.2, version: fixed.3 };
        let mut target = self.target(py, producer.as_ref(), wait, None)?;
        let mut done = 0;
        let mut out = Vec::with_capacity(records.len().saturating_sub(start) + 8);
        let mut held_bytes = 0; // of the messages in out: handed over once past FLUSH_BYTES
        for (n, record) in records.iter().skip(start).enumerate() {
            let Some(held) = self.held(&record) else { break };
            let Some(rec) = held.rec() else { break };
            let text = position(prefix, ordinal + n as u64);
            let before = out.len();
            if !self.push_change(py, &rec, &text, txn.as_mut(), &mut counts, &mut tally, &mut out)? {
                break;
            }
            done += 1;
            held_bytes += out[before..].iter().map(|m| m.value.as_ref().map_or(0, Vec::len)).sum::<usize>();
            if held_bytes > FLUSH_BYTES {
                target.put(py, std::mem::take(&mut out), &heads, &self.topics, None)?;
                held_bytes = 0;
            }
        }
        target.put(py, out, &heads, &self.topics, None)?;
        let events = txn.map_or_else(|| vec![0; self.writers.len()], |t| t.events);
        Ok((target.result(py)?, done, counts, events, tally))
    }

    /// (messages, done, tally) for the whole transactions txns[first:] of records: per transaction its
    /// BEGIN record, its data messages as encode gives them (a debezium table's events numbered
    /// from 1 in it) and its END record (per-topic counts), what the loop writes for its Begin,
    /// ChangeRuns and Commit. txns: per transaction (start, stop, txid, ts_ms, ts_us, last_lsn or
    /// None, prefix, ordinal, unit: a TxnBounds), its records records[start:stop] (our plugin's change records, or
    /// PgQ event rows of one ts_ms), its Begin's fields (TxnRun), its unit's position prefix and
    /// the position ordinal of records[start]. A transaction is taken whole or not at all: done,
    /// the transactions taken; txns[first + done], if any, is given back to Python (a record the
    /// lane does not take). names: the headers' names (position, txid, ts_ms); ops: encode's;
    /// shared: the (set, version) header tuples every message has; txn_topic: the transactions
    /// topic; avro_header: the registry prefix of its Avro writer, None for JSON records;
    /// producer and wait: as encode's (messages is then the number produced); tally: encode's, of
    /// the transactions taken.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (records, txns, first, ops, names, shared, txn_topic, avro_header=None, producer=None, wait=None))]
    fn encode_txns<'py>(&self, py: Python<'py>, records: &Bound<'py, PyList>, txns: &Bound<'py, PyList>, first: usize,
                        ops: (Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyAny>),
                        names: (Bound<'py, PyString>, Bound<'py, PyString>, Bound<'py, PyString>),
                        shared: (Bound<'py, PyAny>, Bound<'py, PyAny>), txn_topic: PyObject,
                        avro_header: Option<Vec<u8>>, producer: Option<Bound<'py, Producer>>,
                        wait: Option<Bound<'py, PyAny>>) -> PyResult<(PyObject, usize, Tally)> {
        let mut target = self.target(py, producer.as_ref(), wait, Some(&txn_topic))?;
        let frame = txns::Frame { position: names.0, txid: names.1, ts_ms: names.2, ops: [ops.0, ops.1, ops.2],
                                  set: shared.0, version: shared.1, txn_topic, avro: avro_header };
        let mut tally = vec![[0u64; 4]; self.writers.len()];
        let done = self.txns(py, records, txns, first, &frame, &mut target, &mut tally)?;
        Ok((target.result(py)?, done, tally))
    }
}

impl Lane {
    /// Where a call's messages go: into producer (with wait for a full queue), else a new list.
    fn target<'a, 'py>(&'a self, py: Python<'py>, producer: Option<&'a Bound<'py, Producer>>,
                       wait: Option<Bound<'py, PyAny>>, txn_topic: Option<&PyObject>) -> PyResult<Target<'a, 'py>> {
        Ok(match (producer, wait) {
            (Some(producer), Some(wait)) => Target::Direct(Direct {
                producer: producer.get(), wait, topics: &self.topic_names,
                txn_topic: txn_topic.map(|t| t.extract(py)).transpose()?,
                handles: vec![None; self.topic_names.len() + 1], sent: 0 }),
            _ => Target::List(PyList::empty(py)),
        })
    }

    /// The messages of one change as its table's envelope makes them, or None (Python's).
    /// position: the change's pgshovel.position.
    fn change(&self, py: Python<'_>, rec: &Rec<'_>, position: &str, txn: Option<&mut Txn>) -> PyResult<Option<Vec<Out>>> {
        Ok(match self.writers.get(rec.table) {
            Some(Some(Writer::Row(codec))) => row_messages(codec.get(), rec),
            Some(Some(Writer::Debezium(events))) => match txn {
                Some(txn) => debezium_messages(py, events.get(), rec, position, txn)?,
                None => return Err(pyo3::exceptions::PyValueError::new_err("Lane: a debezium table needs txn")),
            },
            _ => None,
        })
    }

    /// Appends the messages of one change to out, counts them per table index in counts and the
    /// change by op with its bytes in tally; false (nothing appended): the change is Python's.
    /// position: its pgshovel.position.
    /// A change with a message over the lane's limit is Python's too (its numbering undone).
    fn push_change(&self, py: Python<'_>, rec: &Rec<'_>, position: &str, mut txn: Option<&mut Txn>,
                   counts: &mut [usize], tally: &mut [[u64; 4]], out: &mut Vec<Msg>) -> PyResult<bool> {
        let numbered = txn.as_deref().map(|t| (t.total, t.per.get(rec.table).copied(), t.events.get(rec.table).copied()));
        let Some(outs) = self.change(py, rec, position, txn.as_deref_mut())? else { return Ok(false) };
        let size = |o: &Out| o.1.as_ref().map_or(0, Vec::len) + o.2.as_ref().map_or(0, Vec::len);
        if outs.iter().any(|o| size(o) > self.limit) {
            if let (Some(t), Some((total, per, events))) = (txn, numbered) {
                t.total = total;
                if let (Some(p), Some(e)) = (per, events) {
                    t.per[rec.table] = p;
                    t.events[rec.table] = e;
                }
            }
            return Ok(false);
        }
        let op = match rec.kind { b'I' => 0, b'U' => 1, _ => 2 };
        tally[rec.table][op] += 1;
        for (table, key, value, op) in outs {
            tally[table][3] += (key.as_ref().map_or(0, Vec::len) + value.as_ref().map_or(0, Vec::len)) as u64;
            out.push(Msg { topic: Some(table), key, value, data: Some((op, position.to_string())) });
            counts[table] += 1;
        }
        Ok(true)
    }
}
