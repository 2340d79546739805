//! JSON read and written exactly as Python's `json` module does it in pgshovel2: `json.loads`
//! (with `rows.loads_row`'s `-0` rule when asked) and
//! `json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))`.
//!
//! Floats are written by [`pyfloat`].
//!
//! Anything Python would read differently from this grammar (NaN/Infinity literals, duplicate
//! object keys, lone surrogates, nesting deeper than `MAX_DEPTH`) is refused with `None`, so the
//! caller leaves that row to the Python codec.

use std::borrow::Cow;

use crate::digits;
use crate::pyfloat;

/// A parsed JSON value; `BigInt` keeps an integer token beyond i64 as its digits. A string
/// without escapes borrows its text from the parsed text (most of a row's strings: no
/// allocation or copy for them).
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    BigInt(String),
    Float(f64),
    Str(Cow<'a, str>),
    Arr(Vec<Value<'a>>),
    Obj(Vec<(Cow<'a, str>, Value<'a>)>),
}

pub(crate) const MAX_DEPTH: usize = 200;

/// The bytes that end a run of a JSON string's plain characters: '"', '\\' and the control
/// characters (a table: one load a byte where three comparisons were).
static SPECIAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Parses a whole JSON text; `minus_zero_float`: the integer token `-0` reads as the float -0.0
/// (rows.loads_row), else as the integer 0 (json.loads).
pub fn parse(text: &str, minus_zero_float: bool) -> Option<Value<'_>> {
    let mut p = Parser::new(text, minus_zero_float);
    let v = p.value(0)?;
    p.ws();
    p.at_end().then_some(v)
}

/// A cursor over a JSON text (also driven token by token by [`crate::canon`]).
pub(crate) struct Parser<'a> {
    /// The text parsed, and its bytes (s): a run between ASCII delimiters is a str slice of it,
    /// checked UTF-8 once for the whole text rather than per run.
    text: &'a str,
    pub(crate) s: &'a [u8],
    pub(crate) pos: usize,
    minus_zero_float: bool,
}

impl<'a> Parser<'a> {
    pub(crate) fn new(text: &'a str, minus_zero_float: bool) -> Self {
        Parser { text, s: text.as_bytes(), pos: 0, minus_zero_float }
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos == self.s.len()
    }

    /// The next byte, if any.
    pub(crate) fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    pub(crate) fn ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    pub(crate) fn lit(&mut self, word: &[u8], v: Value<'a>) -> Option<Value<'a>> {
        if self.s[self.pos..].starts_with(word) {
            self.pos += word.len();
            Some(v)
        } else {
            None
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        match *self.s.get(self.pos)? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(Value::Str),
            b'n' => self.lit(b"null", Value::Null),
            b't' => self.lit(b"true", Value::Bool(true)),
            b'f' => self.lit(b"false", Value::Bool(false)),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn array(&mut self, depth: usize) -> Option<Value<'a>> {
        self.pos += 1;
        let mut out = Vec::new();
        self.ws();
        if self.s.get(self.pos) == Some(&b']') {
            self.pos += 1;
            return Some(Value::Arr(out));
        }
        loop {
            out.push(self.value(depth + 1)?);
            self.ws();
            match *self.s.get(self.pos)? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(Value::Arr(out));
                }
                _ => return None,
            }
        }
    }

