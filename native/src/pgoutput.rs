//! pgoutput's Insert/Update/Delete messages -> the set's rows as capture JSON text.
//!
//! A `PgoutputRows` is built per relation from the set's columns: where each is in the
//! relation's TupleData and its text form (pgshovel2.codec.textforms.native_form). `change`
//! reads one message's TupleData ('n', 'u', 't' columns) and writes each row as the JSON
//! array the capture code would have written: `json.loads` of it gives exactly the list the
//! Python converters (textforms.converter) give, with pgshovel2.relay.pgoutput_decoder's
//! rules for unchanged TOAST values. Anything it does not take exactly (a text outside the
//! pinned output forms, binary columns, an array column's value, a malformed message) gives
//! None: the Python decoder then decodes that change, and names the error of a bad one.

use crate::json;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

/// A column's text -> capture form conversion (textforms.native_form names).
#[derive(Clone, Copy, PartialEq)]
enum Form {
    Bool,
    Int,
    Float,
    Date,
    Time,
    Timestamp,
    Interval,
    Bytea,
    Text,
    /// Left to Python (arrays): only NULL and unchanged values are taken natively.
    Python,
}

impl Form {
    fn parse(name: &str) -> Form {
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

/// One column of a TupleData.
#[derive(Clone, Copy, PartialEq)]
enum Col<'a> {
    Null,
    Unchanged,
    Text(&'a str),
}

/// (row JSON or None, before JSON or None, unchanged positions) of a change.
type Decoded = (Option<Vec<u8>>, Option<Vec<u8>>, Vec<usize>);

#[pyclass(frozen)]
pub struct PgoutputRows {
    picks: Vec<usize>,
    /// Per set column: its form, and whether it is a one-dimensional array of that form.
    forms: Vec<(Form, bool)>,
}

#[pymethods]
impl PgoutputRows {
    /// picks: per set column, its index in the relation's columns; forms: per set column, its
    /// text form name (textforms.native_form: ``array:<form>`` for an array of that element
    /// form; another name: left to Python).
    #[new]
    fn new(picks: Vec<usize>, forms: Vec<String>) -> PyResult<Self> {
        if picks.len() != forms.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("PgoutputRows: picks and forms differ in length"));
        }
        let forms = forms
            .iter()
            .map(|f| match f.strip_prefix("array:") {
                Some(elem) => (Form::parse(elem), true),
                None => (Form::parse(f), false),
            })
            .collect();
        Ok(PgoutputRows { picks, forms })
    }

    /// An Insert ('I'), Update ('U') or Delete ('D') message (the whole message) ->
    /// (row, before, unchanged): row and before as capture JSON text (bytes) or None, as
    /// PgoutputDecoder._change gives them (a Delete's old row is its row); unchanged: a tuple of
    /// the set-column positions whose unchanged TOASTed value is not known. None: decode it in Python.
    fn change<'py>(&self, py: Python<'py>, data: &[u8]) -> PyResult<PyObject> {
        let Some((row, before, unchanged)) = self.decode(data) else {
            return Ok(py.None());
        };
        let bytes = |b: Option<Vec<u8>>| -> PyObject {
            match b {
                Some(b) => PyBytes::new(py, &b).into_any().unbind(),
                None => py.None(),
            }
        };
        let unchanged = PyTuple::new(py, unchanged)?.into_any().unbind();
        Ok(PyTuple::new(py, [bytes(row), bytes(before), unchanged])?.into_any().unbind())
    }
}

