//! The run records the lane reads, each as a `Rec` (one change: kind, table index, row, old row,
//! LSN): our plugin's change records (record format 3), pgoutput changes (decoded by the
//! relation's `PgoutputRows` into capture values) and the trigger backend's PgQ event rows.
//! A record the lane does not take reads as None.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use super::Lane;
use crate::json::Value;
use crate::pgoutput::PgoutputRows;
use crate::row_codec::Row;

const FLAG_OLD: u8 = 1;
const FLAG_NO_ROW: u8 = 2;
const FLAG_UNCHANGED: u8 = 4;
const HEAD: usize = 16; // kind, change LSN (8), table index (2), flags (1), row length (4)

/// One change as the lane reads it: kind (b'I', b'U', b'D'), table index, the row and the old
/// row, and its own LSN (logical backend).
pub(super) struct Rec<'a> {
    pub kind: u8,
    pub table: usize,
    pub row: Body<'a>,
    pub old: Option<Body<'a>>,
    pub lsn: Option<i64>,
}

/// A row of a Rec: capture JSON text (our plugin's records, trigger rows), or capture values
/// (a pgoutput change's, decoded from its texts without that JSON).
pub(super) enum Body<'a> {
    Text(&'a [u8]),
    Values(Vec<Value<'a>>, usize),
}

impl Body<'_> {
    pub(super) fn row(&self) -> Row<'_> {
        match self {
            Body::Text(text) => Row::Text(text),
            Body::Values(values, size) => Row::Values(values, *size),
        }
    }
}

impl Lane {
    /// A run record as the lane reads it: our plugin's change record (bytes), a pgoutput change
    /// (pgoutput_change) or a trigger row (trigger_row); None: not one the lane takes.
    pub(super) fn held<'py>(&self, record: &Bound<'py, PyAny>) -> Option<Held<'py>> {
        if let Ok(bytes) = record.downcast::<PyBytes>() {
            return Some(Held::Plugin(bytes.clone()));
        }
        if let Some(change) = pgoutput_change(record) {
            return Some(Held::Pgoutput(change));
        }
        self.trigger_row(record).map(Held::Trigger)
    }

    /// A trigger row (txid, ts_ms, op, data, table, extra) with an I/U/D op, its row and a table
    /// of this lane; else None.
    fn trigger_row<'py>(&self, item: &Bound<'py, PyAny>) -> Option<TriggerRow<'py>> {
        let item = item.downcast::<PyTuple>().ok()?;
        if item.len() != 6 {
            return None;
        }
        let text = |i: usize| item.get_item(i).ok()?.downcast_into::<PyString>().ok();
        let kind = match text(2)?.to_str().ok()? { "I" => b'I', "U" => b'U', "D" => b'D', _ => return None };
        let table = *self.indexes.get(text(4)?.to_str().ok()?)?;
        let extra = item.get_item(5).ok()?;
        let old = if extra.is_none() || !extra.is_truthy().ok()? { None } else { Some(text(5)?) }; // as `if extra`
        Some(TriggerRow { kind, table, row: text(3)?, old })
    }
}

/// A run record the lane takes, held while its Rec is read (Lane::held).
pub(super) enum Held<'py> {
    Plugin(Bound<'py, PyBytes>),
    Pgoutput(PgoutputChange<'py>),
    Trigger(TriggerRow<'py>),
}

impl Held<'_> {
    pub(super) fn rec(&self) -> Option<Rec<'_>> {
        match self {
            Held::Plugin(bytes) => plugin_record(bytes.as_bytes()),
            Held::Pgoutput(change) => change.rec(),
            Held::Trigger(row) => row.rec(),
        }
    }
}

/// The parts of a trigger row the lane reads (Lane::trigger_row).
pub(super) struct TriggerRow<'py> {
    kind: u8,
    table: usize,
    row: Bound<'py, PyString>,
    old: Option<Bound<'py, PyString>>,
}

impl TriggerRow<'_> {
    fn rec(&self) -> Option<Rec<'_>> {
        let old = match &self.old {
            Some(old) => Some(old.to_str().ok()?.as_bytes()),
            None => None,
        };
        let row = Body::Text(self.row.to_str().ok()?.as_bytes());
        Some(Rec { kind: self.kind, table: self.table, row, old: old.map(Body::Text), lsn: None })
    }
}

/// A pgoutput run record (pgoutput_change): its relation's decoder, table index, message and
/// WAL start.
pub(super) struct PgoutputChange<'py> {
    rows: Bound<'py, PgoutputRows>,
    table: usize,
    data: Bound<'py, PyBytes>,
    lsn: i64,
}

