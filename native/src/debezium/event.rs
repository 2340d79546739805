//! One debezium event's bytes: the Context fields it reads (`Meta`), and the event written as
//! DebeziumEnvelope's Python path writes it -- `{before, after, source, transaction, op, ts_ms,
//! ts_us, ts_ns}` in compact JSON, or the Envelope record of avro.debezium_value_schema.

use super::DebeziumEvents;
use crate::digits::push_int;
use crate::json;
use crate::kinds::write_long;

const XID_MASK: i64 = 0xFFFF_FFFF;
const SNAPSHOT_FALSE: &str = "false";

/// The Context fields an event reads (pgshovel2.relay.envelopes.Context, by position).
pub(crate) struct Meta {
    pub(super) txid: i64,
    pub(super) position: String,
    pub(super) ts_ms: i64,
    pub(super) snapshot: Option<String>,
    pub(super) lsn: Option<i64>,
    pub(super) last_lsn: Option<i64>,
    pub(super) ts_us: i64,
    pub(super) ts_ns: i64,
}

impl Meta {
    /// A captured change's Context (snapshot "false"): txid, 64-bit; position, its
    /// pgshovel.position; ts_ms and ts_us, the commit time; lsn, the change's own LSN (logical); last_lsn,
    /// the LSN completely processed before its transaction. None when ts_us has no ns form in 64 bits.
    pub(crate) fn change(txid: i64, position: String, ts_ms: i64, lsn: Option<i64>, last_lsn: Option<i64>, ts_us: i64)
                         -> Option<Meta> {
        let ts_ns = ts_us.checked_mul(1000)?;
        Some(Meta { txid, position, ts_ms, snapshot: Some(SNAPSHOT_FALSE.to_string()), lsn, last_lsn,
                    ts_us, ts_ns })
    }
}

/// One event's processing time and transaction block numbers.
pub(super) struct Stamp {
    pub now_ns: i64,
    pub order: Option<(i64, i64)>,
}

impl DebeziumEvents {
    pub(super) fn json_event(&self, before: Option<&Vec<u8>>, after: Option<&Vec<u8>>, op: &str, m: &Meta, s: &Stamp,
                  out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"before\":");
        out.extend_from_slice(before.map_or(&b"null"[..], |b| b));
        out.extend_from_slice(b",\"after\":");
        out.extend_from_slice(after.map_or(&b"null"[..], |b| b));
        out.extend_from_slice(b",\"source\":{\"version\":");
        json::write_str(&self.version, out);
        out.extend_from_slice(b",\"connector\":");
        json::write_str(&self.connector, out);
        out.extend_from_slice(b",\"name\":");
        json::write_str(&self.name, out);
        json_int(b",\"ts_ms\":", Some(m.ts_ms), out);
        out.extend_from_slice(b",\"snapshot\":");
        json_opt_str(m.snapshot.as_deref(), out);
        out.extend_from_slice(b",\"db\":");
        json::write_str(&self.db, out);
        out.extend_from_slice(b",\"sequence\":");
        json_sequence(m, out);
        json_int(b",\"ts_us\":", Some(m.ts_us), out);
        json_int(b",\"ts_ns\":", Some(m.ts_ns), out);
        out.extend_from_slice(b",\"schema\":");
        json::write_str(&self.schema, out);
        out.extend_from_slice(b",\"table\":");
        json::write_str(&self.table, out);
        json_int(b",\"txId\":", tx_id(m), out);
        json_int(b",\"lsn\":", m.lsn, out);
        out.extend_from_slice(b",\"xmin\":null,\"position\":");
        json::write_str(&m.position, out);
        out.extend_from_slice(b"},\"transaction\":");
        match s.order {
            None => out.extend_from_slice(b"null"),
            Some((total, in_collection)) => {
                out.extend_from_slice(b"{\"id\":\"");
                push_transaction_id(m, out);
                out.push(b'"');
                json_int(b",\"total_order\":", Some(total), out);
                json_int(b",\"data_collection_order\":", Some(in_collection), out);
                out.push(b'}');
            }
        }
        out.extend_from_slice(b",\"op\":");
        json::write_str(op, out);
        json_int(b",\"ts_ms\":", Some(s.now_ns.div_euclid(1_000_000)), out);
        json_int(b",\"ts_us\":", Some(s.now_ns.div_euclid(1_000)), out);
        json_int(b",\"ts_ns\":", Some(s.now_ns), out);
        out.push(b'}');
    }

    pub(super) fn avro_event(&self, before: Option<&Vec<u8>>, after: Option<&Vec<u8>>, op: &str, m: &Meta, s: &Stamp,
                  out: &mut Vec<u8>) {
        out.extend_from_slice(&self.header);
        for body in [before, after] {
            match body {
                None => out.push(0),
                Some(b) => {
                    out.push(2);
                    out.extend_from_slice(b);
                }
            }
        }
        for s in [&self.version, &self.connector, &self.name] {
            avro_str(s, out);
        }
        write_long(m.ts_ms, out);
        match &m.snapshot {  // ["string", "null"]
            Some(snapshot) => {
                out.push(0);
                avro_str(snapshot, out);
            }
            None => out.push(2),
        }
        avro_str(&self.db, out);
        match sequence(m) {
            Some(seq) => {
                out.push(2);
                avro_str(&seq, out);
            }
            None => out.push(0),
        }
        avro_opt_long(Some(m.ts_us), out);
        avro_opt_long(Some(m.ts_ns), out);
        avro_str(&self.schema, out);
        avro_str(&self.table, out);
        avro_opt_long(tx_id(m), out);
        avro_opt_long(m.lsn, out);
        out.push(0); // xmin
        avro_str(&m.position, out);
        match s.order {
            None => out.push(0),
            Some((total, in_collection)) => {
                out.push(2);
                avro_str(&transaction_id(m), out);
                write_long(total, out);
                write_long(in_collection, out);
            }
        }
        avro_str(op, out);
        avro_opt_long(Some(s.now_ns.div_euclid(1_000_000)), out);
        avro_opt_long(Some(s.now_ns.div_euclid(1_000)), out);
        avro_opt_long(Some(s.now_ns), out);
    }
}

