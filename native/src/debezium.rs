//! The debezium envelope's change events in native code (pgshovel2.relay.debezium, docs/wire.rst).
//!
//! A `DebeziumEvents` wraps a table's `RowCodec` (rows encoded as the envelope's before/after
//! records) and writes whole events -- `{before, after, source, transaction, op, ts_ms, ts_us,
//! ts_ns}` -- byte for byte as DebeziumEnvelope's Python path does: Avro (the registry prefix, then
//! the Envelope record of avro.debezium_value_schema) or compact JSON. It gives None (nothing done,
//! the transaction numbering untouched) for a row or context it would not write exactly as Python
//! does; the caller then takes the Python path, which also names any error.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PyString, PyTuple};

use crate::json;
use crate::kinds::write_long;
use crate::{from_py, Row, RowCodec};

const XID_MASK: i64 = 0xFFFF_FFFF;
const SNAPSHOT_FALSE: &str = "false";

/// The Context fields an event reads (pgshovel2.relay.envelopes.Context, by position).
pub(crate) struct Meta {
    txid: i64,
    position: String,
    ts_ms: i64,
    snapshot: Option<String>,
    lsn: Option<i64>,
    last_lsn: Option<i64>,
    ts_us: i64,
    ts_ns: i64,
}

impl Meta {
    /// A captured change's Context (snapshot "false"): txid, 64-bit; position, its
    /// pgshovel.position; ts_ms and ts_us, the commit time; lsn, the change's own LSN (logical); last_lsn,
    /// the LSN completely processed before its transaction. None when ts_us has no ns form in 64 bits.
    pub(crate) fn change(txid: i64, position: String, ts_ms: i64, lsn: Option<i64>, last_lsn: Option<i64>, ts_us: i64)
                         -> Option<Meta> {
        let ts_ns = ts_us.checked_mul(1000)?;
        Some(Meta { txid, position, ts_ms, snapshot: Some(SNAPSHOT_FALSE.to_string()), lsn, last_lsn,
                    ts_us, ts_ns })
    }
}

/// A message of a change: key, value (None: a tombstone) and op.
pub(crate) type Msg = (Key, Option<Vec<u8>>, &'static str);

/// Numbers the next event of a transaction: its (total_order, data_collection_order), or None
/// (no transaction block).
pub(crate) type Order<'a> = dyn FnMut() -> PyResult<Option<(i64, i64)>> + 'a;

/// One event's processing time and transaction block numbers.
struct Stamp {
    now_ns: i64,
    order: Option<(i64, i64)>,
}

/// A table's debezium envelope events: `change(op, row, before, ctx)` and `read(row, ctx)` give
/// the list of Messages DebeziumEnvelope.change/read give (events and tombstones), or None.
#[pyclass(frozen)]
pub struct DebeziumEvents {
    rows: Py<RowCodec>,
    avro: bool,
    header: Vec<u8>,
    version: String,
    connector: String,
    name: String,
    db: String,
    schema: String,
    table: String,
    collection: Py<PyString>,
    clock: PyObject,
    message: PyObject,
}

#[pymethods]
impl DebeziumEvents {
    /// rows: the RowCodec of the table's before/after records (Avro: without a registry prefix);
    /// avro: Avro (else JSON); header: the Envelope schema's registry prefix (Avro);
    /// source: (version, connector, set name, database, schema, table) of the source block;
    /// collection: the data collection the transaction block numbers events in; clock: ns since
    /// the epoch (processing time); message: the Message class (key, value, op).
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(rows: Py<RowCodec>, avro: bool, header: Vec<u8>,
           source: (String, String, String, String, String, String), collection: Py<PyString>,
           clock: PyObject, message: PyObject) -> Self {
        let (version, connector, name, db, schema, table) = source;
        DebeziumEvents { rows, avro, header, version, connector, name, db, schema, table, collection, clock,
                         message }
    }

    /// The messages of one I/U/D change, as DebeziumEnvelope.change gives them, or None (nothing
    /// done) when the Python path must write them. row/before: JSON text or trigger-form lists;
    /// ctx: the change's Context.
    fn change<'py>(&self, py: Python<'py>, op: &str, row: &Bound<'py, PyAny>, before: &Bound<'py, PyAny>,
                   ctx: &Bound<'py, PyTuple>) -> PyResult<PyObject> {
        let codec = self.rows.get();
        let Some((key, body)) = encode(codec, row) else { return Ok(py.None()) };
        let old = if before.is_none() { None } else {
            match encode(codec, before) {
                Some(got) => Some(got),
                None => return Ok(py.None()),
            }
        };
        let Some(meta) = meta_of(ctx) else { return Ok(py.None()) };
        let order = ctx.get_item(4)?;
        let msgs = self.change_messages(py, op.as_bytes().first().copied().unwrap_or(b'U'), key, body, old, &meta,
                                        &mut || self.next_of(py, &order))?;
        let out = PyList::empty(py);
        for (key, value, op) in msgs {
            out.append(self.message(py, &key, value.as_ref(), op)?)?;
        }
        Ok(out.into_any().unbind())
    }

    /// The messages of one snapshot row (op r), as DebeziumEnvelope.read gives them, or None.
    fn read<'py>(&self, py: Python<'py>, row: &Bound<'py, PyAny>, ctx: &Bound<'py, PyTuple>) -> PyResult<PyObject> {
        let Some((key, body)) = encode(self.rows.get(), row) else { return Ok(py.None()) };
        let Some(meta) = meta_of(ctx) else { return Ok(py.None()) };
        let order = ctx.get_item(4)?;
        let value = self.value(py, "r", None, Some(&body), &meta, &mut || self.next_of(py, &order))?;
        let event = self.message(py, &key, Some(&value), "r")?;
        Ok(PyList::new(py, [event])?.into_any().unbind())
    }
}

