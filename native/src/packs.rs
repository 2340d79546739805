//! Packs of our output plugin's records (record format 4, sql/decoder/README.rst): a message
//! `P` holding a transaction's records, each after its length (4 bytes, big-endian). The
//! native twin of pgshovel2.relay.record_decoder.PackReader (same messages, same errors), and
//! the scan of whole small transactions RecordDecoder.txn_run makes in Python (txn_scan), without
//! a Python object per BEGIN, COMMIT or pack record.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

const PACK: u8 = b'P';
const BEGIN: u8 = b'B';
const COMMIT: u8 = b'C';
/// A change record's flag: values left out of its row (unchanged TOASTed values).
const FLAG_UNCHANGED: u8 = 4;
/// µs from the Unix epoch to PostgreSQL's (2000-01-01): a BEGIN record's commit time is from there.
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// One record of a pack as a message: payload, the record; data_start, the pack's XLogData start.
#[pyclass(frozen)]
pub struct Unpacked {
    #[pyo3(get)]
    payload: Py<PyBytes>,
    #[pyo3(get)]
    data_start: u64,
}

/// A message read: bytes buf[start..end] (a record of a pack, or a whole message), its XLogData
/// start, and msg, the message object when it was not a pack's record.
struct Seen {
    buf: Py<PyBytes>,
    start: usize,
    end: usize,
    data_start: u64,
    msg: Option<PyObject>,
}

impl Seen {
    fn bytes<'a>(&'a self, py: Python<'a>) -> &'a [u8] {
        &self.buf.bind(py).as_bytes()[self.start..self.end]
    }

    fn clone_ref(&self, py: Python<'_>) -> Seen {
        Seen { buf: self.buf.clone_ref(py), start: self.start, end: self.end, data_start: self.data_start,
               msg: self.msg.as_ref().map(|m| m.clone_ref(py)) }
    }

    /// The message as read() gives it: the object read, or an Unpacked of the record.
    fn message(&self, py: Python<'_>) -> PyResult<PyObject> {
        if let Some(msg) = &self.msg {
            return Ok(msg.clone_ref(py));
        }
        let payload = PyBytes::new(py, self.bytes(py)).unbind();
        Ok(Py::new(py, Unpacked { payload, data_start: self.data_start })?.into_any())
    }
}

/// What txn_scan read: (records, txns, ends, last_lsn, partial, begin, next, last); see txn_scan.
type Scanned = (Py<PyList>, Py<PyList>, Vec<(u64, u64)>, Option<u64>, Py<PyList>, PyObject, PyObject, PyObject);

/// Reads a replication stream of our plugin one record at a time: read() gives the next message
/// of read_message() (None: the stream holds nothing now), a pack opened into its records first.
#[pyclass]
pub struct PackReader {
    read_message: PyObject,
    error: PyObject,
    /// The pack being read, its XLogData start and where its next record's length is.
    pack: Option<Py<PyBytes>>,
    data_start: u64,
    pos: usize,
}

#[pymethods]
impl PackReader {
    /// error: the exception class raised (with its message) for a pack that ends inside a record.
    #[new]
    fn new(read_message: PyObject, error: PyObject) -> Self {
        PackReader { read_message, error, pack: None, data_start: 0, pos: 0 }
    }

    /// The next record (a message, or an Unpacked of a pack), or None. Raises error when a pack
    /// ends inside a record.
    fn read(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        match self.next_seen(py)? {
            Some(seen) => seen.message(py),
            None => Ok(py.None()),
        }
    }

