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

mod event;

pub(crate) use event::Meta;
use event::Stamp;
use crate::row_codec::{from_py, Row, RowCodec};

/// A message of a change: key, value (None: a tombstone) and op.
pub(crate) type Msg = (Key, Option<Vec<u8>>, &'static str);

/// Numbers the next event of a transaction: its (total_order, data_collection_order), or None
/// (no transaction block).
pub(crate) type Order<'a> = dyn FnMut() -> PyResult<Option<(i64, i64)>> + 'a;

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
