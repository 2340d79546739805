//! Packs of our output plugin's records (record format 4, sql/decoder/README.rst): a message
//! `P` holding a transaction's records, each after its length (4 bytes, big-endian). The
//! native twin of pgshovel2.relay.record_decoder.PackReader (same messages, same errors).

use std::collections::VecDeque;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

const PACK: u8 = b'P';

/// One record of a pack as a message: payload, the record; data_start, the pack's XLogData start.
#[pyclass(frozen)]
pub struct Unpacked {
    #[pyo3(get)]
    payload: Py<PyBytes>,
    #[pyo3(get)]
    data_start: u64,
}

/// Reads a replication stream of our plugin one record at a time: read() gives the next message
/// of read_message() (None: the stream holds nothing now), a pack opened into its records first.
#[pyclass]
pub struct PackReader {
    read_message: PyObject,
    error: PyObject,
    records: VecDeque<Py<Unpacked>>,
}

#[pymethods]
impl PackReader {
    /// error: the exception class raised (with its message) for a pack that ends inside a record.
    #[new]
    fn new(read_message: PyObject, error: PyObject) -> Self {
        PackReader { read_message, error, records: VecDeque::new() }
    }

    /// The next record (a message, or an Unpacked of a pack), or None. Raises error when a pack
    /// ends inside a record.
    fn read(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        loop {
            if let Some(record) = self.records.pop_front() {
                return Ok(record.into_any());
            }
            let msg = self.read_message.call0(py)?;
            if msg.is_none(py) {
                return Ok(msg);
            }
            let payload = msg.getattr(py, "payload")?;
            let bytes = payload.downcast_bound::<PyBytes>(py)?.as_bytes();
            if bytes.first() != Some(&PACK) {
                return Ok(msg);
            }
            let data_start: u64 = msg.getattr(py, "data_start")?.extract(py)?;
            self.open(py, bytes, data_start)?;
        }
    }
}

impl PackReader {
    /// Queue the records of pack (its P byte first) as Unpacked messages starting at data_start.
    fn open(&mut self, py: Python<'_>, pack: &[u8], data_start: u64) -> PyResult<()> {
        let mut pos = 1;
        while pos < pack.len() {
            let start = pos + 4;
            if start > pack.len() {
                return Err(self.cut(py, pack.len()));
            }
            let len = u32::from_be_bytes(pack[pos..start].try_into().unwrap()) as usize;
            pos = start + len;
            if pos > pack.len() {
                return Err(self.cut(py, pack.len()));
            }
            let payload = PyBytes::new(py, &pack[start..pos]).unbind();
            self.records.push_back(Py::new(py, Unpacked { payload, data_start })?);
        }
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
