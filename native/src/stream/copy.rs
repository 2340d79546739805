//! Reading a started replication stream (CopyBoth) with the libpq psycopg2 itself uses, on
//! psycopg2's own connection, without a Python object per message: the native twin of a
//! replication cursor's read_message for the relay's logical source.
//!
//! psycopg2's read_message builds a ReplicationMessage per message (about 2 µs), and its
//! keepalive handling moves the flush position to a keepalive's WAL end once the confirmed
//! position reaches the last message's start (pgshovel2.relay.feedback_keeper). This reader
//! never moves a position: it only reads. Feedback stays psycopg2's (cursor.send_feedback), so
//! what is confirmed is only what the relay confirmed. A keepalive that asks for a reply gets one
//! through the feedback callable given; others are skipped.
//!
//! libpq is found through psycopg2's extension module (dlopen with RTLD_NOLOAD, dlsym over its
//! dependencies), so both use one libpq and one PGconn. Every call holds the GIL, as psycopg2's
//! do: no other thread's psycopg2 call runs on the connection meanwhile.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::message::{be_u64, Reads, Seen, Unpacked};

type GetCopyData = unsafe extern "C" fn(*mut c_void, *mut *mut c_char, c_int) -> c_int;
type ConnFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type FreeMem = unsafe extern "C" fn(*mut c_void);
type ErrorMessage = unsafe extern "C" fn(*const c_void) -> *const c_char;
type GetResult = unsafe extern "C" fn(*mut c_void) -> *mut c_void;

/// The libpq functions the reader calls.
#[derive(Clone, Copy)]
struct Libpq {
    get_copy_data: GetCopyData,
    consume_input: ConnFn,
    freemem: FreeMem,
    error_message: ErrorMessage,
    get_result: GetResult,
    result_error_message: ErrorMessage,
    clear: FreeMem,
}

fn dl_error() -> String {
    let err = unsafe { libc::dlerror() };
    if err.is_null() { "unknown error".into() } else { unsafe { CStr::from_ptr(err) }.to_string_lossy().into_owned() }
}

impl Libpq {
    /// libpq's functions as the shared object at path (loaded already: psycopg2's extension
    /// module) resolves them. Err: what is missing, for the error message.
    fn of(path: &str) -> Result<Libpq, String> {
        let cpath = CString::new(path).map_err(|_| format!("{path}: a NUL in the path"))?;
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return Err(format!("{path} is not loaded: {}", dl_error()));
        }
        let sym = |name: &str| -> Result<*mut c_void, String> {
            let cname = CString::new(name).unwrap();
            let ptr = unsafe { libc::dlsym(handle, cname.as_ptr()) };
            if ptr.is_null() { Err(format!("{name} not found through {path}: {}", dl_error())) } else { Ok(ptr) }
        };
        // SAFETY: each symbol is libpq's function of that name, with the signature libpq-fe.h gives.
        unsafe {
            Ok(Libpq {
                get_copy_data: std::mem::transmute::<*mut c_void, GetCopyData>(sym("PQgetCopyData")?),
                consume_input: std::mem::transmute::<*mut c_void, ConnFn>(sym("PQconsumeInput")?),
                freemem: std::mem::transmute::<*mut c_void, FreeMem>(sym("PQfreemem")?),
                error_message: std::mem::transmute::<*mut c_void, ErrorMessage>(sym("PQerrorMessage")?),
                get_result: std::mem::transmute::<*mut c_void, GetResult>(sym("PQgetResult")?),
                result_error_message: std::mem::transmute::<*mut c_void, ErrorMessage>(sym("PQresultErrorMessage")?),
                clear: std::mem::transmute::<*mut c_void, FreeMem>(sym("PQclear")?),
            })
        }
    }
}

/// What PQgetCopyData gave: a message's bytes, freed by PQfreemem when dropped.
struct Copied<'a> {
    pq: &'a Libpq,
    ptr: *mut c_char,
    len: usize,
}

impl Copied<'_> {
    fn bytes(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Copied<'_> {
    fn drop(&mut self) {
        unsafe { (self.pq.freemem)(self.ptr as *mut c_void) }
    }
}

const XLOG_DATA_HEADER: usize = 1 + 8 + 8 + 8; // 'w', data start, WAL end, send time
const KEEPALIVE_SIZE: usize = 1 + 8 + 8 + 1; // 'k', WAL end, send time, reply requested

