//! Output-function text -> the capture JSON of a value: the converters of
//! pgshovel2.codec.textforms, for the texts a session with its pinned settings prints. Each
//! returns None for a text it does not read exactly as Python does (the change is then
//! decoded in Python).

use std::borrow::Cow;

use crate::json::{self, Value};

/// A column's text -> capture form conversion (textforms.native_form names).
#[derive(Clone, Copy, PartialEq)]
pub enum Form {
    Bool,
    Int,
    Float,
    Date,
    Time,
    Timestamp,
    Interval,
    Bytea,
    Text,
    /// Left to Python (a converter without a native form): only NULL and unchanged values are
    /// taken natively.
    Python,
}

impl Form {
    /// The form of a textforms.native_form name (an unknown one: Python).
    pub fn parse(name: &str) -> Form {
        match name {
            "bool" => Form::Bool,
            "int" => Form::Int,
            "float" => Form::Float,
            "date" => Form::Date,
            "time" => Form::Time,
            "timestamp" => Form::Timestamp,
            "interval" => Form::Interval,
            "bytea" => Form::Bytea,
            "text" => Form::Text,
            _ => Form::Python,
        }
    }
}

/// The capture value of a non-null column text of form (textforms' converter of it), as
/// `json::parse` reads the capture JSON `value` writes for it: the lane encodes it without that
/// text. None: Python's.
pub fn value_of(form: Form, text: Cow<'_, str>) -> Option<Value<'_>> {
    Some(match form {
        Form::Bool => Value::Bool(match text.as_ref() {
            "t" => true,
            "f" => false,
            _ => return None,
        }),
        Form::Int => {
            if !is_json_int(&text) || text == "-0" || text.len() > 40 {
                return None;
            }
            match text.parse::<i64>() {
                Ok(i) => Value::Int(i),
                Err(_) => Value::BigInt(text.into_owned()),
            }
        }
        Form::Float => match text.as_ref() {
            "NaN" | "Infinity" | "-Infinity" => Value::Str(text),
            "-0" => Value::Float(-0.0),
            t if is_json_number(t) && t.len() <= 40 => match json::parse(t, true)? {
                Value::Int(i) => Value::Int(i),
                Value::Float(f) => Value::Float(f),
                Value::BigInt(digits) => Value::BigInt(digits),
                _ => return None,
            },
            _ => return None,
        },
        Form::Date => int(date(&text)?),
        Form::Time => int(time(&text)?),
        Form::Timestamp => int(timestamp(&text)?),
        Form::Interval => {
            let (months, days, us) = interval(&text)?;
            Value::Arr(vec![int(months), int(days), int(us)])
        }
        Form::Bytea => Value::Str(match text {
            Cow::Borrowed(t) => Cow::Borrowed(t.strip_prefix("\\x")?),
            Cow::Owned(t) => Cow::Owned(t.strip_prefix("\\x")?.to_string()),
        }),
        Form::Text => Value::Str(text),
        Form::Python => return None,
    })
}

/// Appends the capture JSON of a non-null column text of form (what value_of reads; a float
/// as its own token, as json.loads reads it as the converter does).
pub fn value(form: Form, text: &str, out: &mut Vec<u8>) -> Option<()> {
    let v = value_of(form, Cow::Borrowed(text))?;
    match v {
        Value::Int(_) | Value::Float(_) | Value::BigInt(_) if form == Form::Float => {
            out.extend_from_slice(if text == "-0" { b"-0.0" } else { text.as_bytes() })
        }
        _ => json::write(&v, out),
    }
    Some(())
}

/// The capture value of a one-dimensional array text (array_value's): the array of its
/// element values.
pub fn array_of(form: Form, text: &str) -> Option<Value<'_>> {
    let mut items = Vec::new();
    array_items(text, |item| {
        items.push(match item {
            Some(item) => value_of(form, item)?,
            None => Value::Null,
        });
        Some(())
    })?;
    Some(Value::Arr(items))
}

/// textforms._array for a one-dimensional array_out text with lower bound 1 (``{a,NULL,"b c"}``,
/// ``{}``): the JSON array of its element forms. A nested array, a bounds decoration or an
/// element with surrounding blanks is left to Python.
pub fn array_value(form: Form, text: &str, out: &mut Vec<u8>) -> Option<()> {
    out.push(b'[');
    let mut first = true;
    array_items(text, |item| {
        if !first {
            out.push(b',');
        }
        first = false;
        match item {
            Some(item) => value(form, &item, out),
            None => {
                out.extend_from_slice(b"null");
                Some(())
            }
        }
    })?;
    out.push(b']');
    Some(())
}

