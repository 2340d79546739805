//! The scan of whole small transactions a logical decoder's txn_run makes in Python
//! (RecordDecoder.txn_run for our plugin's records, PgoutputDecoder.txn_run for pgoutput's
//! messages), for the relay's TxnRuns: the same reads and results, without a Python object per
//! BEGIN and COMMIT (nor per record of our plugin's packs) and with the keepalive check at each
//! COMMIT a comparison with the slot's confirmed position.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::copy::CopyReader;

/// µs from the Unix epoch to PostgreSQL's (2000-01-01): both BEGINs' commit times are from there.
const PG_EPOCH_US: i64 = 946_684_800_000_000;
const BEGIN: u8 = b'B';
const COMMIT: u8 = b'C';

/// A message read: bytes buf[start..end] (a record of a pack, or a whole message), its XLogData
/// start, and msg, the message object when it was not a pack's record.
pub struct Seen {
    pub buf: Py<PyBytes>,
    pub start: usize,
    pub end: usize,
    pub data_start: u64,
    pub msg: Option<PyObject>,
}

impl Seen {
    /// A message object as read: its payload and data_start.
    pub fn of(py: Python<'_>, msg: PyObject) -> PyResult<Seen> {
        let buf: Py<PyBytes> = msg.getattr(py, "payload")?.extract(py)?;
        let data_start: u64 = msg.getattr(py, "data_start")?.extract(py)?;
        let end = buf.bind(py).as_bytes().len();
        Ok(Seen { buf, start: 0, end, data_start, msg: Some(msg) })
    }

    pub fn bytes<'a>(&'a self, py: Python<'a>) -> &'a [u8] {
        &self.buf.bind(py).as_bytes()[self.start..self.end]
    }

    fn clone_ref(&self, py: Python<'_>) -> Seen {
        Seen { buf: self.buf.clone_ref(py), start: self.start, end: self.end, data_start: self.data_start,
               msg: self.msg.as_ref().map(|m| m.clone_ref(py)) }
    }

    /// The message as the reader gives it: the object read, or an Unpacked of the record.
    pub fn message(&self, py: Python<'_>) -> PyResult<PyObject> {
        if let Some(msg) = &self.msg {
            return Ok(msg.clone_ref(py));
        }
        let payload = PyBytes::new(py, self.bytes(py)).unbind();
        Ok(Py::new(py, crate::packs::Unpacked { payload, data_start: self.data_start })?.into_any())
    }
}

/// Where a scan reads: the next message, or None (the stream holds nothing now).
pub trait Reads {
    fn next_seen(&mut self, py: Python<'_>) -> PyResult<Option<Seen>>;
}

/// A replication cursor's read_message (pgoutput's messages, one per message).
struct Cursor<'a>(&'a PyObject);

impl Reads for Cursor<'_> {
    fn next_seen(&mut self, py: Python<'_>) -> PyResult<Option<Seen>> {
        let msg = self.0.call0(py)?;
        if msg.is_none(py) { Ok(None) } else { Seen::of(py, msg).map(Some) }
    }
}

/// The stream's form: what its BEGIN, change and COMMIT messages hold.
pub trait Form {
    /// (commit LSN, txid, commit time in µs since 2000) of a BEGIN message, or None (no BEGIN).
    fn begin(&self, data: &[u8]) -> Option<(u64, u64, i64)>;
    /// The lane record of a change message, or None (not one the lane may take).
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
/// takes as a lane record, within limits.
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
                   crate::json::lsn_prefix(unit), 0u64, unit);
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

/// The big-endian u64 of bytes (8 of them).
pub(crate) fn be_u64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().unwrap())
}

/// Our plugin's records (record format 4): a change is a lane record (the record's bytes) when
/// it is an I/U/D record without unchanged values of a table whose index is not in exclude.
pub struct Plugin {
    pub exclude: Vec<u16>,
}

/// A change record's flag: values left out of its row (unchanged TOASTed values).
const FLAG_UNCHANGED: u8 = 4;

impl Form for Plugin {
    fn begin(&self, data: &[u8]) -> Option<(u64, u64, i64)> {
        (data.len() >= 25 && data[0] == BEGIN)
            .then(|| (be_u64(&data[1..9]), be_u64(&data[9..17]), be_u64(&data[17..25]) as i64))
    }

    fn record(&mut self, py: Python<'_>, seen: &Seen) -> PyResult<Option<PyObject>> {
        let data = seen.bytes(py);
        let lane = data.len() >= 16 && matches!(data[0], b'I' | b'U' | b'D') && data[11] & FLAG_UNCHANGED == 0
            && !self.exclude.contains(&u16::from_be_bytes([data[9], data[10]]));
        Ok(lane.then(|| PyBytes::new(py, data).into_any().unbind()))
    }

