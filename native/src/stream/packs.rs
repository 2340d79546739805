//! Packs of our output plugin's records (record format 4, sql/decoder/README.rst): a message
//! `P` holding a transaction's records, each after its length (4 bytes, big-endian). The
//! native twin of pgshovel2.relay.record_decoder.PackReader (same messages, same errors), with
//! RecordDecoder.txn_run's scan of whole small transactions over it (txn_scan: scan.rs with
//! `Plugin`, our plugin's form of BEGIN, change and COMMIT records).

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::message::{be_u64, Reads, Seen, BEGIN, COMMIT};
use super::scan::{scan, Form, Limits, Scanned};

const PACK: u8 = b'P';

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
    /// scan::Limits says; a change record is a run record when it is an I/U/D record without
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
                    let (start, end) = record_at(bytes, self.pos);
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
        if !whole(bytes) {
            return Err(self.cut(py, bytes.len()));
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

/// (start, end) of the record whose length is at pos of a pack checked by whole.
fn record_at(pack: &[u8], pos: usize) -> (usize, usize) {
    let start = pos + 4;
    (start, start + u32::from_be_bytes(pack[pos..start].try_into().unwrap()) as usize)
}

/// Whether every record of a pack (its P byte first) is whole: its length and its bytes inside
/// the pack.
fn whole(pack: &[u8]) -> bool {
    let mut pos = 1;
    while pos < pack.len() {
        if pos + 4 > pack.len() {
            return false;
        }
        pos = record_at(pack, pos).1;
        if pos > pack.len() {
            return false;
        }
    }
    true
}

/// Our plugin's records (record format 4): a change is a run record (the record's bytes) when
/// it is an I/U/D record without unchanged values of a table whose index is not in exclude.
pub struct Plugin {
    pub exclude: Vec<u16>,
}

/// A change record's flag: values left out of its row (unchanged TOASTed values).
const FLAG_UNCHANGED: u8 = 4;

impl Plugin {
    /// Whether a change record is a run record: I/U/D, without unchanged values, of a table
    /// outside exclude.
    fn takes(&self, data: &[u8]) -> bool {
        data.len() >= 16 && matches!(data[0], b'I' | b'U' | b'D') && data[11] & FLAG_UNCHANGED == 0
            && !self.exclude.contains(&u16::from_be_bytes([data[9], data[10]]))
    }
}

impl Form for Plugin {
    fn begin(&self, data: &[u8]) -> Option<(u64, u64, i64)> {
        (data.len() >= 25 && data[0] == BEGIN)
            .then(|| (be_u64(&data[1..9]), be_u64(&data[9..17]), be_u64(&data[17..25]) as i64))
    }

    fn record(&mut self, py: Python<'_>, seen: &Seen) -> PyResult<Option<PyObject>> {
        let data = seen.bytes(py);
        Ok(self.takes(data).then(|| PyBytes::new(py, data).into_any().unbind()))
    }

    fn commit(&self, data: &[u8], unit: u64) -> Option<(u64, u64)> {
        (data.len() >= 21 && data[0] == COMMIT).then(|| (unit, be_u64(&data[9..17])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pack of records: P, then each record after its length.
    fn pack(records: &[&[u8]]) -> Vec<u8> {
        let mut out = vec![PACK];
        for r in records {
            out.extend_from_slice(&(r.len() as u32).to_be_bytes());
            out.extend_from_slice(r);
        }
        out
    }

    /// A change record (format 4's head: kind, LSN, table index, flags, row length) with its row.
    fn change(kind: u8, table: u16, flags: u8, row: &[u8]) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&0x1_0000_0028u64.to_be_bytes());
        out.extend_from_slice(&table.to_be_bytes());
        out.push(flags);
        out.extend_from_slice(&(row.len() as u32).to_be_bytes());
        out.extend_from_slice(row);
        out
    }

    #[test]
    fn records_of_a_pack() {
        let data = pack(&[b"first", b"", "日本".as_bytes()]);
        assert!(whole(&data));
        let mut pos = 1;
        let mut got = Vec::new();
        while pos < data.len() {
            let (start, end) = record_at(&data, pos);
            got.push(&data[start..end]);
            pos = end;
        }
        assert_eq!(got, [&b"first"[..], b"", "日本".as_bytes()]);
        assert!(whole(&pack(&[])));
    }

    #[test]
    fn a_pack_cut_inside_a_record_is_not_whole() {
        let data = pack(&[b"first", b"second"]);
        let ends = [1, 1 + 4 + 5, data.len()]; // between records
        for end in 1..=data.len() {
            assert_eq!(whole(&data[..end]), ends.contains(&end), "cut at {end}");
        }
    }

    #[test]
    fn plugin_form() {
        let plugin = Plugin { exclude: vec![3] };
        let mut begin = vec![BEGIN];
        for n in [0x1_0000_0028u64, 77, 820454400000000] {
            begin.extend_from_slice(&n.to_be_bytes());
        }
        assert_eq!(plugin.begin(&begin), Some((0x1_0000_0028, 77, 820454400000000)));
        assert_eq!(plugin.begin(&begin[..24]), None);
        let mut commit = vec![COMMIT];
        for n in [0x1_0000_0028u64, 0x1_0000_0100] {
            commit.extend_from_slice(&n.to_be_bytes());
        }
        commit.extend_from_slice(&[0; 4]);
        assert_eq!(plugin.commit(&commit, 9), Some((9, 0x1_0000_0100)));
        assert_eq!(plugin.commit(&commit[..20], 9), None);
        assert_eq!(plugin.commit(&begin, 9), None);
        assert!(plugin.takes(&change(b'I', 0, 0, b"[1]")));
        assert!(plugin.takes(&change(b'D', 2, 1, b"[1]")));
        assert!(!plugin.takes(&change(b'U', 0, FLAG_UNCHANGED, b"[1]")), "unchanged values");
        assert!(!plugin.takes(&change(b'I', 3, 0, b"[1]")), "an excluded table");
        assert!(!plugin.takes(&change(b'T', 0, 0, b"")), "not I/U/D");
        assert!(!plugin.takes(&change(b'I', 0, 0, b"")[..15]), "cut inside its head");
    }
}