/// Calls each with every element text of a one-dimensional array_out text (None for NULL), in
/// order; None where the text is not one array_value takes, or where each gives None.
fn array_items<'a>(text: &'a str, mut each: impl FnMut(Option<Cow<'a, str>>) -> Option<()>) -> Option<()> {
    let body = text.strip_prefix('{')?.strip_suffix('}')?;
    if body.is_empty() {
        return Some(());
    }
    let b = body.as_bytes();
    let mut pos = 0;
    loop {
        if b.get(pos) == Some(&b'"') {
            let mut item = String::new();
            pos += 1;
            loop {
                match *b.get(pos)? {
                    b'\\' => {
                        let ch = body[pos + 1..].chars().next()?;
                        item.push(ch);
                        pos += 1 + ch.len_utf8();
                    }
                    b'"' => break,
                    _ => {
                        let ch = body[pos..].chars().next()?;
                        item.push(ch);
                        pos += ch.len_utf8();
                    }
                }
            }
            pos += 1;
            each(Some(Cow::Owned(item)))?;
        } else {
            let end = b[pos..].iter().position(|&c| c == b',').map_or(b.len(), |n| pos + n);
            let word = &body[pos..end];
            if word.is_empty() || word.contains(['{', '}', '"', '\\']) || word.trim() != word {
                return None;
            }
            each(if word == "NULL" { None } else { Some(Cow::Borrowed(word)) })?;
            pos = end;
        }
        match b.get(pos) {
            None => return Some(()),
            Some(b',') => pos += 1,
            _ => return None,
        }
    }
}

/// A converter's integer as json.loads reads its token: an int, or its digits beyond i64.
fn int<'a>(n: i128) -> Value<'a> {
    match i64::try_from(n) {
        Ok(i) => Value::Int(i),
        Err(_) => Value::BigInt(n.to_string()),
    }
}

fn digits_len(b: &[u8]) -> usize {
    b.iter().take_while(|c| c.is_ascii_digit()).count()
}

/// `-?(0|[1-9][0-9]*)`
fn is_json_int(text: &str) -> bool {
    let b = text.strip_prefix('-').unwrap_or(text).as_bytes();
    let n = digits_len(b);
    n == b.len() && n > 0 && (b[0] != b'0' || n == 1)
}

/// A JSON number token: an int, an optional fraction, an optional exponent.
fn is_json_number(text: &str) -> bool {
    let b = text.strip_prefix('-').unwrap_or(text).as_bytes();
    let n = digits_len(b);
    if n == 0 || (b[0] == b'0' && n > 1) {
        return false;
    }
    let mut rest = &b[n..];
    if let Some(frac) = rest.strip_prefix(b".") {
        let k = digits_len(frac);
        if k == 0 {
            return false;
        }
        rest = &frac[k..];
    }
    if let Some(exp) = rest.strip_prefix(b"e").or_else(|| rest.strip_prefix(b"E")) {
        let exp = exp.strip_prefix(b"+").or_else(|| exp.strip_prefix(b"-")).unwrap_or(exp);
        let k = digits_len(exp);
        return k > 0 && k == exp.len();
    }
    rest.is_empty()
}

/// A run of min..=max ASCII digits at the start of s (max at most 18: read as an i64, not by
/// i128's slower parse): (value, rest).
fn number(s: &str, min: usize, max: usize) -> Option<(i128, &str)> {
    debug_assert!(max <= 18);
    let n = digits_len(s.as_bytes());
    if n < min || n > max {
        return None;
    }
    Some((s[..n].parse::<i64>().ok()? as i128, &s[n..]))
}

/// Exactly two ASCII digits at the start of s.
fn two(s: &str) -> Option<(i128, &str)> {
    let b = s.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_digit() && b[1].is_ascii_digit() && !b.get(2).is_some_and(u8::is_ascii_digit) {
        return Some((((b[0] - b'0') * 10 + (b[1] - b'0')) as i128, &s[2..]));
    }
    None
}

/// temporal.days_from_civil (floor divisions, as Python's //); i64, whose divisions are
/// instructions where i128's are library calls (years of 9 digits at most here).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = year - (month <= 2) as i64;
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2).div_euclid(5) + day - 1;
    let doe = yoe * 365 + yoe.div_euclid(4) - yoe.div_euclid(100) + doy;
    era * 146097 + doe - 719468
}

const DAYS_2000: i128 = 10957;

/// "YYYY-MM-DD" (4+ digit year, 9 at most here) -> (year*10000+month*100+day, rest).
fn civil(s: &str) -> Option<(i128, &str)> {
    let (y, s) = number(s, 4, 9)?;
    let (m, s) = two(s.strip_prefix('-')?)?;
    let (d, s) = two(s.strip_prefix('-')?)?;
    Some((y * 10000 + m * 100 + d, s))
}