/// The replication stream of a psycopg2 connection whose replication has started. Calling it
/// (or read()) gives the next XLogData message as an Unpacked (payload: the message's data;
/// data_start: its XLogData start LSN), or None when the stream holds nothing now.
///
/// connection: the psycopg2 connection (kept alive; every read checks it is open, as its
/// PGconn is freed when it closes). error: the exception class raised, with libpq's message,
/// when the stream breaks or ends (psycopg2.OperationalError). feedback: called without
/// arguments when a keepalive asks for a reply (cursor.send_feedback(force=True)).
#[pyclass]
pub struct CopyReader {
    pq: Libpq,
    conn: usize,
    connection: PyObject,
    error: PyObject,
    feedback: PyObject,
    /// The WAL end of the last message or keepalive read (0: none yet).
    #[pyo3(get)]
    wal_end: u64,
}

#[pymethods]
impl CopyReader {
    /// module_path: psycopg2's extension module (psycopg2._psycopg.__file__), through which
    /// libpq is found. Raises ImportError when it is not loaded or libpq's functions are not
    /// found through it.
    #[new]
    fn new(py: Python<'_>, module_path: &str, connection: PyObject, error: PyObject, feedback: PyObject)
           -> PyResult<Self> {
        let pq = Libpq::of(module_path).map_err(pyo3::exceptions::PyImportError::new_err)?;
        let conn: usize = connection.getattr(py, "pgconn_ptr")?.extract(py)?;
        Ok(CopyReader { pq, conn, connection, error, feedback, wal_end: 0 })
    }

    fn __call__(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        self.read(py)
    }

    /// The next XLogData message (an Unpacked), or None. Raises error when the connection is
    /// closed or the stream broke or ended.
    fn read(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        self.check_open(py)?;
        match self.next_message(py)? {
            Some((payload, data_start)) => Ok(Py::new(py, Unpacked { payload, data_start })?.into_any()),
            None => Ok(py.None()),
        }
    }
}

impl CopyReader {
    /// Raises error when the psycopg2 connection is closed (its PGconn is gone).
    pub fn check_open(&self, py: Python<'_>) -> PyResult<()> {
        let closed: i64 = self.connection.getattr(py, "closed")?.extract(py)?;
        if closed != 0 {
            return Err(self.failure(py, "the replication connection is closed".into()));
        }
        Ok(())
    }

    fn failure(&self, py: Python<'_>, message: String) -> PyErr {
        match self.error.call1(py, (message,)) {
            Ok(exc) => PyErr::from_value(exc.into_bound(py)),
            Err(err) => err,
        }
    }

    fn conn_error(&self, py: Python<'_>, what: &str) -> PyErr {
        let text = unsafe { CStr::from_ptr((self.pq.error_message)(self.conn as *const c_void)) };
        let text = text.to_string_lossy();
        self.failure(py, format!("{what}: {}", if text.trim().is_empty() { "no message from libpq" } else { text.trim() }))
    }

    /// The end of the stream (PQgetCopyData gave -1): the server's error, if it sent one.
    fn ended(&self, py: Python<'_>) -> PyErr {
        let conn = self.conn as *mut c_void;
        let result = unsafe { (self.pq.get_result)(conn) };
        if result.is_null() {
            return self.conn_error(py, "the replication stream ended");
        }
        let text = unsafe { CStr::from_ptr((self.pq.result_error_message)(result)) }.to_string_lossy().into_owned();
        unsafe { (self.pq.clear)(result) };
        let text = text.trim();
        self.failure(py, format!("the replication stream ended: {}",
                                 if text.is_empty() { "the server ended the copy" } else { text }))
    }