pub(crate) type Key = Option<Vec<u8>>;

impl DebeziumEvents {
    /// The messages of one I/U/D change (op b'I', b'U' or b'D') as DebeziumEnvelope.change makes
    /// them: key and body of the row, and of the old row when logged; order numbers each event.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn change_messages(&self, py: Python<'_>, op: u8, key: Key, body: Vec<u8>, old: Option<(Key, Vec<u8>)>,
                                  meta: &Meta, order: &mut Order<'_>) -> PyResult<Vec<Msg>> {
        let mut out: Vec<Msg> = Vec::with_capacity(3);
        match op {
            b'I' => out.push((key, Some(self.value(py, "c", None, Some(&body), meta, order)?), "c")),
            b'D' => {
                let value = self.value(py, "d", Some(&body), None, meta, order)?;
                let tombstone = key.clone().map(|k| (Some(k), None, "d"));
                out.push((key, Some(value), "d"));
                out.extend(tombstone);
            }
            _ => {
                let (old_key, old_body) = match old {
                    Some((k, b)) => (k, Some(b)),
                    None => (key.clone(), None),
                };
                if old_key == key {
                    out.push((key, Some(self.value(py, "u", old_body.as_ref(), Some(&body), meta, order)?), "u"));
                } else {
                    out.push((old_key.clone(), Some(self.value(py, "d", old_body.as_ref(), None, meta, order)?), "d"));
                    out.push((old_key, None, "d"));
                    out.push((key, Some(self.value(py, "c", None, Some(&body), meta, order)?), "c"));
                }
            }
        }
        Ok(out)
    }

    /// The RowCodec of the before/after records.
    pub(crate) fn rows(&self) -> &RowCodec {
        self.rows.get()
    }

    /// order.next(collection) of a Context's TxnOrder, or None when it is None.
    fn next_of(&self, py: Python<'_>, order: &Bound<'_, PyAny>) -> PyResult<Option<(i64, i64)>> {
        if order.is_none() {
            return Ok(None);
        }
        Ok(Some(order.call_method1(intern!(py, "next"), (self.collection.clone_ref(py),))?.extract::<(i64, i64)>()?))
    }

    /// One event's value: processing time from the clock, then the transaction block's numbers
    /// from order, as the Python path takes them.
    fn value(&self, py: Python<'_>, op: &str, before: Option<&Vec<u8>>, after: Option<&Vec<u8>>, meta: &Meta,
             order: &mut Order<'_>) -> PyResult<Vec<u8>> {
        let now_ns = int_of(&self.clock.call0(py)?.into_bound(py))
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("the clock gave no 64-bit int"))?;
        let stamp = Stamp { now_ns, order: order()? };
        let mut value = Vec::with_capacity(1024);
        if self.avro {
            self.avro_event(before, after, op, meta, &stamp, &mut value);
        } else {
            self.json_event(before, after, op, meta, &stamp, &mut value);
        }
        Ok(value)
    }

    fn message(&self, py: Python<'_>, key: &Key, value: Option<&Vec<u8>>, op: &str) -> PyResult<PyObject> {
        let bytes = |b: Option<&Vec<u8>>| -> PyObject {
            match b {
                Some(b) => PyBytes::new(py, b).into_any().unbind(),
                None => py.None(),
            }
        };
        let op = PyString::intern(py, op);
        self.message.call1(py, (bytes(key.as_ref()), bytes(value), op))
    }

    fn json_event(&self, before: Option<&Vec<u8>>, after: Option<&Vec<u8>>, op: &str, m: &Meta, s: &Stamp,
                  out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"before\":");
        out.extend_from_slice(before.map_or(&b"null"[..], |b| b));
        out.extend_from_slice(b",\"after\":");
        out.extend_from_slice(after.map_or(&b"null"[..], |b| b));
        out.extend_from_slice(b",\"source\":{\"version\":");
        json::write_str(&self.version, out);
        out.extend_from_slice(b",\"connector\":");
        json::write_str(&self.connector, out);
        out.extend_from_slice(b",\"name\":");
        json::write_str(&self.name, out);
        json_int(b",\"ts_ms\":", Some(m.ts_ms), out);
        out.extend_from_slice(b",\"snapshot\":");
        json_opt_str(m.snapshot.as_deref(), out);
        out.extend_from_slice(b",\"db\":");
        json::write_str(&self.db, out);
        out.extend_from_slice(b",\"sequence\":");
        json_sequence(m, out);
        json_int(b",\"ts_us\":", Some(m.ts_us), out);
        json_int(b",\"ts_ns\":", Some(m.ts_ns), out);
        out.extend_from_slice(b",\"schema\":");
        json::write_str(&self.schema, out);
        out.extend_from_slice(b",\"table\":");
        json::write_str(&self.table, out);
        json_int(b",\"txId\":", tx_id(m), out);
        json_int(b",\"lsn\":", m.lsn, out);
        out.extend_from_slice(b",\"xmin\":null,\"position\":");
        json::write_str(&m.position, out);
        out.extend_from_slice(b"},\"transaction\":");
        match s.order {
            None => out.extend_from_slice(b"null"),
            Some((total, in_collection)) => {
                out.extend_from_slice(b"{\"id\":\"");
                push_transaction_id(m, out);
                out.push(b'"');
                json_int(b",\"total_order\":", Some(total), out);
                json_int(b",\"data_collection_order\":", Some(in_collection), out);
                out.push(b'}');
            }
        }
        out.extend_from_slice(b",\"op\":");
        json::write_str(op, out);
        json_int(b",\"ts_ms\":", Some(s.now_ns.div_euclid(1_000_000)), out);
        json_int(b",\"ts_us\":", Some(s.now_ns.div_euclid(1_000)), out);
        json_int(b",\"ts_ns\":", Some(s.now_ns), out);
        out.push(b'}');
    }

    fn avro_event(&self, before: Option<&Vec<u8>>, after: Option<&Vec<u8>>, op: &str, m: &Meta, s: &Stamp,
                  out: &mut Vec<u8>) {
        out.extend_from_slice(&self.header);
        for body in [before, after] {
            match body {
                None => out.push(0),
                Some(b) => {
                    out.push(2);
                    out.extend_from_slice(b);
                }
            }
        }
        for s in [&self.version, &self.connector, &self.name] {
            avro_str(s, out);
        }
        write_long(m.ts_ms, out);
        match &m.snapshot {  // ["string", "null"]
            Some(snapshot) => {
                out.push(0);
                avro_str(snapshot, out);
            }
            None => out.push(2),
        }
        avro_str(&self.db, out);
        match sequence(m) {
            Some(seq) => {
                out.push(2);
                avro_str(&seq, out);
            }
            None => out.push(0),
        }
        avro_opt_long(Some(m.ts_us), out);
        avro_opt_long(Some(m.ts_ns), out);
        avro_str(&self.schema, out);
        avro_str(&self.table, out);
        avro_opt_long(tx_id(m), out);
        avro_opt_long(m.lsn, out);
        out.push(0); // xmin
        avro_str(&m.position, out);
        match s.order {
            None => out.push(0),
            Some((total, in_collection)) => {
                out.push(2);
                avro_str(&transaction_id(m), out);
                write_long(total, out);
                write_long(in_collection, out);
            }
        }
        avro_str(op, out);
        avro_opt_long(Some(s.now_ns.div_euclid(1_000_000)), out);
        avro_opt_long(Some(s.now_ns.div_euclid(1_000)), out);
        avro_opt_long(Some(s.now_ns), out);
    }
}

