//! One column value (trigger form, see pgshovel2/codec/types.py) -> its Avro body or JSON value.
//!
//! The kinds are the `native` plans of pgshovel2.codec.types.FieldType; every function mirrors the
//! converter types.py pairs with that plan and returns None for a value it does not take exactly
//! as Python would (the Python codec then encodes the row, or names the error).

use crate::canon;
use crate::digits::push_uint;
use crate::json::{self, Value};

const DAYS_2000: i64 = 10957;
const US_DAY: i64 = 86_400_000_000;
const MICROS_2000: i64 = DAYS_2000 * US_DAY;
const INT32_LIMITS: [i64; 2] = [i32::MIN as i64, i32::MAX as i64];

/// A column's conversion, from its plan name (types.FieldType.native).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Bool,
    Int,
    Float4,
    Float8,
    Decimal(u32),
    Money,
    Bytea,
    Str,
    Date,
    Time,
    Timestamp,
    TimestampTz,
    TimeTz,
    Interval,
    Json,
    /// Arrays (and any plan this build does not know): only NULL is taken natively.
    Other,
}

impl Kind {
    /// The kind of a plan name; `decimal` takes the scale.
    pub fn parse(name: &str, scale: u32) -> Kind {
        match name {
            "bool" => Kind::Bool,
            "int" => Kind::Int,
            "float4" => Kind::Float4,
            "float8" => Kind::Float8,
            "decimal" => Kind::Decimal(scale),
            "money" => Kind::Money,
            "bytea" => Kind::Bytea,
            "string" => Kind::Str,
            "date" => Kind::Date,
            "time" => Kind::Time,
            "timestamp" => Kind::Timestamp,
            "timestamptz" => Kind::TimestampTz,
            "timetz" => Kind::TimeTz,
            "interval" => Kind::Interval,
            "json" => Kind::Json,
            _ => Kind::Other,
        }
    }
}

pub fn write_long(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z > 0x7f {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn write_bytes(b: &[u8], out: &mut Vec<u8>) {
    write_long(b.len() as i64, out);
    out.extend_from_slice(b);
}

/// Appends the Avro body of a non-null value of kind (after its union branch, if any).
pub fn avro(kind: Kind, v: &Value, out: &mut Vec<u8>) -> Option<()> {
    match (kind, v) {
        (Kind::Bool, Value::Bool(b)) => out.push(*b as u8),
        (Kind::Int, Value::Int(i)) => write_long(*i, out),
        (Kind::Float8, _) => out.extend_from_slice(&float_in(v)?.to_le_bytes()),
        (Kind::Float4, _) => {
            let f = float_in(v)?;
            let narrow = f as f32;
            if narrow.is_infinite() && f.is_finite() {
                return None; // struct.pack("<f") overflows
            }
            out.extend_from_slice(&narrow.to_le_bytes());
        }
        (Kind::Decimal(scale), Value::Str(s)) => write_bytes(&decimal_bytes(s, scale)?, out),
        (Kind::Money, Value::Str(s)) => write_bytes(money(s)?.as_bytes(), out),
        (Kind::Bytea, Value::Str(s)) => write_bytes(&from_hex(s)?, out),
        (Kind::Str | Kind::Json, Value::Str(s)) => write_bytes(s.as_bytes(), out),
        (Kind::Date, Value::Int(d)) if d.unsigned_abs() < 1 << 40 => write_long(if INT32_LIMITS.contains(d) { *d } else { d + DAYS_2000 }, out),
        (Kind::Time, Value::Int(t)) => write_long(*t, out),
        (Kind::Timestamp | Kind::TimestampTz, Value::Int(t)) => {
            // i64::MAX stands for +infinity: a timestamp that would land on it is Python's (it names it)
            write_long(if *t == i64::MIN || *t == i64::MAX {
                *t
            } else {
                t.checked_add(MICROS_2000).filter(|us| *us != i64::MAX)?
            }, out)
        }
        (Kind::TimeTz, Value::Str(s)) => write_bytes(timetz(s)?.as_bytes(), out),
        (Kind::Interval, _) => write_bytes(interval(v)?.as_bytes(), out),
        _ => return None,
    }
    Some(())
}

/// Appends the JSON-encoding value of a non-null value of kind.
pub fn json_value(kind: Kind, v: &Value, out: &mut Vec<u8>) -> Option<()> {
    match (kind, v) {
        (Kind::Bool, Value::Bool(_)) | (Kind::Int, Value::Int(_) | Value::BigInt(_)) => json::write(v, out),
        (Kind::Float4 | Kind::Float8, Value::Int(_) | Value::BigInt(_) | Value::Float(_)) => json::write(v, out),
        (Kind::Float4 | Kind::Float8, Value::Str(s)) if matches!(s.as_ref(), "NaN" | "Infinity" | "-Infinity") => {
            json::write(v, out)
        }
        (Kind::Decimal(_) | Kind::Str, Value::Str(s)) => json::write_str(s, out),
        (Kind::Money, Value::Str(s)) => json::write_str(&money(s)?, out),
        (Kind::Bytea, Value::Str(s)) => json::write_str(&base64(&from_hex(s)?), out),
        (Kind::Date, Value::Int(d)) if d.unsigned_abs() < 1 << 40 => date_json(*d, out),
        (Kind::Time, Value::Int(t)) => time_json(*t, out)?,
        (Kind::Timestamp, Value::Int(t)) => timestamp_json(*t, false, out)?,
        (Kind::TimestampTz, Value::Int(t)) => timestamp_json(*t, true, out)?,
        (Kind::TimeTz, Value::Str(s)) => json::write_str(&timetz(s)?, out),
        (Kind::Interval, _) => json::write_str(&interval(v)?, out),
        (Kind::Json, Value::Str(s)) => canon::embed(s, false, out)?,
        _ => return None,
    }
    Some(())
}

/// The elements of a one-dimensional array with lower bound 1 in its capture forms: a JSON
/// array, or ``{"dims": [n], "lower_bounds": [1], "elements": [...]}``; None for other forms.
fn plain_elements<'v, 'a>(v: &'v Value<'a>) -> Option<&'v [Value<'a>]> {
    match v {
        Value::Arr(items) => Some(items),
        Value::Obj(fields) => {
            let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, x)| x);
            let (Some(Value::Arr(dims)), Some(Value::Arr(lower)), Some(Value::Arr(items))) =
                (get("dims"), get("lower_bounds"), get("elements"))
            else {
                return None;
            };
            let one_dim = dims.len() == 1 && dims[0] == Value::Int(items.len() as i64);
            (fields.len() == 3 && one_dim && lower.as_slice() == [Value::Int(1)]).then_some(items.as_slice())
        }
        _ => None,
    }
}

