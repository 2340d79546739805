//! The scan of whole small transactions a logical decoder's txn_run makes in Python
//! (RecordDecoder.txn_run for our plugin's records, PgoutputDecoder.txn_run for pgoutput's
//! messages), for the relay's TxnRuns: the same reads and results, without a Python object per
//! BEGIN and COMMIT (nor per record of our plugin's packs) and with the keepalive check at each
//! COMMIT a comparison with the slot's confirmed position. One loop over a reader (`Reads`) and
//! a stream's form (`Form`: packs.rs has our plugin's, pgoutput_scan.rs pgoutput's).

use pyo3::prelude::*;
use pyo3::types::PyList;

use super::message::{Reads, Seen};
use crate::digits::lsn_prefix;

/// µs from the Unix epoch to PostgreSQL's (2000-01-01): both BEGINs' commit times are from there.
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// The stream's form: what its BEGIN, change and COMMIT messages hold.
pub trait Form {
    /// (commit LSN, txid, commit time in µs since 2000) of a BEGIN message, or None (no BEGIN).
    fn begin(&self, data: &[u8]) -> Option<(u64, u64, i64)>;
    /// The run record of a change message (what a TxnRun holds of it: Lane.encode_txns's
    /// record), or None (a change the scan stops at: the Python way takes it).
    fn record(&mut self, py: Python<'_>, seen: &Seen) -> PyResult<Option<PyObject>>;
    /// The transaction end (commit LSN, end LSN) of a COMMIT message of unit, or None (no COMMIT).
    fn commit(&self, data: &[u8], unit: u64) -> Option<(u64, u64)>;
}

/// What a scan read: (records, txns, ends, last_lsn, partial, begin, next, last): the whole
/// transactions' change records and bounds, their ends (commit LSN, end LSN) and the end of the
/// last one (else last_lsn as given); the change records read of the transaction after them and
/// its BEGIN message (None: none unfinished); the message that ended the reads (None: the stream
/// held no more) and the last message read.
pub type Scanned = (Py<PyList>, Py<PyList>, Vec<(u64, u64)>, Option<u64>, Py<PyList>, PyObject, PyObject, PyObject);

/// A scan's limits: committed, the committed position's unit (a transaction it reaches goes the
/// old way); run_max, change records at most; confirmed, the slot's confirmed position (the stream
/// is not read on after a COMMIT message that starts at or below it: a keepalive read then could
/// confirm what is not in Kafka); last_lsn, the end of the transaction before; bounds, the class
/// of a transaction's bounds (TxnBounds).
pub struct Limits {
    pub committed: u64,
    pub run_max: usize,
    pub confirmed: u64,
    pub last_lsn: Option<u64>,
    pub bounds: PyObject,
}

/// The whole transactions from first (a message read) that reader holds whose every change form
/// takes as a run record, within limits.
pub fn scan(py: Python<'_>, reader: &mut impl Reads, form: &mut impl Form, first: PyObject, limits: Limits)
            -> PyResult<Scanned> {
    let mut out = Out { records: Vec::new(), txns: PyList::empty(py), ends: Vec::new(), last_lsn: limits.last_lsn };
    let first = Seen::of(py, first)?;
    let mut last = first.clone_ref(py);
    let mut msg = Some(first);
    while let Some(begin) = msg.take() {
        last = begin.clone_ref(py);
        let Some((unit, txid, ts_us)) = form.begin(begin.bytes(py)).filter(|f| f.0 > limits.committed) else {
            msg = Some(begin);
            break;
        };
        let start = out.records.len();
        let ended = changes(py, reader, form, &mut out.records, limits.run_max, &mut last)?;
        let end = ended.as_ref().and_then(|m| form.commit(m.bytes(py), unit)).filter(|_| out.records.len() > start);
        let Some(end) = end else {
            let next = ended.map(|m| m.message(py)).transpose()?;
            return out.result(py, start, Some(begin), next, &last);
        };
        let ts_us = ts_us + PG_EPOCH_US;
        let txn = (start, out.records.len(), txid, ts_us.div_euclid(1000), ts_us, out.last_lsn,
                   lsn_prefix(unit), 0u64, unit);
        out.txns.append(limits.bounds.call1(py, txn)?)?;
        out.ends.push(end);
        out.last_lsn = Some(end.1);
        let commit_start = ended.map_or(0, |commit| commit.data_start);
        msg = if commit_start > limits.confirmed { reader.next_seen(py)? } else { None };
    }
    let next = msg.as_ref().map(|m| m.message(py)).transpose()?;
    let whole = out.records.len();
    out.result(py, whole, None, next, &last)
}

/// Reads a transaction's change records into records (run_max in all at most), last the last
/// message read: the message that ended them (a COMMIT if the transaction is whole), or None
/// when the stream held no more.
fn changes(py: Python<'_>, reader: &mut impl Reads, form: &mut impl Form, records: &mut Vec<PyObject>,
           run_max: usize, last: &mut Seen) -> PyResult<Option<Seen>> {
    while let Some(seen) = reader.next_seen(py)? {
        *last = seen.clone_ref(py);
        if records.len() == run_max {
            return Ok(Some(seen));
        }
        match form.record(py, &seen)? {
            Some(record) => records.push(record),
            None => return Ok(Some(seen)),
        }
    }
    Ok(None)
}

/// What a scan has read: the change records, bounds and ends of the whole transactions.
struct Out<'py> {
    records: Vec<PyObject>,
    txns: Bound<'py, PyList>,
    ends: Vec<(u64, u64)>,
    last_lsn: Option<u64>,
}

impl Out<'_> {
    /// The scan's result, the transaction at records[start..] (opened by begin) not whole.
    fn result(self, py: Python<'_>, start: usize, begin: Option<Seen>, next: Option<PyObject>, last: &Seen)
              -> PyResult<Scanned> {
        let records = PyList::new(py, &self.records[..start])?.unbind();
        let partial = PyList::new(py, &self.records[start..])?.unbind();
        let begin = begin.map(|b| b.message(py)).transpose()?.unwrap_or_else(|| py.None());
        Ok((records, self.txns.unbind(), self.ends, self.last_lsn, partial, begin,
            next.unwrap_or_else(|| py.None()), last.message(py)?))
    }
}