impl PgoutputRows {
    fn decode(&self, data: &[u8]) -> Option<Decoded> {
        let kind = *data.first()?;
        if !matches!(kind, b'I' | b'U' | b'D') {
            return None;
        }
        let mut pos = 5;
        let full = data.get(pos) == Some(&b'O');
        let mut old = None;
        if matches!(data.get(pos), Some(b'K' | b'O')) {
            let (cols, next) = tuple(data, pos + 1)?;
            old = Some(cols);
            pos = next;
        }
        let mut new = None;
        if kind != b'D' {
            if data.get(pos) != Some(&b'N') {
                return None;
            }
            let (cols, next) = tuple(data, pos + 1)?;
            new = Some(cols);
            pos = next;
        }
        if pos != data.len() {
            return None;
        }
        let (mut row, mut unchanged) = match &new {
            Some(cols) => {
                let (row, unchanged) = self.row(cols, old.as_deref(), full)?;
                (Some(row), unchanged)
            }
            None => (None, Vec::new()),
        };
        let mut before = match &old {
            Some(cols) => {
                let (row, missing) = self.row(cols, None, false)?;
                if !missing.is_empty() {
                    return None; // an old row without a value: Python names the error
                }
                Some(row)
            }
            None => None,
        };
        if kind == b'D' {
            row = before.take();
            unchanged.clear();
        }
        Some((row, before, unchanged))
    }

    /// PgoutputDecoder._row: the set's row of a TupleData as JSON, and its unchanged positions.
    fn row(&self, values: &[Col], old: Option<&[Col]>, full: bool) -> Option<(Vec<u8>, Vec<usize>)> {
        let mut out = Vec::with_capacity(256);
        let mut unchanged = Vec::new();
        out.push(b'[');
        for (i, (&pick, &(form, array))) in self.picks.iter().zip(&self.forms).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let mut col = *values.get(pick)?;
            if col == Col::Unchanged {
                let known = match old {
                    Some(cols) => *cols.get(pick)?,
                    None => Col::Null,
                };
                if known == Col::Unchanged || (known == Col::Null && !full) {
                    unchanged.push(i);
                    out.extend_from_slice(b"null");
                    continue;
                }
                col = known;
            }
            match col {
                Col::Text(text) if array => array_value(form, text, &mut out)?,
                Col::Text(text) => value(form, text, &mut out)?,
                _ => out.extend_from_slice(b"null"),
            }
        }
        out.push(b']');
        Some((out, unchanged))
    }
}

/// TupleData at pos -> (its columns, the position after it); None for a binary column or a
/// malformed one (pgoutput_decoder._tuple raises there). Every text must be UTF-8, as
/// _tuple decodes them all.
fn tuple(data: &[u8], mut pos: usize) -> Option<(Vec<Col<'_>>, usize)> {
    let n = u16::from_be_bytes(data.get(pos..pos + 2)?.try_into().ok()?) as usize;
    pos += 2;
    let mut cols = Vec::with_capacity(n);
    for _ in 0..n {
        let kind = *data.get(pos)?;
        pos += 1;
        match kind {
            b't' => {
                let size = u32::from_be_bytes(data.get(pos..pos + 4)?.try_into().ok()?) as usize;
                let bytes = data.get(pos + 4..pos + 4 + size)?;
                cols.push(Col::Text(std::str::from_utf8(bytes).ok()?));
                pos += 4 + size;
            }
            b'n' => cols.push(Col::Null),
            b'u' => cols.push(Col::Unchanged),
            _ => return None,
        }
    }
    Some((cols, pos))
}

/// Appends the capture JSON of a non-null column text of form (textforms' converter of it).
fn value(form: Form, text: &str, out: &mut Vec<u8>) -> Option<()> {
    match form {
        Form::Bool => out.extend_from_slice(match text {
            "t" => b"true",
            "f" => b"false",
            _ => return None,
        }),
        Form::Int => {
            if !is_json_int(text) || text == "-0" || text.len() > 40 {
                return None;
            }
            out.extend_from_slice(text.as_bytes());
        }
        Form::Float => float(text, out)?,
        Form::Date => write_int(date(text)?, out),
        Form::Time => write_int(time(text)?, out),
        Form::Timestamp => write_int(timestamp(text)?, out),
        Form::Interval => {
            let (months, days, us) = interval(text)?;
            out.push(b'[');
            write_int(months, out);
            out.push(b',');
            write_int(days, out);
            out.push(b',');
            write_int(us, out);
            out.push(b']');
        }
        Form::Bytea => json::write_str(text.strip_prefix("\\x")?, out),
        Form::Text => json::write_str(text, out),
        Form::Python => return None,
    }
    Some(())
}

