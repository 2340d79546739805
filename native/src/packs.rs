//! Packs of our output plugin's records (record format 4, sql/decoder/README.rst): a message
//! `P` holding a transaction's records, each after its length (4 bytes, big-endian). The
//! native twin of pgshovel2.relay.record_decoder.PackReader (same messages, same errors), with
//! RecordDecoder.txn_run's scan of whole small transactions over it (txn_scan, crate::scan).

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::scan::{scan, Limits, Plugin, Reads, Scanned, Seen};

const PACK: u8 = b'P';

/// One record of a pack as a message: payload, the record; data_start, the pack's XLogData start.
#[pyclass(frozen)]
pub struct Unpacked {
    #[pyo3(get)]
    pub payload: Py<PyBytes>,
    #[pyo3(get)]
    pub data_start: u64,
}

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

    /// RecordDecoder.txn_run's reads, for a decoder that holds no layout, from first (a message
    /// read, a BEGIN record) within (committed, run_max, confirmed, last_lsn, bounds) as
    /// scan::Limits says; a change record is a lane record when it is an I/U/D record without
    /// unchanged values of a table whose index is not in exclude. Gives scan::Scanned's (records,
    /// txns, ends, last_lsn, partial, begin, next, last). Raises error when a pack ends inside a
    /// record.
    #[allow(clippy::too_many_arguments)]
    fn txn_scan(&mut self, py: Python<'_>, first: PyObject, committed: u64, run_max: usize, confirmed: u64,
                last_lsn: Option<u64>, exclude: Vec<u16>, bounds: PyObject) -> PyResult<Scanned> {
        let limits = Limits { committed, run_max, confirmed, last_lsn, bounds };
        scan(py, self, &mut Plugin { exclude }, first, limits)
    }
}

impl Reads for PackReader {
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
            let seen = Seen::of(py, msg)?;
            if seen.bytes(py).first() != Some(&PACK) {
                return Ok(Some(seen));
            }
            self.open(py, seen.buf, seen.data_start)?;
        }
    }
}

impl PackReader {
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