/// Days since 1970 of the packed year*10000+month*100+day of civil(), the year BC when bc.
fn days_of(packed: i128, bc: bool) -> i128 {
    let packed = packed as i64; // at most 13 digits (civil)
    let (y, m, d) = (packed / 10000, packed / 100 % 100, packed % 100);
    days_from_civil(if bc { 1 - y } else { y }, m, d) as i128
}

/// textforms.date_form.
fn date(text: &str) -> Option<i128> {
    match text {
        "infinity" => return Some(i32::MAX as i128),
        "-infinity" => return Some(i32::MIN as i128),
        _ => {}
    }
    let (packed, rest) = civil(text)?;
    let bc = match rest {
        "" => false,
        " BC" => true,
        _ => return None,
    };
    Some(days_of(packed, bc) - DAYS_2000)
}

/// "HH:MM:SS" with a fraction of 1 to max_frac digits (padded to µs) -> (µs, rest); hours of
/// exactly two digits (timestamps) or 1 to 12 (time, interval).
fn clock(s: &str, two_digit_hours: bool, max_frac: usize) -> Option<(i128, &str)> {
    let (h, s) = if two_digit_hours { two(s)? } else { number(s, 1, 12)? };
    let (m, s) = two(s.strip_prefix(':')?)?;
    let (sec, mut s) = two(s.strip_prefix(':')?)?;
    let mut frac = 0;
    if let Some(f) = s.strip_prefix('.') {
        let n = digits_len(f.as_bytes());
        if n == 0 || n > max_frac {
            return None;
        }
        let digits = &f[..n.min(6)];
        frac = (digits.parse::<i64>().ok()? * 10i64.pow(6 - digits.len() as u32)) as i128;
        s = &f[n..];
    }
    Some((((h * 60 + m) * 60 + sec) * 1_000_000 + frac, s))
}

/// temporal.time_from_text ("HH:MM:SS[.ffffff]"); only two-digit minutes and seconds here.
fn time(text: &str) -> Option<i128> {
    let (us, rest) = clock(text, false, 6)?;
    rest.is_empty().then_some(us)
}

/// textforms.timestamp_form.
fn timestamp(text: &str) -> Option<i128> {
    match text {
        "infinity" => return Some(i64::MAX as i128),
        "-infinity" => return Some(i64::MIN as i128),
        _ => {}
    }
    let (packed, s) = civil(text)?;
    let (mut us, mut s) = clock(s.strip_prefix(' ')?, true, 6)?;
    if let Some(sign) = s.chars().next().filter(|c| *c == '+' || *c == '-') {
        let (h, rest) = two(&s[1..])?;
        let (mut m, mut sec, mut rest) = (0, 0, rest);
        if let Some(r) = rest.strip_prefix(':') {
            (m, rest) = two(r)?;
            if let Some(r) = rest.strip_prefix(':') {
                (sec, rest) = two(r)?;
            }
        }
        let offset = ((h * 60 + m) * 60 + sec) * 1_000_000;
        us -= if sign == '+' { offset } else { -offset };
        s = rest;
    }
    let bc = match s {
        "" => false,
        " BC" => true,
        _ => return None,
    };
    Some((days_of(packed, bc) - DAYS_2000) * 86_400_000_000 + us)
}

/// textforms.interval_form, for IntervalStyle postgres text: "N unit" parts (year(s), mon(s),
/// day(s)) and an optional signed clock last, one space apart.
fn interval(text: &str) -> Option<(i128, i128, i128)> {
    let (mut months, mut days, mut us) = (0i128, 0i128, 0i128);
    let tokens: Vec<&str> = text.split(' ').collect();
    let mut i = 0;
    while i < tokens.len() {
        let tok = tokens[i];
        if i + 1 == tokens.len() && tok.contains(':') {
            let (neg, body) = match tok.as_bytes().first()? {
                b'-' => (true, &tok[1..]),
                b'+' => (false, &tok[1..]),
                _ => (false, tok),
            };
            let (t, rest) = clock(body, false, 6)?;
            if !rest.is_empty() {
                return None;
            }
            us = if neg { -t } else { t };
            break;
        }
        let digits = tok.strip_prefix(['+', '-']).unwrap_or(tok);
        let (n, rest) = number(digits, 1, 18)?;
        if !rest.is_empty() {
            return None;
        }
        let n = if tok.starts_with('-') { -n } else { n };
        match *tokens.get(i + 1)? {
            "year" | "years" => months += n * 12,
            "mon" | "mons" => months += n,
            "day" | "days" => days += n,
            _ => return None,
        }
        i += 2;
    }
    (!text.is_empty()).then_some((months, days, us))
}