    /// The next XLogData message's (data, start LSN), or None when the stream holds nothing now.
    /// Reads the socket once at most (as psycopg2 does: libpq's buffer does not grow past what
    /// is processed). Keepalives are skipped; one that asks for a reply calls feedback.
    pub fn next_message(&mut self, py: Python<'_>) -> PyResult<Option<(Py<PyBytes>, u64)>> {
        let conn = self.conn as *mut c_void;
        let mut consumed = false;
        loop {
            let mut ptr: *mut c_char = std::ptr::null_mut();
            let len = unsafe { (self.pq.get_copy_data)(conn, &mut ptr, 1) };
            match len {
                0 if consumed => return Ok(None),
                0 => {
                    if unsafe { (self.pq.consume_input)(conn) } == 0 {
                        return Err(self.conn_error(py, "reading the replication stream failed"));
                    }
                    consumed = true;
                    continue;
                }
                -1 => return Err(self.ended(py)),
                n if n < 0 => return Err(self.conn_error(py, "reading the replication stream failed")),
                _ => {}
            }
            consumed = true;
            let copied = Copied { pq: &self.pq, ptr, len: len as usize };
            match copy_data(copied.bytes()) {
                CopyData::XLogData { start, wal_end, data } => {
                    self.wal_end = wal_end;
                    let payload = PyBytes::new(py, data).unbind();
                    return Ok(Some((payload, start)));
                }
                CopyData::Keepalive { wal_end, reply } => {
                    self.wal_end = wal_end;
                    drop(copied);
                    if reply {
                        self.feedback.call0(py)?;
                    }
                }
                CopyData::Other { kind, size } => {
                    return Err(self.failure(py, format!(
                        "unrecognized replication message: type {:?}, {} bytes", kind as char, size)));
                }
            }
        }
    }
}

/// A CopyData message of a replication stream (PostgreSQL's streaming replication protocol).
#[derive(Debug, PartialEq)]
enum CopyData<'a> {
    /// XLogData ('w'): the start LSN of its data, the server's WAL end, and the data (not empty).
    XLogData { start: u64, wal_end: u64, data: &'a [u8] },
    /// A primary keepalive ('k'): the server's WAL end, and whether it asks for a reply now.
    Keepalive { wal_end: u64, reply: bool },
    /// Anything else (another type, or one too short): its type byte and its size.
    Other { kind: u8, size: usize },
}

/// What a message of PQgetCopyData is.
fn copy_data(data: &[u8]) -> CopyData<'_> {
    match data.first() {
        Some(b'w') if data.len() > XLOG_DATA_HEADER => CopyData::XLogData {
            start: be_u64(&data[1..9]), wal_end: be_u64(&data[9..17]), data: &data[XLOG_DATA_HEADER..] },
        Some(b'k') if data.len() >= KEEPALIVE_SIZE => CopyData::Keepalive {
            wal_end: be_u64(&data[1..9]), reply: data[KEEPALIVE_SIZE - 1] != 0 },
        kind => CopyData::Other { kind: kind.copied().unwrap_or(0), size: data.len() },
    }
}

impl Reads for CopyReader {
    fn next_seen(&mut self, py: Python<'_>) -> PyResult<Option<Seen>> {
        Ok(self.next_message(py)?.map(|(buf, data_start)| {
            let end = buf.bind(py).as_bytes().len();
            Seen { buf, start: 0, end, data_start, msg: None }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xlog(start: u64, wal_end: u64, data: &[u8]) -> Vec<u8> {
        let mut out = vec![b'w'];
        out.extend_from_slice(&start.to_be_bytes());
        out.extend_from_slice(&wal_end.to_be_bytes());
        out.extend_from_slice(&7u64.to_be_bytes()); // send time
        out.extend_from_slice(data);
        out
    }

    fn keepalive(wal_end: u64, reply: u8) -> Vec<u8> {
        let mut out = vec![b'k'];
        out.extend_from_slice(&wal_end.to_be_bytes());
        out.extend_from_slice(&7u64.to_be_bytes());
        out.push(reply);
        out
    }

    #[test]
    fn xlog_data() {
        let msg = xlog(0x1_0000_0028, 0x1_0000_0100, b"B\x00\x01");
        assert_eq!(copy_data(&msg), CopyData::XLogData { start: 0x1_0000_0028, wal_end: 0x1_0000_0100, data: b"B\x00\x01" });
    }

    #[test]
    fn keepalives() {
        assert_eq!(copy_data(&keepalive(0x2_0000_0000, 1)), CopyData::Keepalive { wal_end: 0x2_0000_0000, reply: true });
        assert_eq!(copy_data(&keepalive(5, 0)), CopyData::Keepalive { wal_end: 5, reply: false });
    }

    #[test]
    fn short_or_unknown_messages() {
        let empty_data = xlog(1, 2, b"");
        assert_eq!(copy_data(&empty_data), CopyData::Other { kind: b'w', size: XLOG_DATA_HEADER });
        let cut = keepalive(5, 1);
        for end in 1..cut.len() {
            assert_eq!(copy_data(&cut[..end]), CopyData::Other { kind: b'k', size: end });
        }
        assert_eq!(copy_data(b"x123"), CopyData::Other { kind: b'x', size: 4 });
        assert_eq!(copy_data(b""), CopyData::Other { kind: 0, size: 0 });
    }
}
