//! Lane.encode_txns: whole small transactions of PgQ event rows, each one's data messages framed
//! by its BEGIN and END records (what Emitter.begin_record/change_run/end write for it through
//! the loop, byte for byte), so a batch of many small transactions costs one call, not items,
//! records and produce calls per transaction. A transaction is taken whole or not at all.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use super::{Lane, Txn};
use crate::kinds::write_long;

/// Lane.encode_txns's header names and shared headers: (position name, txid name, ts_ms name,
/// op headers c/u/d, (set, version) header tuples).
pub(super) struct Frame<'py> {
    pub position: Bound<'py, PyString>,
    pub txid: Bound<'py, PyString>,
    pub ts_ms: Bound<'py, PyString>,
    pub ops: (PyObject, PyObject, PyObject),
    pub set: PyObject,
    pub version: PyObject,
    pub txn_topic: PyObject,
    pub avro: Option<Vec<u8>>,
}

/// A PgQ event row's txid and ts_ms (items 0 and 1), or None when it is not such a row.
fn txid_ts(row: &Bound<'_, PyAny>) -> Option<(i64, i64)> {
    let row = row.downcast::<PyTuple>().ok()?;
    Some((row.get_item(0).ok()?.extract().ok()?, row.get_item(1).ok()?.extract().ok()?))
}

impl Lane {
    /// The messages of records[start:stop], whole transactions of PgQ event rows (consecutive rows
    /// of one txid), as far as the lane takes every row of a transaction: (messages, done, back),
    /// done the rows taken, back the rows of the transaction after them it gives back (0 when done
    /// reaches stop). ordinal: the position ordinal of records[start].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn txns<'py>(&self, py: Python<'py>, records: &Bound<'py, PyList>, start: usize, stop: usize,
                            prefix: &str, ordinal: u64, frame: &Frame<'py>)
                            -> PyResult<(Bound<'py, PyList>, usize, usize)> {
        let messages = PyList::empty(py);
        let mut at = start;
        while at < stop {
            let Some((txid, ts_ms)) = txid_ts(&records.get_item(at)?) else {
                return Ok((messages, at - start, stop - at)); // not a PgQ row: all of the rest is Python's
            };
            let mut end = at + 1;
            while end < stop && txid_ts(&records.get_item(end)?).map(|t| t.0) == Some(txid) {
                end += 1;
            }
            let first = ordinal + (at - start) as u64;
            let Some(txn) = self.txn(py, records, at, end, prefix, first, (txid, ts_ms), frame)? else {
                return Ok((messages, at - start, end - at));
            };
            for message in txn {
                messages.append(message)?;
            }
            at = end;
        }
        Ok((messages, at - start, stop - at))
    }