    /// RecordDecoder.txn_run's reads, for a decoder that holds no layout: from first (a message
    /// read, a BEGIN record whose commit LSN is above committed) the whole transactions the stream
    /// holds whose every change is a lane record (an I/U/D record without unchanged values, of a
    /// table whose index is not in exclude), run_max change records at most. After a COMMIT whose
    /// message starts at or below confirmed (the slot's confirmed position: a keepalive read next
    /// could confirm what is not in Kafka) the stream is not read on. last_lsn: the end of the
    /// last transaction before (the decoder's). bounds: the class of a transaction's bounds
    /// (TxnBounds), made with (start, stop, txid, ts_ms, ts_us, last_lsn, prefix, 0, unit).
    ///
    /// Gives (records, txns, ends, last_lsn, partial, begin, next, last): the whole transactions'
    /// change records and bounds, their (commit LSN, end LSN) and the end of the last one (else
    /// last_lsn as given); the change records read of the transaction after them and its BEGIN
    /// message (None: none unfinished); the message that ended the reads (None: the stream held no
    /// more) and the last message read. Raises error when a pack ends inside a record.
    #[allow(clippy::too_many_arguments)]
    fn txn_scan(&mut self, py: Python<'_>, first: PyObject, committed: u64, run_max: usize, confirmed: u64,
                last_lsn: Option<u64>, exclude: Vec<u16>, bounds: PyObject) -> PyResult<Scanned> {
        let mut scan = Scan { records: Vec::new(), txns: PyList::empty(py), ends: Vec::new(), last_lsn };
        let first = self.seen_of(py, first)?;
        let mut last = first.clone_ref(py);
        let mut msg = Some(first);
        while let Some(begin) = msg.take() {
            last = begin.clone_ref(py);
            let Some((unit, txid, ts_us)) = begin_fields(begin.bytes(py)).filter(|f| f.0 > committed) else {
                msg = Some(begin);
                break;
            };
            let start = scan.records.len();
            let ended = self.changes(py, &mut scan.records, run_max, &exclude, &mut last)?;
            let whole = ended.as_ref().and_then(|m| commit_end(m.bytes(py))).filter(|_| scan.records.len() > start);
            let Some(end_lsn) = whole else {
                let next = msg_of(py, ended)?;
                return scan.unfinished(py, start, Some(begin), next, &last);
            };
            let commit_start = ended.map_or(0, |commit| commit.data_start);
            let ts_us = ts_us + PG_EPOCH_US;
            let txn = (start, scan.records.len(), txid, ts_us.div_euclid(1000), ts_us, scan.last_lsn,
                       format!("{unit:016X}:"), 0u64, unit);
            scan.txns.append(bounds.call1(py, txn)?)?;
            scan.ends.push((unit, end_lsn));
            scan.last_lsn = Some(end_lsn);
            msg = if commit_start > confirmed { self.next_seen(py)? } else { None };
        }
        let next = msg.as_ref().map(|m| m.message(py)).transpose()?;
        let whole = scan.records.len();
        scan.unfinished(py, whole, None, next, &last)
    }
}

/// What a txn_scan has read: the change records, bounds and ends of the whole transactions.
struct Scan<'py> {
    records: Vec<Py<PyBytes>>,
    txns: Bound<'py, PyList>,
    ends: Vec<(u64, u64)>,
    last_lsn: Option<u64>,
}

impl Scan<'_> {
    /// The scan's result when the transaction at records[start..] (opened by begin) is not whole.
    fn unfinished(self, py: Python<'_>, start: usize, begin: Option<Seen>, next: Option<PyObject>, last: &Seen)
                  -> PyResult<Scanned> {
        let records = PyList::new(py, &self.records[..start])?.unbind();
        let partial = PyList::new(py, &self.records[start..])?.unbind();
        let begin = begin.map(|b| b.message(py)).transpose()?.unwrap_or_else(|| py.None());
        Ok((records, self.txns.unbind(), self.ends, self.last_lsn, partial, begin,
            next.unwrap_or_else(|| py.None()), last.message(py)?))
    }
}

/// (commit LSN, txid, commit time in µs since 2000) of a BEGIN record, or None (no BEGIN).
fn begin_fields(data: &[u8]) -> Option<(u64, u64, i64)> {
    if data.len() < 25 || data[0] != BEGIN {
        return None;
    }
    Some((be_u64(&data[1..9]), be_u64(&data[9..17]), be_u64(&data[17..25]) as i64))
}

/// The end LSN of a COMMIT record, or None (no COMMIT).
fn commit_end(data: &[u8]) -> Option<u64> {
    (data.len() >= 21 && data[0] == COMMIT).then(|| be_u64(&data[9..17]))
}