    fn object(&mut self, depth: usize) -> Option<Value<'a>> {
        self.pos += 1;
        let mut out: Vec<(Cow<'a, str>, Value<'a>)> = Vec::new();
        self.ws();
        if self.s.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            return Some(Value::Obj(out));
        }
        loop {
            self.ws();
            if self.s.get(self.pos) != Some(&b'"') {
                return None;
            }
            let key = self.string()?;
            self.ws();
            if self.s.get(self.pos) != Some(&b':') {
                return None;
            }
            self.pos += 1;
            let v = self.value(depth + 1)?;
            if out.iter().any(|(k, _)| *k == key) {
                return None; // a Python dict keeps the first position and the last value
            }
            out.push((key, v));
            self.ws();
            match *self.s.get(self.pos)? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(Value::Obj(out));
                }
                _ => return None,
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = std::str::from_utf8(self.s.get(self.pos..self.pos + 4)?).ok()?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.pos += 4;
        u32::from_str_radix(digits, 16).ok()
    }

    /// The string at pos (its opening quote): borrowed from the text when it has no escape.
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        self.pos += 1;
        let start = self.pos;
        self.run();
        if *self.s.get(self.pos)? == b'"' {
            self.pos += 1;
            return Some(Cow::Borrowed(self.text.get(start..self.pos - 1)?));
        }
        self.escaped_string(start).map(Cow::Owned)
    }

    /// Moves pos to the next '"', '\\' or control character (or the end).
    fn run(&mut self) {
        self.pos = next_special(self.s, self.pos);
    }

    /// The rest of a string from start, with pos at its first special byte (string() found it).
    fn escaped_string(&mut self, mut start: usize) -> Option<String> {
        // decoded, it is no longer than the rest of the text: one allocation, not one per doubling
        let mut out = String::with_capacity((self.s.len() - start).min(1024));
        loop {
            out.push_str(self.text.get(start..self.pos)?); // ends at ASCII bytes: char boundaries
            match *self.s.get(self.pos)? {
                b'"' => {
                    self.pos += 1;
                    return Some(out);
                }
                b'\\' => {
                    self.pos += 1;
                    let esc = *self.s.get(self.pos)?;
                    self.pos += 1;
                    match esc {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.unicode_escape()?),
                        _ => return None,
                    }
                }
                _ => return None, // a control character: json.loads (strict) refuses it
            }
            start = self.pos;
            self.run();
        }
    }

    fn unicode_escape(&mut self) -> Option<char> {
        let hi = self.hex4()?;
        if (0xD800..0xDC00).contains(&hi) {
            if self.s.get(self.pos..self.pos + 2)? != b"\\u" {
                return None; // a lone surrogate: no UTF-8 form
            }
            self.pos += 2;
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return None;
            }
            return char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
        }
        char::from_u32(hi)
    }

    pub(crate) fn number(&mut self) -> Option<Value<'a>> {
        let start = self.pos;
        let digits = |p: &mut Self| {
            let from = p.pos;
            while p.pos < p.s.len() && p.s[p.pos].is_ascii_digit() {
                p.pos += 1;
            }
            p.pos - from
        };
        if self.s[self.pos] == b'-' {
            self.pos += 1;
        }
        let first = *self.s.get(self.pos)?;
        let n = digits(self);
        if n == 0 || (first == b'0' && n > 1) {
            return None;
        }
        let mut float = false;
        if self.s.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            float = true;
            if digits(self) == 0 {
                return None;
            }
        }
        if matches!(self.s.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            float = true;
            if matches!(self.s.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        let token = self.text.get(start..self.pos)?; // ASCII: no UTF-8 check needed
        if float {
            return token.parse::<f64>().ok().map(Value::Float);
        }
        if token == "-0" {
            return Some(if self.minus_zero_float { Value::Float(-0.0) } else { Value::Int(0) });
        }
        Some(match token.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) if token.len() < 4300 => Value::BigInt(token.to_string()), // Python's int digit limit
            Err(_) => return None,
        })
    }
}

/// The index of the first '"', '\\' or control character of s at or after from (s.len(): none).
/// Eight bytes at a time: a word without one is passed whole (the SWAR tests of "has a zero
/// byte" and "has a byte below n" are exact about whether the word has one, if not where).
pub(crate) fn next_special(s: &[u8], from: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x;
    let mut i = from;
    while let Some(word) = s.get(i..i + 8) {
        let x = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let hits = has_zero(x ^ (ONES * b'"' as u64)) | has_zero(x ^ (ONES * b'\\' as u64))
            | (x.wrapping_sub(ONES * 0x20) & !x);
        if hits & HIGH != 0 {
            break;
        }
        i += 8;
    }
    s[i..].iter().position(|&b| SPECIAL[b as usize]).map_or(s.len(), |n| i + n)
}

/// Appends s as a JSON string, escaped as Python's encoder does with ensure_ascii=False.
pub fn write_str(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    // Only '"', '\\' and control characters are escaped: runs without them are copied whole.
    loop {
        let i = next_special(bytes, start);
        let Some(&b) = bytes.get(i) else { break };
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            _ => b"",
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(format!("\\u{:04x}", b).as_bytes());
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends v as compact JSON (Python's json.dumps with separators (",", ":")).
pub fn write(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Int(i) => digits::push_int(*i, out),
        Value::BigInt(t) => out.extend_from_slice(t.as_bytes()),
        Value::Float(f) => pyfloat::write_float(*f, out),
        Value::Str(s) => write_str(s, out),
        Value::Arr(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Value::Obj(fields) => {
            out.push(b'{');
            for (i, (k, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(k, out);
                out.push(b':');
                write(item, out);
            }
            out.push(b'}');
        }
    }
}

#[cfg(test)]
mod tests;