/// textforms._array for a one-dimensional array_out text with lower bound 1 (``{a,NULL,"b c"}``,
/// ``{}``): the JSON array of its element forms. A nested array, a bounds decoration or an
/// element with surrounding blanks is left to Python.
fn array_value(form: Form, text: &str, out: &mut Vec<u8>) -> Option<()> {
    let body = text.strip_prefix('{')?.strip_suffix('}')?;
    out.push(b'[');
    if body.is_empty() {
        out.push(b']');
        return Some(());
    }
    let b = body.as_bytes();
    let mut pos = 0;
    let mut first = true;
    loop {
        if !first {
            out.push(b',');
        }
        first = false;
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
            value(form, &item, out)?;
        } else {
            let end = b[pos..].iter().position(|&c| c == b',').map_or(b.len(), |n| pos + n);
            let word = &body[pos..end];
            if word.is_empty() || word.contains(['{', '}', '"', '\\']) || word.trim() != word {
                return None;
            }
            if word == "NULL" {
                out.extend_from_slice(b"null");
            } else {
                value(form, word, out)?;
            }
            pos = end;
        }
        match b.get(pos) {
            None => break,
            Some(b',') => pos += 1,
            _ => return None,
        }
    }
    out.push(b']');
    Some(())
}

fn write_int(n: i128, out: &mut Vec<u8>) {
    out.extend_from_slice(n.to_string().as_bytes());
}

/// textforms._float: the special values as strings, "-0" as -0.0, else the number token
/// itself (json.loads reads it as the converter does).
fn float(text: &str, out: &mut Vec<u8>) -> Option<()> {
    match text {
        "NaN" | "Infinity" | "-Infinity" => json::write_str(text, out),
        "-0" => out.extend_from_slice(b"-0.0"),
        _ if is_json_number(text) && text.len() <= 40 => out.extend_from_slice(text.as_bytes()),
        _ => return None,
    }
    Some(())
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

/// A run of 1..=max ASCII digits at the start of s: (value, rest).
fn number(s: &str, min: usize, max: usize) -> Option<(i128, &str)> {
    let n = digits_len(s.as_bytes());
    if n < min || n > max {
        return None;
    }
    Some((s[..n].parse().ok()?, &s[n..]))
}

/// Exactly two ASCII digits at the start of s.
fn two(s: &str) -> Option<(i128, &str)> {
    let b = s.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_digit() && b[1].is_ascii_digit() && !b.get(2).is_some_and(u8::is_ascii_digit) {
        return Some((((b[0] - b'0') * 10 + (b[1] - b'0')) as i128, &s[2..]));
    }
    None
}

/// temporal.days_from_civil (floor divisions, as Python's //).
fn days_from_civil(year: i128, month: i128, day: i128) -> i128 {
    let year = year - (month <= 2) as i128;
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2).div_euclid(5) + day - 1;
    let doe = yoe * 365 + yoe.div_euclid(4) - yoe.div_euclid(100) + doy;
    era * 146097 + doe - 719468
}

const DAYS_2000: i128 = 10957;

/// "YYYY-MM-DD" (4+ digit year, 9 at most here) -> (days since 1970, rest).
fn civil(s: &str) -> Option<(i128, &str)> {
    let (y, s) = number(s, 4, 9)?;
    let (m, s) = two(s.strip_prefix('-')?)?;
    let (d, s) = two(s.strip_prefix('-')?)?;
    Some((y * 10000 + m * 100 + d, s))
}

/// Days since 1970 of the packed year*10000+month*100+day of civil(), the year BC when bc.
fn days_of(packed: i128, bc: bool) -> i128 {
    let (y, m, d) = (packed / 10000, packed / 100 % 100, packed % 100);
    days_from_civil(if bc { 1 - y } else { y }, m, d)
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
        frac = digits.parse::<i128>().ok()? * 10i128.pow(6 - digits.len() as u32);
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