/// (key, before/after body) of a row by the RowCodec; None: left to Python.
fn encode(codec: &RowCodec, row: &Bound<'_, PyAny>) -> Option<(Key, Vec<u8>)> {
    let got = if let Ok(s) = row.downcast::<PyString>() {
        codec.encode_row(Row::Text(s.to_str().ok()?.as_bytes()), true)
    } else if let Ok(b) = row.downcast::<PyBytes>() {
        codec.encode_row(Row::Text(b.as_bytes()), true)
    } else if let Ok(list) = row.downcast::<PyList>() {
        let values = list.iter().map(|v| from_py(&v)).collect::<Option<Vec<_>>>()?;
        codec.encode_row(Row::Values(&values, 256), true)
    } else {
        None
    }?;
    Some((got.0, got.1?))
}

/// A Python int (not a bool) that fits 64 bits.
fn int_of(v: &Bound<'_, PyAny>) -> Option<i64> {
    if v.downcast::<PyInt>().is_err() || v.downcast::<PyBool>().is_ok() {
        return None;
    }
    v.extract::<i64>().ok()
}

fn opt_int(v: &Bound<'_, PyAny>) -> Option<Option<i64>> {
    if v.is_none() { Some(None) } else { int_of(v).map(Some) }
}

/// The Context fields, or None when one has a form the Python path writes differently (beyond 64
/// bits, not an int, ...).
fn meta_of(ctx: &Bound<'_, PyTuple>) -> Option<Meta> {
    if ctx.len() != 8 {
        return None;
    }
    let item = |i: usize| ctx.get_item(i).ok();
    let txid = int_of(&item(0)?)?;
    let position = item(1)?.downcast::<PyString>().ok()?.to_str().ok()?.to_string();
    let ts_ms = int_of(&item(2)?)?;
    let snapshot = item(3)?;
    let snapshot = if snapshot.is_none() { None } else {
        Some(snapshot.downcast::<PyString>().ok()?.to_str().ok()?.to_string())
    };
    let lsn = opt_int(&item(5)?)?;
    let last_lsn = opt_int(&item(6)?)?;
    let ts_us = match opt_int(&item(7)?)? {
        Some(us) => us,
        None => ts_ms.checked_mul(1000)?,
    };
    let ts_ns = ts_us.checked_mul(1000)?;
    Some(Meta { txid, position, ts_ms, snapshot, lsn, last_lsn, ts_us, ts_ns })
}

