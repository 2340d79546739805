//! pgoutput's side of the scan (scan.rs): `pgoutput_scan`, PgoutputDecoder.txn_run's reads
//! natively, over a replication cursor's read_message or a `CopyReader` (copy.rs), with
//! pgoutput's form of Begin, Insert/Update/Delete and Commit messages.

use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::copy::CopyReader;
use super::message::{be_u64, Reads, Seen, BEGIN, COMMIT};
use super::scan::{scan, Form, Limits, Scanned};

/// A replication cursor's read_message (pgoutput's messages, one per message).
struct Cursor<'a>(&'a PyObject);

impl Reads for Cursor<'_> {
    fn next_seen(&mut self, py: Python<'_>) -> PyResult<Option<Seen>> {
        let msg = self.0.call0(py)?;
        if msg.is_none(py) { Ok(None) } else { Seen::of(py, msg).map(Some) }
    }
}

/// pgoutput's messages: a change is a run record (PgoutputDecoder.lane_record's (native, index,
/// data, lsn, relation)) when its relation (in relations, oid -> the decoder's MappedRelation) has a
/// native decoder and a table outside subset. xid_ref: the decoder's reference full xid.
struct Pgoutput<'py> {
    relations: Bound<'py, PyAny>,
    subset: Bound<'py, PyAny>,
    xid_ref: i64,
    /// Per relation oid read: (native, index, relation), or None (its changes are not run records).
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
        begin(data, self.xid_ref)
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
        commit(data)
    }
}

/// A Begin message's (final LSN, full txid, commit time in µs since 2000), or None (not a Begin):
/// its 32-bit xid widened to the full txid nearest xid_ref (the decoder's reference full xid).
fn begin(data: &[u8], xid_ref: i64) -> Option<(u64, u64, i64)> {
    if data.len() < 21 || data[0] != BEGIN {
        return None;
    }
    let xid = u32::from_be_bytes(data[17..21].try_into().unwrap()) as i64;
    let delta = (xid - xid_ref) & 0xFFFF_FFFF;
    let txid = xid_ref + if delta >= 1 << 31 { delta - (1 << 32) } else { delta };
    Some((be_u64(&data[1..9]), txid as u64, be_u64(&data[9..17]) as i64))
}

/// A Commit message's (commit LSN, end LSN), or None (not a Commit).
fn commit(data: &[u8]) -> Option<(u64, u64)> {
    (data.len() >= 26 && data[0] == COMMIT).then(|| (be_u64(&data[2..10]), be_u64(&data[10..18])))
}

/// PgoutputDecoder.txn_run's reads from first (pgoutput's Begin, a message of read_message: a
/// replication cursor's, or a copy.rs CopyReader, read without a Python call per message)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn begin_msg(final_lsn: u64, ts: i64, xid: u32) -> Vec<u8> {
        let mut out = vec![BEGIN];
        out.extend_from_slice(&final_lsn.to_be_bytes());
        out.extend_from_slice(&ts.to_be_bytes());
        out.extend_from_slice(&xid.to_be_bytes());
        out
    }

    #[test]
    fn begin_widens_the_xid() {
        let reference = (3i64 << 32) | 100;
        assert_eq!(begin(&begin_msg(0x1_0000_0028, 820454400000000, 105), reference),
                   Some((0x1_0000_0028, (3 << 32) | 105, 820454400000000)));
        // an xid just below the reference, and across the 32-bit wraparound either way
        assert_eq!(begin(&begin_msg(1, 0, 99), reference).map(|b| b.1), Some((3 << 32) | 99));
        assert_eq!(begin(&begin_msg(1, 0, 5), (3 << 32) | 0xFFFF_FFF0).map(|b| b.1), Some((4 << 32) | 5));
        assert_eq!(begin(&begin_msg(1, 0, 0xFFFF_FFF0), (4 << 32) | 5).map(|b| b.1), Some((3 << 32) | 0xFFFF_FFF0));
        assert_eq!(begin(&begin_msg(1, 0, 5)[..20], reference), None);
        assert_eq!(begin(b"C", reference), None);
    }

    #[test]
    fn commit_lsns() {
        let mut msg = vec![COMMIT, 0];
        for n in [0x1_0000_0028u64, 0x1_0000_0100, 820454400000000] {
            msg.extend_from_slice(&n.to_be_bytes());
        }
        assert_eq!(commit(&msg), Some((0x1_0000_0028, 0x1_0000_0100)));
        assert_eq!(commit(&msg[..25]), None);
        msg[0] = BEGIN;
        assert_eq!(commit(&msg), None);
    }
}