    /// One transaction's messages, BEGIN first and END last, or None (a row the lane does not
    /// take, or one of another ts_ms: Python's).
    #[allow(clippy::too_many_arguments)]
    fn txn<'py>(&self, py: Python<'py>, records: &Bound<'py, PyList>, start: usize, stop: usize, prefix: &str,
                ordinal: u64, (txid, ts_ms): (i64, i64), frame: &Frame<'py>) -> PyResult<Option<Vec<Bound<'py, PyTuple>>>> {
        let tables = self.writers.len();
        let mut txn = Txn { txid, ts_ms, ts_us: ts_ms * 1000, last_lsn: None, total: 0, per: vec![0; tables],
                            events: vec![0; tables] };
        let fixed = (PyTuple::new(py, [frame.txid.clone().into_any(), PyString::new(py, &txid.to_string()).into_any()])?,
                     PyTuple::new(py, [frame.ts_ms.clone().into_any(), PyString::new(py, &ts_ms.to_string()).into_any()])?);
        let mut out = Vec::with_capacity(2 + stop - start);
        let mut counts = vec![0usize; tables];
        let first = format!("{prefix}{ordinal:010}");
        let mut last = first.clone();
        out.push(self.txn_record(py, b"BEGIN", txid, &first, ts_ms, None, frame)?);
        for (n, record) in records.iter().skip(start).take(stop - start).enumerate() {
            if txid_ts(&record).map(|t| t.1) != Some(ts_ms) {
                return Ok(None);
            }
            let Some(row) = self.trigger_row(&record) else { return Ok(None) };
            let Some(rec) = row.rec() else { return Ok(None) };
            last = format!("{prefix}{:010}", ordinal + n as u64);
            let Some(outs) = self.change(py, &rec, &last, Some(&mut txn))? else { return Ok(None) };
            let position = PyTuple::new(py, [frame.position.clone().into_any(), PyString::new(py, &last).into_any()])?;
            for (table, key, value, op) in outs {
                let op = match op { b'c' => &frame.ops.0, b'u' => &frame.ops.1, _ => &frame.ops.2 };
                let headers = [op.clone_ref(py), fixed.0.clone().into_any().unbind(), position.clone().into_any().unbind(),
                               fixed.1.clone().into_any().unbind(), frame.set.clone_ref(py), frame.version.clone_ref(py)];
                out.push(self.message(py, self.topics[table].clone_ref(py), key, value, PyList::new(py, headers)?)?);
                counts[table] += 1;
            }
        }
        let mut per_topic = Vec::new();
        for (table, n) in counts.into_iter().enumerate().filter(|(_, n)| *n > 0) {
            let topic: String = self.topics[table].extract(py)?;
            if !topic.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\') {
                return Ok(None); // a record the JSON encoder would escape: Python's
            }
            per_topic.push((topic, n));
        }
        per_topic.sort();
        out.push(self.txn_record(py, b"END", txid, &last, ts_ms, Some(&per_topic), frame)?);
        Ok(Some(out))
    }

    /// A (topic, key, value, headers) message tuple.
    pub(super) fn message<'py>(&self, py: Python<'py>, topic: PyObject, key: Option<Vec<u8>>, value: Option<Vec<u8>>,
                               headers: Bound<'py, PyList>) -> PyResult<Bound<'py, PyTuple>> {
        let bytes = |b: Option<Vec<u8>>| -> PyObject {
            b.map_or_else(|| py.None(), |b| PyBytes::new(py, &b).into_any().unbind())
        };
        PyTuple::new(py, [topic, bytes(key), bytes(value), headers.into_any().unbind()])
    }

    /// A BEGIN (counts None) or END record on the transactions topic, as Emitter._txn_record
    /// writes it (rows.txn_record_json, or txn_record_avro after frame.avro, the writer's prefix).
    #[allow(clippy::too_many_arguments)]
    fn txn_record<'py>(&self, py: Python<'py>, kind: &[u8], txid: i64, position: &str, ts_ms: i64,
                       counts: Option<&[(String, usize)]>, frame: &Frame<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let value = match &frame.avro {
            Some(header) => avro_record(header, kind, txid, position, ts_ms, counts),
            None => json_record(kind, txid, position, ts_ms, counts),
        };
        let headers = PyList::new(py, [frame.set.clone_ref(py), frame.version.clone_ref(py)])?;
        self.message(py, frame.txn_topic.clone_ref(py), None, Some(value), headers)
    }
}

/// rows.txn_record_json: every string of it is ASCII without characters to escape (kind, a
/// position, topic names checked by the caller).
fn json_record(kind: &[u8], txid: i64, position: &str, ts_ms: i64, counts: Option<&[(String, usize)]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind);
    out.extend_from_slice(format!("\",\"txid\":{txid},\"position\":\"{position}\",\"ts_ms\":{ts_ms},\"event_count\":").as_bytes());
    match counts {
        None => out.extend_from_slice(b"null,\"data_collections\":null"),
        Some(counts) => {
            let total: usize = counts.iter().map(|(_, n)| n).sum();
            out.extend_from_slice(format!("{total},\"data_collections\":[").as_bytes());
            for (i, (topic, n)) in counts.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(format!("{{\"data_collection\":\"{topic}\",\"event_count\":{n}}}").as_bytes());
            }
            out.push(b']');
        }
    }
    out.extend_from_slice(b",\"table\":null}");
    out
}

/// rows.txn_record_avro: the transaction record (avro.TRANSACTION_SCHEMA) after header.
fn avro_record(header: &[u8], kind: &[u8], txid: i64, position: &str, ts_ms: i64,
               counts: Option<&[(String, usize)]>) -> Vec<u8> {
    let mut out = header.to_vec();
    let string = |s: &[u8], out: &mut Vec<u8>| {
        write_long(s.len() as i64, out);
        out.extend_from_slice(s);
    };
    string(kind, &mut out);
    write_long(txid, &mut out);
    string(position.as_bytes(), &mut out);
    write_long(ts_ms, &mut out);
    let Some(counts) = counts else {
        out.extend_from_slice(&[0, 0, 0]); // event_count, data_collections, table: null (union branch 0)
        return out;
    };
    out.push(2); // event_count: branch 1, a long
    write_long(counts.iter().map(|(_, n)| *n as i64).sum(), &mut out);
    out.push(2); // data_collections: branch 1, an array in one block
    if !counts.is_empty() {
        write_long(counts.len() as i64, &mut out);
        for (topic, n) in counts {
            string(topic.as_bytes(), &mut out);
            write_long(*n as i64, &mut out);
        }
    }
    out.extend_from_slice(&[0, 0]); // the array's end; table: null
    out
}