fn be_u64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().unwrap())
}

/// Whether a change record may go to the lane: I/U/D, no unchanged values, table not excluded.
fn lane_change(data: &[u8], exclude: &[u16]) -> bool {
    data.len() >= 16 && matches!(data[0], b'I' | b'U' | b'D') && data[11] & FLAG_UNCHANGED == 0
        && !exclude.contains(&u16::from_be_bytes([data[9], data[10]]))
}

fn msg_of(py: Python<'_>, seen: Option<Seen>) -> PyResult<Option<PyObject>> {
    seen.map(|s| s.message(py)).transpose()
}

impl PackReader {
    /// Reads a transaction's change records into records (run_max in all at most), last the last
    /// message read: the message that ended them (a COMMIT if the transaction is whole), or None
    /// when the stream held no more.
    fn changes(&mut self, py: Python<'_>, records: &mut Vec<Py<PyBytes>>, run_max: usize, exclude: &[u16],
               last: &mut Seen) -> PyResult<Option<Seen>> {
        while let Some(seen) = self.next_seen(py)? {
            *last = seen.clone_ref(py);
            let data = seen.bytes(py);
            if !lane_change(data, exclude) || records.len() == run_max {
                return Ok(Some(seen));
            }
            records.push(PyBytes::new(py, data).unbind());
        }
        Ok(None)
    }

    /// A message object as read: its payload and data_start (a pack's records are not opened).
    fn seen_of(&self, py: Python<'_>, msg: PyObject) -> PyResult<Seen> {
        let buf: Py<PyBytes> = msg.getattr(py, "payload")?.extract(py)?;
        let data_start: u64 = msg.getattr(py, "data_start")?.extract(py)?;
        let end = buf.bind(py).as_bytes().len();
        Ok(Seen { buf, start: 0, end, data_start, msg: Some(msg) })
    }

    /// The next record of the pack being read, else the next message of read_message() (a pack's
    /// first record), or None (the stream holds nothing now).
    fn next_seen(&mut self, py: Python<'_>) -> PyResult<Option<Seen>> {
        loop {
            if let Some(pack) = &self.pack {
                let bytes = pack.bind(py).as_bytes();
                if self.pos < bytes.len() {
                    let start = self.pos + 4;
                    let end = start + u32::from_be_bytes(bytes[self.pos..start].try_into().unwrap()) as usize;
                    self.pos = end;
                    return Ok(Some(Seen { buf: pack.clone_ref(py), start, end, data_start: self.data_start, msg: None }));
                }
                self.pack = None;
            }
            let msg = self.read_message.call0(py)?;
            if msg.is_none(py) {
                return Ok(None);
            }
            let seen = self.seen_of(py, msg)?;
            if seen.bytes(py).first() != Some(&PACK) {
                return Ok(Some(seen));
            }
            self.open(py, seen.buf, seen.data_start)?;
        }
    }

    /// Make pack (its P byte first) the pack being read, from data_start, once every record in it
    /// is whole (the Python reader raises before giving any record of a pack cut short).
    fn open(&mut self, py: Python<'_>, pack: Py<PyBytes>, data_start: u64) -> PyResult<()> {
        let bytes = pack.bind(py).as_bytes();
        let mut pos = 1;
        while pos < bytes.len() {
            let start = pos + 4;
            if start > bytes.len() {
                return Err(self.cut(py, bytes.len()));
            }
            pos = start + u32::from_be_bytes(bytes[pos..start].try_into().unwrap()) as usize;
            if pos > bytes.len() {
                return Err(self.cut(py, bytes.len()));
            }
        }
        (self.pack, self.data_start, self.pos) = (Some(pack), data_start, 1);
        Ok(())
    }

    /// The error for a pack of size bytes cut inside a record, as the Python reader words it.
    fn cut(&self, py: Python<'_>, size: usize) -> PyErr {
        let text = format!("a pack from output plugin pgshovel2_decoder ends inside a record ({size} bytes)");
        match self.error.call1(py, (text,)) {
            Ok(exc) => PyErr::from_value(exc.into_bound(py)),
            Err(err) => err,
        }
    }
}