/// source.sequence: Debezium's ``["<last LSN>","<LSN>"]`` (debezium.sequence), None without an LSN.
fn sequence(m: &Meta) -> Option<String> {
    let lsn = m.lsn?;
    Some(match m.last_lsn {
        Some(last) => format!("[\"{last}\",\"{lsn}\"]"),
        None => format!("[null,\"{lsn}\"]"),
    })
}

/// source.txId: the 32-bit xid of a change (snapshot "false"), else None.
fn tx_id(m: &Meta) -> Option<i64> {
    (m.snapshot.as_deref() == Some(SNAPSHOT_FALSE)).then_some(m.txid & XID_MASK)
}

/// source.sequence as a JSON string (sequence's text, its quotes escaped), or null.
fn json_sequence(m: &Meta, out: &mut Vec<u8>) {
    let Some(lsn) = m.lsn else { return out.extend_from_slice(b"null") };
    out.extend_from_slice(b"\"[");
    match m.last_lsn {
        Some(last) => {
            out.extend_from_slice(b"\\\"");
            push_int(last, out);
            out.extend_from_slice(b"\\\"");
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\\\"");
    push_int(lsn, out);
    out.extend_from_slice(b"\\\"]\"");
}

/// transaction.id (debezium.transaction_id).
fn transaction_id(m: &Meta) -> String {
    let mut out = Vec::with_capacity(32);
    push_transaction_id(m, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Appends transaction.id: ``<32-bit xid>:<LSN>``, or the txid without an LSN.
fn push_transaction_id(m: &Meta, out: &mut Vec<u8>) {
    match m.lsn {
        Some(lsn) => {
            push_int(m.txid & XID_MASK, out);
            out.push(b':');
            push_int(lsn, out);
        }
        None => push_int(m.txid, out),
    }
}


fn json_int(name: &[u8], v: Option<i64>, out: &mut Vec<u8>) {
    out.extend_from_slice(name);
    match v {
        Some(n) => push_int(n, out),
        None => out.extend_from_slice(b"null"),
    }
}

fn json_opt_str(s: Option<&str>, out: &mut Vec<u8>) {
    match s {
        Some(s) => json::write_str(s, out),
        None => out.extend_from_slice(b"null"),
    }
}

fn avro_str(s: &str, out: &mut Vec<u8>) {
    write_long(s.len() as i64, out);
    out.extend_from_slice(s.as_bytes());
}

fn avro_opt_long(v: Option<i64>, out: &mut Vec<u8>) {
    match v {
        Some(n) => {
            out.push(2);
            write_long(n, out);
        }
        None => out.push(0),
    }
}