/// Appends the Avro body of an array value (the nested-array branch): blocks of items, each
/// item a union ``["null", element, sub-array]`` (branch 0 or 1 here).
pub fn avro_array(elem: Kind, v: &Value, out: &mut Vec<u8>) -> Option<()> {
    let items = plain_elements(v)?;
    if !items.is_empty() {
        write_long(items.len() as i64, out);
        for item in items {
            if *item == Value::Null {
                out.push(0);
            } else {
                out.push(2);
                avro(elem, item, out)?;
            }
        }
    }
    out.push(0);
    Some(())
}

/// Appends the JSON-encoding value of an array value: the array of its element values.
pub fn json_array(elem: Kind, v: &Value, out: &mut Vec<u8>) -> Option<()> {
    let items = plain_elements(v)?;
    out.push(b'[');
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        match (item, elem) {
            (Value::Null, _) => out.extend_from_slice(b"null"),
            (Value::Str(s), Kind::Json) => canon::embed(s, true, out)?,
            _ => json_value(elem, item, out)?,
        }
    }
    out.push(b']');
    Some(())
}

fn float_in(v: &Value) -> Option<f64> {
    match v {
        Value::Float(f) => Some(*f),
        Value::Int(i) => Some(*i as f64),
        Value::Str(s) => match s.as_ref() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// types._decimal_to_avro: numeric text -> the unscaled value's big-endian two's complement,
/// (bit_length + 8) // 8 bytes. Only plain `-?digits[.digits]` of at most 28 significant digits
/// (Python's Decimal context rounds beyond that: left to it).
fn decimal_bytes(s: &str, scale: u32) -> Option<Vec<u8>> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let (int_part, frac) = body.split_once('.').unwrap_or((body, ""));
    if int_part.is_empty() || !int_part.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit())
        || (body.contains('.') && frac.is_empty())
    {
        return None;
    }
    let all = format!("{int_part}{frac}");
    if all.trim_start_matches('0').len() > 28 || scale > 60 {
        return None;
    }
    let mut mag: i128 = 0;
    for b in int_part.bytes() {
        mag = mag * 10 + (b - b'0') as i128;
    }
    let fb = frac.as_bytes();
    for i in 0..scale as usize {
        mag = mag.checked_mul(10)?.checked_add(fb.get(i).map_or(0, |b| (b - b'0') as i128))?;
    }
    let bits = 128 - mag.leading_zeros() as usize;
    let len = (bits + 8) / 8;
    let n = if neg { -mag } else { mag };
    Some(n.to_be_bytes()[16 - len..].to_vec())
}

