//! Lane.encode_txns: whole small transactions (PgQ event rows, or our plugin's change records),
//! each one's data messages framed by its BEGIN and END records (what Emitter.begin_record,
//! change_run and end write for it through the loop, byte for byte), so a stream of many small
//! transactions costs one call, not items, records and produce calls per transaction. The source
//! gives each transaction's bounds; a transaction is taken whole or not at all.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use super::{Heads, Lane, Msg, Tally, Target, Txn};
use crate::digits::position;
use crate::kinds::write_long;

/// Lane.encode_txns's header names and shared headers: the position, txid and ts_ms headers'
/// names, the op header tuples (c, u, d), the (set, version) header tuples, the transactions
/// topic and the registry prefix of its Avro records (None: JSON).
pub(super) struct Frame<'py> {
    pub position: Bound<'py, PyString>,
    pub txid: Bound<'py, PyString>,
    pub ts_ms: Bound<'py, PyString>,
    pub ops: [Bound<'py, PyAny>; 3],
    pub set: Bound<'py, PyAny>,
    pub version: Bound<'py, PyAny>,
    pub txn_topic: PyObject,
    pub avro: Option<Vec<u8>>,
}

/// One transaction of Lane.encode_txns's txns: (start, stop, txid, ts_ms, ts_us, last_lsn, prefix, ordinal,
/// unit), a TxnBounds (the unit is the loop's).
type Bounds = (usize, usize, i64, i64, i64, Option<i64>, String, u64, u64);

impl Lane {
    /// Hands the messages of the whole transactions txns[first:] (Lane.encode_txns) to target
    /// as far as the lane takes every record of a transaction: the transactions taken.
    pub(super) fn txns<'py>(&self, py: Python<'py>, records: &Bound<'py, PyList>, txns: &Bound<'py, PyList>,
                            first: usize, frame: &Frame<'py>, target: &mut Target<'_, 'py>,
                            tally: &mut [[u64; 4]]) -> PyResult<usize> {
        let mut done = 0;
        for bounds in txns.iter().skip(first) {
            let bounds: Bounds = bounds.extract()?;
            let Some((msgs, taken)) = self.txn(py, records, &bounds, frame)? else { break };
            for (sum, add) in tally.iter_mut().zip(taken) {
                for (s, a) in sum.iter_mut().zip(add) {
                    *s += a;
                }
            }
            let text = |name: &Bound<'py, PyString>, value: i64| {
                PyTuple::new(py, [name.clone().into_any(), PyString::new(py, &value.to_string()).into_any()])
                    .map(Bound::into_any)
            };
            let heads = Heads { ops: frame.ops.clone(), position: frame.position.clone(),
                                txid: text(&frame.txid, bounds.2)?, ts_ms: text(&frame.ts_ms, bounds.3)?,
                                set: frame.set.clone(), version: frame.version.clone() };
            target.put(py, msgs, &heads, &self.topics, Some(&frame.txn_topic))?;
            done += 1;
        }
        Ok(done)
    }

    /// One transaction's messages, BEGIN first and END last, with its tally (Lane.encode's), or
    /// None (a record the lane does not take: Python's).
    fn txn(&self, py: Python<'_>, records: &Bound<'_, PyList>, bounds: &Bounds, frame: &Frame<'_>)
           -> PyResult<Option<(Vec<Msg>, Tally)>> {
        let (start, stop, txid, ts_ms, ts_us, last_lsn, prefix, ordinal, _) = bounds;
        let (txid, ts_ms, ordinal) = (*txid, *ts_ms, *ordinal);
        let tables = self.writers.len();
        let mut txn = Txn { txid, ts_ms, ts_us: *ts_us, last_lsn: *last_lsn, total: 0, per: vec![0; tables],
                            events: vec![0; tables] };
        let mut out = Vec::with_capacity(2 + stop.saturating_sub(*start));
        let mut counts = vec![0usize; tables];
        let mut tally = vec![[0u64; 4]; tables];
        let first = position(prefix, ordinal);
        let mut last = first.clone();
        out.push(txn_record(b"BEGIN", txid, &first, ts_ms, None, frame));
        for n in 0..stop.saturating_sub(*start) {
            let record = records.get_item(start + n)?;
            let Some(held) = self.held(&record) else { return Ok(None) };
            let Some(rec) = held.rec() else { return Ok(None) };
            last = position(prefix, ordinal + n as u64);
            if !self.push_change(py, &rec, &last, Some(&mut txn), &mut counts, &mut tally, &mut out)? {
                return Ok(None);
            }
        }
        let mut per_topic = Vec::new();
        for (table, n) in counts.into_iter().enumerate().filter(|(_, n)| *n > 0) {
            let Some(topic) = &self.plain_topics[table] else {
                return Ok(None); // a record the JSON encoder would escape: Python's
            };
            per_topic.push((topic.as_str(), n));
        }
        per_topic.sort();
        out.push(txn_record(b"END", txid, &last, ts_ms, Some(&per_topic), frame));
        Ok(Some((out, tally)))
    }
}

/// A BEGIN (counts None) or END record on the transactions topic, as Emitter._txn_record writes
/// it (rows.txn_record_json, or txn_record_avro after frame.avro, the writer's prefix).
fn txn_record(kind: &[u8], txid: i64, position: &str, ts_ms: i64, counts: Option<&[(&str, usize)]>,
              frame: &Frame<'_>) -> Msg {
    let value = match &frame.avro {
        Some(header) => avro_record(header, kind, txid, position, ts_ms, counts),
        None => json_record(kind, txid, position, ts_ms, counts),
    };
    Msg { topic: None, key: None, value: Some(value), data: None }
}

/// rows.txn_record_json: every string of it is ASCII without characters to escape (kind, a
/// position, topic names checked by the caller).
fn json_record(kind: &[u8], txid: i64, position: &str, ts_ms: i64, counts: Option<&[(&str, usize)]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind);
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(b"\",\"txid\":");
    out.extend_from_slice(digits.format(txid).as_bytes());
    out.extend_from_slice(b",\"position\":\"");
    out.extend_from_slice(position.as_bytes());
    out.extend_from_slice(b"\",\"ts_ms\":");
    out.extend_from_slice(digits.format(ts_ms).as_bytes());
    out.extend_from_slice(b",\"event_count\":");
    match counts {
        None => out.extend_from_slice(b"null,\"data_collections\":null"),
        Some(counts) => {
            let total: usize = counts.iter().map(|(_, n)| n).sum();
            out.extend_from_slice(digits.format(total).as_bytes());
            out.extend_from_slice(b",\"data_collections\":[");
            for (i, (topic, n)) in counts.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"data_collection\":\"");
                out.extend_from_slice(topic.as_bytes());
                out.extend_from_slice(b"\",\"event_count\":");
                out.extend_from_slice(digits.format(*n).as_bytes());
                out.push(b'}');
            }
            out.push(b']');
        }
    }
    out.extend_from_slice(b",\"table\":null}");
    out
}

/// rows.txn_record_avro: the transaction record (avro.TRANSACTION_SCHEMA) after header.
fn avro_record(header: &[u8], kind: &[u8], txid: i64, position: &str, ts_ms: i64,
               counts: Option<&[(&str, usize)]>) -> Vec<u8> {
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