/// source.sequence: Debezium's ``["<last LSN>","<LSN>"]`` (debezium.sequence), None without an LSN.
fn sequence(m: &Meta) -> Option<String> {
    let lsn = m.lsn?;
    Some(match m.last_lsn {
        Some(last) => format!("[\"{last}\",\"{lsn}\"]"),
        None => format!("[null,\"{lsn}\"]"),
    })
}

/// source.txId: the 32-bit xid of a change (snapshot "false"), else None.
fn tx_id(m: &Meta) -> Option<i64> {
    (m.snapshot.as_deref() == Some(SNAPSHOT_FALSE)).then_some(m.txid & XID_MASK)
}

/// source.sequence as a JSON string (sequence's text, its quotes escaped), or null.
fn json_sequence(m: &Meta, out: &mut Vec<u8>) {
    let Some(lsn) = m.lsn else { return out.extend_from_slice(b"null") };
    out.extend_from_slice(b"\"[");
    match m.last_lsn {
        Some(last) => {
            out.extend_from_slice(b"\\\"");
            push_int(last, out);
            out.extend_from_slice(b"\\\"");
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\\\"");
    push_int(lsn, out);
    out.extend_from_slice(b"\\\"]\"");
}

/// transaction.id (debezium.transaction_id).
fn transaction_id(m: &Meta) -> String {
    let mut out = Vec::with_capacity(32);
    push_transaction_id(m, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Appends transaction.id: ``<32-bit xid>:<LSN>``, or the txid without an LSN.
fn push_transaction_id(m: &Meta, out: &mut Vec<u8>) {
    match m.lsn {
        Some(lsn) => {
            push_int(m.txid & XID_MASK, out);
            out.push(b':');
            push_int(lsn, out);
        }
        None => push_int(m.txid, out),
    }
}

/// Appends n in decimal (its Display, without the String).
fn push_int(n: i64, out: &mut Vec<u8>) {
    if n < 0 {
        out.push(b'-');
    }
    json::push_uint(n.unsigned_abs(), 0, out);
}

fn json_int(name: &[u8], v: Option<i64>, out: &mut Vec<u8>) {
    out.extend_from_slice(name);
    match v {
        Some(n) => push_int(n, out),
        None => out.extend_from_slice(b"null"),
    }
}

fn json_opt_str(s: Option<&str>, out: &mut Vec<u8>) {
    match s {
        Some(s) => json::write_str(s, out),
        None => out.extend_from_slice(b"null"),
    }
}

fn avro_str(s: &str, out: &mut Vec<u8>) {
    write_long(s.len() as i64, out);
    out.extend_from_slice(s.as_bytes());
}

fn avro_opt_long(v: Option<i64>, out: &mut Vec<u8>) {
    match v {
        Some(n) => {
            out.push(2);
            write_long(n, out);
        }
        None => out.push(0),
    }
}
