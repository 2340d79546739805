//! JSON read and written exactly as Python's `json` module does it in pgshovel2: `json.loads`
//! (with `rows.loads_row`'s `-0` rule when asked) and
//! `json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))`.
//!
//! Anything Python would read differently from this grammar (NaN/Infinity literals, duplicate
//! object keys, lone surrogates, nesting deeper than `MAX_DEPTH`) is refused with `None`, so the
//! caller leaves that row to the Python codec.

/// A parsed JSON value; `BigInt` keeps an integer token beyond i64 as its digits.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    BigInt(String),
    Float(f64),
    Str(String),
    Arr(Vec<Value>),
    Obj(Vec<(String, Value)>),
}

const MAX_DEPTH: usize = 200;

/// Parses a whole JSON text; `minus_zero_float`: the integer token `-0` reads as the float -0.0
/// (rows.loads_row), else as the integer 0 (json.loads).
pub fn parse(text: &str, minus_zero_float: bool) -> Option<Value> {
    let mut p = Parser { s: text.as_bytes(), pos: 0, minus_zero_float };
    let v = p.value(0)?;
    p.ws();
    (p.pos == p.s.len()).then_some(v)
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    minus_zero_float: bool,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn lit(&mut self, word: &[u8], v: Value) -> Option<Value> {
        if self.s[self.pos..].starts_with(word) {
            self.pos += word.len();
            Some(v)
        } else {
            None
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
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

    fn array(&mut self, depth: usize) -> Option<Value> {
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

    fn object(&mut self, depth: usize) -> Option<Value> {
        self.pos += 1;
        let mut out: Vec<(String, Value)> = Vec::new();
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

    fn string(&mut self) -> Option<String> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let start = self.pos;
            while self.pos < self.s.len() && !matches!(self.s[self.pos], b'"' | b'\\' | 0..=0x1f) {
                self.pos += 1;
            }
            out.push_str(std::str::from_utf8(&self.s[start..self.pos]).ok()?);
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

    fn number(&mut self) -> Option<Value> {
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
        let token = std::str::from_utf8(&self.s[start..self.pos]).ok()?;
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

/// Appends s as a JSON string, escaped as Python's encoder does with ensure_ascii=False.
pub fn write_str(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
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

/// Appends Python's `repr(f)` (json writes it so; NaN and the infinities as its literals).
pub fn write_float(f: f64, out: &mut Vec<u8>) {
    if f.is_nan() {
        out.extend_from_slice(b"NaN");
        return;
    }
    if f.is_infinite() {
        out.extend_from_slice(if f > 0.0 { b"Infinity" } else { b"-Infinity" });
        return;
    }
    let sci = format!("{:e}", f); // shortest round-trip digits: "-1.25e-7"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let mut digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if let Some(even) = half_even(f.abs(), &digits, exp) {
        digits = even;
    }
    if neg {
        out.push(b'-');
    }
    let decpt = exp + 1;
    let n = digits.len() as i32;
    let text = if decpt > -4 && decpt <= 16 {
        if decpt <= 0 {
            format!("0.{}{}", "0".repeat((-decpt) as usize), digits)
        } else if decpt >= n {
            format!("{}{}.0", digits, "0".repeat((decpt - n) as usize))
        } else {
            format!("{}.{}", &digits[..decpt as usize], &digits[decpt as usize..])
        }
    } else {
        let rest = if n > 1 { format!(".{}", &digits[1..]) } else { String::new() };
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}{}e{}{:02}", &digits[..1], rest, sign, exp.abs())
    };
    out.extend_from_slice(text.as_bytes());
}

/// When |f|'s exact value lies exactly halfway between two n-digit strings, one of them Rust's
/// shortest digits, and the other has the even last digit and also reads back as f: that one
/// (Python's repr rounds half to even there; Rust's shortest digits round half up).
fn half_even(f: f64, digits: &str, exp: i32) -> Option<String> {
    let exact = exact_digits(f)?;
    let n = digits.len();
    if exact.len() != n + 1 || !exact.ends_with('5') {
        return None;
    }
    let lo = &exact[..n];
    let last = lo.as_bytes()[n - 1];
    if last == b'9' {
        return None;
    }
    let hi = format!("{}{}", &lo[..n - 1], (last + 1) as char);
    if digits != lo && digits != hi {
        return None;
    }
    let even = if (last - b'0').is_multiple_of(2) { lo.to_string() } else { hi };
    let text = format!("{}.{}e{}", &even[..1], &even[1..], exp);
    (even != digits && text.parse::<f64>().ok() == Some(f)).then_some(even)
}

/// The significant digits (no trailing zeros) of a finite positive f's exact decimal value.
fn exact_digits(f: f64) -> Option<String> {
    let bits = f.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    let (mut m, mut e) = if biased == 0 { (frac, -1074) } else { (frac | (1 << 52), biased - 1075) };
    if m == 0 {
        return None;
    }
    while m & 1 == 0 {
        m >>= 1;
        e += 1;
    }
    let text = if e < 0 {
        if -e > 26 {
            return None; // m * 5^-e has more than 18 digits: no tie at <= 17 digits
        }
        (m as u128 * 5u128.pow((-e) as u32)).to_string()
    } else {
        let mut limbs: Vec<u64> = vec![m % 1_000_000_000, m / 1_000_000_000 % 1_000_000_000, m / 1_000_000_000_000_000_000];
        for _ in 0..e {
            let mut carry = 0;
            for limb in limbs.iter_mut() {
                let v = *limb * 2 + carry;
                *limb = v % 1_000_000_000;
                carry = v / 1_000_000_000;
            }
            if carry > 0 {
                limbs.push(carry);
            }
        }
        while limbs.len() > 1 && limbs.last() == Some(&0) {
            limbs.pop();
        }
        let mut text = limbs.last()?.to_string();
        for limb in limbs.iter().rev().skip(1) {
            text.push_str(&format!("{limb:09}"));
        }
        text
    };
    Some(text.trim_end_matches('0').to_string())
}

/// Appends v as compact JSON (Python's json.dumps with separators (",", ":")).
pub fn write(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
        Value::BigInt(t) => out.extend_from_slice(t.as_bytes()),
        Value::Float(f) => write_float(*f, out),
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

/// True when some object in v has exactly one key, `pgshovel.json` (jsonvalue._looks_like_escape).
pub fn looks_like_escape(v: &Value) -> bool {
    match v {
        Value::Obj(fields) => {
            (fields.len() == 1 && fields[0].0 == "pgshovel.json") || fields.iter().any(|(_, x)| looks_like_escape(x))
        }
        Value::Arr(items) => items.iter().any(looks_like_escape),
        _ => false,
    }
}
