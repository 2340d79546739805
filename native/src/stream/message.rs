//! What every reader of a replication stream shares: a message read (`Seen`), the `Reads` a
//! scan pulls messages from, `Unpacked` (a message as a native reader gives it to Python), the
//! message kinds a scan looks for and the big-endian reads of a message's fields. The bottom of
//! `stream`: it uses no other module of the crate.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A transaction's first message (our plugin's BEGIN record, pgoutput's Begin).
pub(crate) const BEGIN: u8 = b'B';
/// A transaction's last message (our plugin's COMMIT record, pgoutput's Commit).
pub(crate) const COMMIT: u8 = b'C';

/// One record of a pack (or one message of a native reader) as a message: payload, its bytes;
/// data_start, its XLogData start.
#[pyclass(frozen)]
pub struct Unpacked {
    #[pyo3(get)]
    pub payload: Py<PyBytes>,
    #[pyo3(get)]
    pub data_start: u64,
}

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

    pub(crate) fn clone_ref(&self, py: Python<'_>) -> Seen {
        Seen { buf: self.buf.clone_ref(py), start: self.start, end: self.end, data_start: self.data_start,
               msg: self.msg.as_ref().map(|m| m.clone_ref(py)) }
    }

    /// The message as the reader gives it: the object read, or an Unpacked of the record.
    pub fn message(&self, py: Python<'_>) -> PyResult<PyObject> {
        if let Some(msg) = &self.msg {
            return Ok(msg.clone_ref(py));
        }
        let payload = PyBytes::new(py, self.bytes(py)).unbind();
        Ok(Py::new(py, Unpacked { payload, data_start: self.data_start })?.into_any())
    }
}

/// Where a scan reads: the next message, or None (the stream holds nothing now).
pub trait Reads {
    fn next_seen(&mut self, py: Python<'_>) -> PyResult<Option<Seen>>;
}

/// The big-endian u64 of bytes (8 of them).
pub(crate) fn be_u64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().unwrap())
}