    fn commit(&self, data: &[u8], unit: u64) -> Option<(u64, u64)> {
        (data.len() >= 21 && data[0] == COMMIT).then(|| (unit, be_u64(&data[9..17])))
    }
}

/// pgoutput's messages: a change is a lane record (PgoutputDecoder.lane_record's (native, index,
/// data, lsn, relation)) when its relation (in relations, oid -> the decoder's MappedRelation) has a
/// native decoder and a table outside subset. xid_ref: the decoder's reference full xid.
struct Pgoutput<'py> {
    relations: Bound<'py, PyAny>,
    subset: Bound<'py, PyAny>,
    xid_ref: i64,
    /// Per relation oid read: (native, index, relation), or None (not the lane's).
    known: HashMap<u32, Option<(PyObject, PyObject, PyObject)>>,
}

impl Pgoutput<'_> {
    fn relation(&self, oid: u32) -> PyResult<Option<(PyObject, PyObject, PyObject)>> {
        let rel = self.relations.call_method1("get", (oid,))?;
        if rel.is_none() {
            return Ok(None);
        }
        let native = rel.getattr("native")?;
        if native.is_none() || (self.subset.len()? > 0 && self.subset.contains(rel.getattr("tag")?)?) {
            return Ok(None);
        }
        Ok(Some((native.unbind(), rel.getattr("index")?.unbind(), rel.unbind())))
    }
}

impl Form for Pgoutput<'_> {
    fn begin(&self, data: &[u8]) -> Option<(u64, u64, i64)> {
        if data.len() < 21 || data[0] != BEGIN {
            return None;
        }
        let xid = u32::from_be_bytes(data[17..21].try_into().unwrap()) as i64;
        let delta = (xid - self.xid_ref) & 0xFFFF_FFFF;
        let txid = self.xid_ref + if delta >= 1 << 31 { delta - (1 << 32) } else { delta };
        Some((be_u64(&data[1..9]), txid as u64, be_u64(&data[9..17]) as i64))
    }

    fn record(&mut self, py: Python<'_>, seen: &Seen) -> PyResult<Option<PyObject>> {
        let data = seen.bytes(py);
        if data.len() < 5 || !matches!(data[0], b'I' | b'U' | b'D') {
            return Ok(None);
        }
        let oid = u32::from_be_bytes(data[1..5].try_into().unwrap());
        if !self.known.contains_key(&oid) {
            let rel = self.relation(oid)?;
            self.known.insert(oid, rel);
        }
        let Some((native, index, rel)) = &self.known[&oid] else { return Ok(None) };
        let items = [native.clone_ref(py), index.clone_ref(py), seen.buf.clone_ref(py).into_any(),
                     seen.data_start.into_pyobject(py)?.into_any().unbind(), rel.clone_ref(py)];
        Ok(Some(PyTuple::new(py, items)?.into_any().unbind()))
    }

    fn commit(&self, data: &[u8], _unit: u64) -> Option<(u64, u64)> {
        (data.len() >= 26 && data[0] == COMMIT).then(|| (be_u64(&data[2..10]), be_u64(&data[10..18])))
    }
}

/// PgoutputDecoder.txn_run's reads from first (pgoutput's Begin, a message of read_message: a
/// replication cursor's, or a crate::copy::CopyReader, read without a Python call per message)
/// within (committed, run_max, confirmed, last_lsn, bounds) as Limits says;
/// relations, subset and xid_ref: the decoder's relations by oid, subset_tags and reference full
/// xid. Gives Scanned's (records, txns, ends, last_lsn, partial, begin, next, last).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn pgoutput_scan<'py>(py: Python<'py>, read_message: Bound<'py, PyAny>, first: PyObject, committed: u64, run_max: usize,
                          confirmed: u64, last_lsn: Option<u64>, bounds: PyObject, relations: Bound<'py, PyAny>,
                          subset: Bound<'py, PyAny>, xid_ref: i64) -> PyResult<Scanned> {
    let mut form = Pgoutput { relations, subset, xid_ref, known: HashMap::new() };
    let limits = Limits { committed, run_max, confirmed, last_lsn, bounds };
    if let Ok(reader) = read_message.downcast::<CopyReader>() {
        let mut reader = reader.borrow_mut();
        reader.check_open(py)?;
        return scan(py, &mut *reader, &mut form, first, limits);
    }
    scan(py, &mut Cursor(read_message.as_unbound()), &mut form, first, limits)
}