fn money(s: &str) -> Option<String> {
    if !s.is_ascii() {
        return None;
    }
    let digits: String = s.chars().filter(|c| c.is_ascii_digit() || *c == '.').collect();
    Some(if s.starts_with('-') || s.starts_with('(') { format!("-{digits}") } else { digits })
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    b.chunks(2)
        .map(|p| Some((char::from(p[0]).to_digit(16)? * 16 + char::from(p[1]).to_digit(16)?) as u8))
        .collect()
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = (chunk[0] as u32) << 16 | (*chunk.get(1).unwrap_or(&0) as u32) << 8 | *chunk.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            out.push(if i <= chunk.len() { T[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

/// temporal.timetz_to_iso: a trailing "+HH"/"-HH" offset gets ":00".
fn timetz(s: &str) -> Option<String> {
    if s.contains('\n') || !s.is_ascii() {
        return None; // Python's `$` also matches before a final newline
    }
    let b = s.as_bytes();
    let n = b.len();
    let short = n >= 3 && matches!(b[n - 3], b'+' | b'-') && b[n - 2].is_ascii_digit() && b[n - 1].is_ascii_digit();
    Some(if short { format!("{s}:00") } else { s.to_string() })
}

/// temporal.civil_from_days: (year, month, day) of days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + (month <= 2) as i64, month, day)
}

/// Appends the date text without era of days since 1970 (temporal._date_text); true when BC.
fn push_date(days_1970: i64, out: &mut Vec<u8>) -> bool {
    let (y, m, d) = civil_from_days(days_1970);
    let bc = y <= 0;
    push_uint(if bc { 1 - y } else { y } as u64, 4, out);
    out.push(b'-');
    push_uint(m as u64, 2, out);
    out.push(b'-');
    push_uint(d as u64, 2, out);
    bc
}

/// Appends the JSON string of a date (days since 2000; PostgreSQL's infinities at i32's bounds).
fn date_json(v: i64, out: &mut Vec<u8>) {
    match v {
        x if x == i32::MAX as i64 => out.extend_from_slice(b"\"infinity\""),
        x if x == i32::MIN as i64 => out.extend_from_slice(b"\"-infinity\""),
        _ => {
            out.push(b'"');
            if push_date(v + DAYS_2000, out) {
                out.extend_from_slice(b" BC");
            }
            out.push(b'"');
        }
    }
}

/// Appends HH:MM:SS.ffffff of µs since midnight; None when negative.
fn push_time(us: i64, out: &mut Vec<u8>) -> Option<()> {
    if us < 0 {
        return None;
    }
    let (s, frac) = ((us / 1_000_000) as u64, (us % 1_000_000) as u64);
    push_uint(s / 3600, 2, out);
    out.push(b':');
    push_uint(s / 60 % 60, 2, out);
    out.push(b':');
    push_uint(s % 60, 2, out);
    out.push(b'.');
    push_uint(frac, 6, out);
    Some(())
}

fn time_json(us: i64, out: &mut Vec<u8>) -> Option<()> {
    out.push(b'"');
    push_time(us, out)?;
    out.push(b'"');
    Some(())
}

/// Appends the JSON string of a timestamp (µs since 2000; PostgreSQL's infinities at i64's
/// bounds), with ``Z`` when utc (timestamptz).
fn timestamp_json(v: i64, utc: bool, out: &mut Vec<u8>) -> Option<()> {
    if v == i64::MAX {
        out.extend_from_slice(b"\"infinity\"");
        return Some(());
    }
    if v == i64::MIN {
        out.extend_from_slice(b"\"-infinity\"");
        return Some(());
    }
    let t = v.checked_add(MICROS_2000)?;
    let (days, us) = (t.div_euclid(US_DAY), t.rem_euclid(US_DAY));
    out.push(b'"');
    let bc = push_date(days, out);
    out.push(b'T');
    push_time(us, out)?;
    if utc {
        out.push(b'Z');
    }
    if bc {
        out.extend_from_slice(b" BC");
    }
    out.push(b'"');
    Some(())
}

/// temporal.interval_to_iso of [months, days, µs].
fn interval(v: &Value) -> Option<String> {
    let Value::Arr(parts) = v else { return None };
    let [Value::Int(months), Value::Int(days), Value::Int(us)] = parts.as_slice() else { return None };
    let (months, days, us) = (*months as i128, *days as i128, *us as i128);
    if months == 0 && days == 0 && us == 0 {
        return Some("PT0S".into());
    }
    let years = months / 12;
    let mut out = String::from("P");
    for (n, unit) in [(years, 'Y'), (months - years * 12, 'M'), (days, 'D')] {
        if n != 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    if us != 0 {
        let sign = if us < 0 { "-" } else { "" };
        let a = us.abs();
        let (h, rest) = (a / 3_600_000_000, a % 3_600_000_000);
        let (m, rest) = (rest / 60_000_000, rest % 60_000_000);
        out.push('T');
        if h != 0 {
            out.push_str(&format!("{sign}{h}H"));
        }
        if m != 0 {
            out.push_str(&format!("{sign}{m}M"));
        }
        if rest != 0 {
            let secs = format!("{}.{:06}", rest / 1_000_000, rest % 1_000_000);
            out.push_str(&format!("{sign}{}S", secs.trim_end_matches('0').trim_end_matches('.')));
        }
    }
    Some(out)
}