impl PgoutputChange<'_> {
    /// The change with its rows as capture values (what PgoutputDecoder's native decoding gives,
    /// without its JSON text), or None (a change the native decoder leaves to Python, or one
    /// with unchanged values: Python's).
    fn rec(&self) -> Option<Rec<'_>> {
        let data = self.data.as_bytes();
        let (kind, row, old, unchanged) = self.rows.get().values(data)?;
        if !unchanged.is_empty() {
            return None;
        }
        let size = data.len() + 64; // a value is seldom longer than its message's texts and names
        Some(Rec { kind, table: self.table, row: Body::Values(row?, size), old: old.map(|v| Body::Values(v, size)),
                   lsn: Some(self.lsn) })
    }
}

/// A pgoutput run record (PgoutputRows, table index, message, WAL start, relation), or None.
fn pgoutput_change<'py>(item: &Bound<'py, PyAny>) -> Option<PgoutputChange<'py>> {
    let item = item.downcast::<PyTuple>().ok()?;
    if item.len() != 5 {
        return None;
    }
    Some(PgoutputChange {
        rows: item.get_item(0).ok()?.downcast_into::<PgoutputRows>().ok()?,
        table: item.get_item(1).ok()?.extract().ok()?,
        data: item.get_item(2).ok()?.downcast_into::<PyBytes>().ok()?,
        lsn: item.get_item(3).ok()?.extract().ok()?,
    })
}

/// A plugin change record as a Rec, or None (not an I/U/D record with its row and without
/// unchanged values).
fn plugin_record(data: &[u8]) -> Option<Rec<'_>> {
    if data.len() < HEAD || !matches!(data[0], b'I' | b'U' | b'D') {
        return None;
    }
    let flags = data[11];
    let size = u32::from_be_bytes([data[12], data[13], data[14], data[15]]) as usize;
    if flags & (FLAG_NO_ROW | FLAG_UNCHANGED) != 0 || data.len() < HEAD + size {
        return None;
    }
    Some(Rec {
        kind: data[0],
        table: u16::from_be_bytes([data[9], data[10]]) as usize,
        row: Body::Text(&data[HEAD..HEAD + size]),
        old: (flags & FLAG_OLD != 0).then(|| Body::Text(&data[HEAD + size..])),
        lsn: Some(i64::try_from(u64::from_be_bytes(data[1..9].try_into().ok()?)).ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change record (format 3): kind, change LSN, table index, flags, row length, row, old row.
    fn record(kind: u8, lsn: u64, table: u16, flags: u8, row: &[u8], old: &[u8]) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&lsn.to_be_bytes());
        out.extend_from_slice(&table.to_be_bytes());
        out.push(flags);
        out.extend_from_slice(&(row.len() as u32).to_be_bytes());
        out.extend_from_slice(row);
        out.extend_from_slice(old);
        out
    }

    fn texts(rec: &Rec<'_>) -> (u8, usize, Option<i64>, Vec<u8>, Option<Vec<u8>>) {
        let text = |body: &Body<'_>| match body {
            Body::Text(t) => t.to_vec(),
            Body::Values(..) => panic!("a plugin record's rows are text"),
        };
        (rec.kind, rec.table, rec.lsn, text(&rec.row), rec.old.as_ref().map(text))
    }

    #[test]
    fn plugin_records() {
        let row = "[1,\"日本\"]".as_bytes();
        let data = record(b'I', 0x1_0000_0028, 7, 0, row, b"");
        assert_eq!(plugin_record(&data).map(|r| texts(&r)), Some((b'I', 7, Some(0x1_0000_0028), row.to_vec(), None)));
        let data = record(b'U', 5, 0, FLAG_OLD, b"[2]", b"[1]");
        assert_eq!(plugin_record(&data).map(|r| texts(&r)), Some((b'U', 0, Some(5), b"[2]".to_vec(), Some(b"[1]".to_vec()))));
    }

    #[test]
    fn plugin_records_the_lane_leaves() {
        assert!(plugin_record(&record(b'D', 5, 0, FLAG_NO_ROW, b"", b"")).is_none(), "no row");
        assert!(plugin_record(&record(b'U', 5, 0, FLAG_UNCHANGED, b"[1]", b"")).is_none(), "unchanged values");
        assert!(plugin_record(&record(b'B', 5, 0, 0, b"[1]", b"")).is_none(), "not I/U/D");
        assert!(plugin_record(&record(b'I', u64::MAX, 0, 0, b"[1]", b"")).is_none(), "an LSN beyond i64");
        let data = record(b'I', 5, 0, 0, b"[1,2]", b"");
        for end in 0..data.len() {
            assert!(plugin_record(&data[..end]).is_none(), "cut at {end}");
        }
    }
}
