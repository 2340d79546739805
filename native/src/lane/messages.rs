//! A change's Kafka messages as its table's envelope makes them: the row envelope's
//! (RowEnvelope.change, through the table's `RowCodec`) and the debezium envelope's
//! (DebeziumEnvelope.change, through its `DebeziumEvents`, numbered in the transaction).

use pyo3::prelude::*;

use super::records::Rec;
use super::Txn;
use crate::debezium::{DebeziumEvents, Meta};
use crate::row_codec::RowCodec;

/// A data message: (table index, key or None for an unkeyed table, value or None for a tombstone, op).
pub(super) type Out = (usize, Option<Vec<u8>>, Option<Vec<u8>>, u8);

/// The row envelope's messages of a change (RowEnvelope.change), or None (Python's). The key is
/// None for an unkeyed table (its codec has no key columns): its DELETE is (None, the row, d), its
/// UPDATE (None, the old row, d) then (None, the row, u); one without its old row is left to Python,
/// whose Emitter.change refuses it.
pub(super) fn row_messages(codec: &RowCodec, rec: &Rec<'_>) -> Option<Vec<Out>> {
    let (table, kind) = (rec.table, rec.kind);
    let (key, value) = codec.encode_row(rec.row.row(), true)?;
    if kind == b'D' {
        return Some(match key {
            Some(key) => vec![(table, Some(key), None, b'd')],
            None => vec![(table, None, Some(value?), b'd')],
        });
    }
    let op = if kind == b'I' { b'c' } else { b'u' };
    let Some(old) = &rec.old else {
        return (key.is_some() || kind == b'I').then(|| vec![(table, key, value, op)]);
    };
    let (old_key, old_value) = codec.encode_row(old.row(), true)?;
    if old_key.is_none() {
        return Some(vec![(table, None, Some(old_value?), b'd'), (table, None, value, op)]);
    }
    if old_key != key {
        return Some(vec![(table, old_key, None, b'd'), (table, key, value, b'c')]);
    }
    Some(vec![(table, key, value, op)])
}

/// The debezium envelope's messages of a change (DebeziumEnvelope.change through DebeziumEvents),
/// numbered in txn, or None (Python's: nothing numbered).
pub(super) fn debezium_messages(py: Python<'_>, events: &DebeziumEvents, rec: &Rec<'_>, position: &str, txn: &mut Txn)
                     -> PyResult<Option<Vec<Out>>> {
    let (table, kind) = (rec.table, rec.kind);
    let rows = events.rows();
    let Some((Some(key), Some(body))) = rows.encode_row(rec.row.row(), true) else { return Ok(None) };
    let old = match &rec.old {
        None => None,
        Some(old) => match rows.encode_row(old.row(), true) {
            Some((Some(k), Some(b))) => Some((Some(k), b)),
            _ => return Ok(None),
        },
    };
    let Some(meta) = Meta::change(txn.txid, position.to_string(), txn.ts_ms, rec.lsn, txn.last_lsn, txn.ts_us) else {
        return Ok(None);
    };
    if table >= txn.per.len() {
        return Ok(None);
    }
    let msgs = events.change_messages(py, kind, Some(key), body, old, &meta, &mut || {
        txn.total += 1;
        txn.per[table] += 1;
        txn.events[table] += 1;
        Ok(Some((txn.total, txn.per[table])))
    })?;
    Ok(Some(msgs.into_iter().map(|(key, value, op)| (table, Some(key.unwrap_or_default()), value, op.as_bytes()[0]))
        .collect()))
}
