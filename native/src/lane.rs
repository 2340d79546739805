//! The relay's native lane: a run of our output plugin's change records (sql/decoder/README.rst,
//! record format 3) turned into the row envelope's Kafka messages with their headers, in one call
//! (pgshovel2.relay.lane). It does what RecordDecoder.decode, RowEnvelope.change and
//! Emitter._headers do for each record, byte for byte, and stops at the first record it would not
//! handle exactly so (a table without a lane, a row its codec leaves to Python, a record with no
//! row or with unchanged values): the caller takes that record the Python way.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::{Row, RowCodec};

const FLAG_OLD: u8 = 1;
const FLAG_NO_ROW: u8 = 2;
const FLAG_UNCHANGED: u8 = 4;
const HEAD: usize = 16; // kind, change LSN (8), table index (2), flags (1), row length (4)

/// A data message: (table index, key, value or None for a tombstone, op).
type Out = (usize, Vec<u8>, Option<Vec<u8>>, u8);

/// The lane of a set version: per table index (the plugin's ``tables`` order), its RowCodec and
/// topic, or None where the table takes the Python path.
#[pyclass(frozen)]
pub struct Lane {
    codecs: Vec<Option<Py<RowCodec>>>,
    topics: Vec<PyObject>,
}

#[pymethods]
impl Lane {
    /// codecs: per table index, the RowCodec of a keyed table in the row envelope (None: no lane);
    /// topics: per table index, its data topic (str; anything where codecs has None).
    #[new]
    fn new(codecs: Vec<Option<Py<RowCodec>>>, topics: Vec<PyObject>) -> PyResult<Self> {
        if codecs.len() != topics.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("Lane: codecs and topics differ in length"));
        }
        Ok(Lane { codecs, topics })
    }

    /// (messages, done, counts) for records[start:], a run of one transaction's change records:
    /// messages, [(topic, key, value or None, headers)] to produce in order; done, how many records
    /// they are (records[start + done] is left to Python); counts, per table index the messages
    /// made. headers: (op c, op u, op d, txid, ts_ms, set, version) header tuples and the position
    /// header's name; a message's headers are [op, txid, (name, prefix + 10-digit ordinal), ts_ms,
    /// set, version]; ordinal: the position ordinal of records[start].
    #[allow(clippy::too_many_arguments)]
    fn encode<'py>(&self, py: Python<'py>, records: &Bound<'py, PyList>, start: usize, prefix: &str,
                   ordinal: u64, ops: (PyObject, PyObject, PyObject), fixed: (PyObject, PyObject, PyObject, PyObject),
                   position_name: &Bound<'py, PyString>) -> PyResult<(Bound<'py, PyList>, usize, Vec<usize>)> {
        let messages = PyList::empty(py);
        let mut counts = vec![0usize; self.codecs.len()];
        let mut done = 0;
        for (n, record) in records.iter().skip(start).enumerate() {
            let Ok(bytes) = record.downcast::<PyBytes>() else { break };
            let Some(outs) = self.record(bytes.as_bytes()) else { break };
            let position = PyString::new(py, &format!("{prefix}{:010}", ordinal + n as u64));
            let position = PyTuple::new(py, [position_name.clone().into_any(), position.into_any()])?;
            for (table, key, value, op) in outs {
                let op = match op { b'c' => &ops.0, b'u' => &ops.1, _ => &ops.2 };
                let headers = PyList::new(py, [op.clone_ref(py), fixed.0.clone_ref(py), position.clone().into_any().unbind(),
                                               fixed.1.clone_ref(py), fixed.2.clone_ref(py), fixed.3.clone_ref(py)])?;
                let value: PyObject = match value {
                    Some(v) => PyBytes::new(py, &v).into_any().unbind(),
                    None => py.None(),
                };
                let key = PyBytes::new(py, &key).into_any().unbind();
                messages.append(PyTuple::new(py, [self.topics[table].clone_ref(py), key, value,
                                                  headers.into_any().unbind()])?)?;
                counts[table] += 1;
            }
            done += 1;
        }
        Ok((messages, done, counts))
    }
}

impl Lane {
    /// The messages of one change record as RowEnvelope.change makes them, or None (Python's).
    fn record(&self, data: &[u8]) -> Option<Vec<Out>> {
        if data.len() < HEAD || !matches!(data[0], b'I' | b'U' | b'D') {
            return None;
        }
        let table = u16::from_be_bytes([data[9], data[10]]) as usize;
        let flags = data[11];
        let size = u32::from_be_bytes([data[12], data[13], data[14], data[15]]) as usize;
        if flags & (FLAG_NO_ROW | FLAG_UNCHANGED) != 0 || data.len() < HEAD + size {
            return None;
        }
        let codec = self.codecs.get(table)?.as_ref()?.get();
        let (key, value) = codec.encode_row(Row::Text(&data[HEAD..HEAD + size]), true)?;
        let key = key?; // a lane table is keyed
        if data[0] == b'D' {
            return Some(vec![(table, key, None, b'd')]);
        }
        let op = if data[0] == b'I' { b'c' } else { b'u' };
        if flags & FLAG_OLD == 0 {
            return Some(vec![(table, key, value, op)]);
        }
        let (old_key, _) = codec.encode_row(Row::Text(&data[HEAD + size..]), true)?;
        let old_key = old_key?;
        if old_key != key {
            return Some(vec![(table, old_key, None, b'd'), (table, key, value, b'c')]);
        }
        Some(vec![(table, key, value, op)])
    }
}
