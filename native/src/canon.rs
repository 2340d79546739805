//! jsonvalue.embed of a json/jsonb column's text, in one pass: the text as
//! `json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))` writes it, or the
//! escape object `{"pgshovel.json": text}` where embed gives that, without building a value
//! tree (parsing into a tree and writing it out again was a fifth of a mixed row's cost).
//!
//! A string without escapes is copied as it stands (the encoder would write the same bytes),
//! numbers are written as json::write writes them. Whatever json::parse refuses (duplicate
//! keys, lone surrogates, NaN) gives None here too, as does a number beyond a double's range
//! (embed escapes that value). A value nested deeper than MAX_EMBED_DEPTH arrays and objects is
//! escaped as it stands, found by one pass over its text (jsonvalue.too_deep): nothing here
//! recurses deeper than that.

use std::borrow::Cow;

use crate::json::{self, Parser, Value, MAX_DEPTH};

const ESCAPE_KEY: &str = "pgshovel.json";
/// jsonvalue.MAX_EMBED_DEPTH: levels of arrays and objects a value may have and travel embedded.
pub const MAX_EMBED_DEPTH: usize = 100;
const _: () = assert!(MAX_EMBED_DEPTH < MAX_DEPTH);

/// The top-level value's shape, which embed's escape rule looks at.
#[derive(PartialEq)]
enum Shape {
    Null,
    Array,
    Other,
}

struct Canon<'a, 'o> {
    p: Parser<'a>,
    out: &'o mut Vec<u8>,
    /// The keys of the open objects, the innermost's last (its duplicates are refused).
    keys: Vec<Cow<'a, str>>,
    /// Some object has the one key ESCAPE_KEY (jsonvalue._looks_like_escape).
    escape_like: bool,
}

/// Appends the JSON-encoding value of a json/jsonb value given as its text; element: an
/// element of an array column (a JSON array is escaped then). None when json.loads would
/// refuse the text or read it otherwise than this grammar (the Python codec decides).
pub fn embed(text: &str, element: bool, out: &mut Vec<u8>) -> Option<()> {
    let start = out.len();
    if too_deep(text.as_bytes(), MAX_EMBED_DEPTH) {
        escape(text, out);
        return Some(());
    }
    let mut c = Canon { p: Parser::new(text, false), out, keys: Vec::new(), escape_like: false };
    let shape = c.value(0).filter(|_| {
        c.p.ws();
        c.p.at_end()
    });
    let escape_like = c.escape_like;
    match shape {
        None => {
            out.truncate(start);
            None
        }
        Some(shape) => {
            if shape == Shape::Null || (element && shape == Shape::Array) || escape_like {
                out.truncate(start);
                escape(text, out);
            }
            Some(())
        }
    }
}

/// Appends the escape object `{"pgshovel.json": text}`.
fn escape(text: &str, out: &mut Vec<u8>) {
    out.push(b'{');
    json::write_str(ESCAPE_KEY, out);
    out.push(b':');
    json::write_str(text, out);
    out.push(b'}');
}

/// True when the JSON text nests more than limit levels of arrays and objects (brackets inside
/// strings do not count), in one pass over its bytes, as jsonvalue.too_deep counts them.
pub fn too_deep(text: &[u8], limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

impl<'a> Canon<'a, '_> {
    fn value(&mut self, depth: usize) -> Option<Shape> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.p.ws();
        let (word, shape): (&[u8], Shape) = match self.p.peek()? {
            b'{' => return self.object(depth).map(|_| Shape::Other),
            b'[' => return self.array(depth).map(|_| Shape::Array),
            b'"' => return self.string().map(|_| Shape::Other),
            b'-' | b'0'..=b'9' => {
                let number = self.p.number()?;
                if matches!(number, Value::Float(f) if !f.is_finite()) {
                    return None; // beyond a double's range: embed escapes the value
                }
                json::write(&number, self.out);
                return Some(Shape::Other);
            }
            b'n' => (b"null", Shape::Null),
            b't' => (b"true", Shape::Other),
            b'f' => (b"false", Shape::Other),
            _ => return None,
        };
        self.p.lit(word, Value::Null)?;
        self.out.extend_from_slice(word);
        Some(shape)
    }

    /// Writes the string at the cursor; returns its decoded text (an object key is compared).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let start = self.p.pos;
        let text = self.p.string()?;
        match &text {
            Cow::Borrowed(_) => self.out.extend_from_slice(&self.p.s[start..self.p.pos]),
            Cow::Owned(decoded) => json::write_str(decoded, self.out),
        }
        Some(text)
    }

    /// Consumes `close` (after whitespace) when it comes next: an empty container.
    fn empty(&mut self, close: u8) -> bool {
        self.p.ws();
        let empty = self.p.peek() == Some(close);
        if empty {
            self.p.pos += 1;
            self.out.push(close);
        }
        empty
    }

    /// After an item: true at ',' (another follows), false at `close`; None for anything else.
    fn more(&mut self, close: u8) -> Option<bool> {
        self.p.ws();
        let b = self.p.peek()?;
        if b != b',' && b != close {
            return None;
        }
        self.p.pos += 1;
        self.out.push(b);
        Some(b == b',')
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.p.pos += 1;
        self.out.push(b'[');
        if self.empty(b']') {
            return Some(());
        }
        loop {
            self.value(depth + 1)?;
            if !self.more(b']')? {
                return Some(());
            }
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        self.p.pos += 1;
        self.out.push(b'{');
        if self.empty(b'}') {
            return Some(());
        }
        let base = self.keys.len();
        loop {
            self.p.ws();
            if self.p.peek() != Some(b'"') {
                return None;
            }
            let key = self.string()?;
            if self.keys[base..].contains(&key) {
                return None; // a Python dict keeps the first position and the last value
            }
            self.keys.push(key);
            self.p.ws();
            if self.p.peek() != Some(b':') {
                return None;
            }
            self.p.pos += 1;
            self.out.push(b':');
            self.value(depth + 1)?;
            if !self.more(b'}')? {
                break;
            }
        }
        self.escape_like |= self.keys.len() == base + 1 && self.keys[base] == ESCAPE_KEY;
        self.keys.truncate(base);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedded(text: &str, element: bool) -> Option<String> {
        let mut out = b"<".to_vec(); // embed appends: what is there stays, whatever it gives
        let got = embed(text, element, &mut out);
        assert!(out.starts_with(b"<"));
        got.map(|()| String::from_utf8(out[1..].to_vec()).unwrap())
    }

    #[test]
    fn canonical_text() {
        let text = "{ \"b\" : [1, 1.0, 2e3, -0, 1E-7, \"x\"],\n \"a\": {\"n\": null, \"t\": true} }";
        assert_eq!(embedded(text, false).as_deref(),
                   Some(r#"{"b":[1,1.0,2000.0,0,1e-07,"x"],"a":{"n":null,"t":true}}"#));
        assert_eq!(embedded("  \"s\"  ", false).as_deref(), Some(r#""s""#));
        assert_eq!(embedded("12345678901234567890123", false).as_deref(), Some("12345678901234567890123"));
    }

    #[test]
    fn strings_re_escaped() {
        // \u escapes decode (written as the characters), \/ loses its backslash, multi-byte stays
        assert_eq!(embedded(r#"["\u00e9\u65e5", "a\/b", "日本", "\ud83d\ude00", "tab\there"]"#, false).as_deref(),
                   Some(r#"["é日","a/b","日本","😀","tab\there"]"#));
    }

    #[test]
    fn escaped_forms() {
        // JSON null, an array element that is an array, and an object like the escape itself
        assert_eq!(embedded("null", false).as_deref(), Some(r#"{"pgshovel.json":"null"}"#));
        assert_eq!(embedded("[1, 2]", true).as_deref(), Some(r#"{"pgshovel.json":"[1, 2]"}"#));
        assert_eq!(embedded("[1, 2]", false).as_deref(), Some("[1,2]"));
        assert_eq!(embedded(r#"[{"pgshovel.json": 1}]"#, false).as_deref(),
                   Some(r#"{"pgshovel.json":"[{\"pgshovel.json\": 1}]"}"#));
        assert_eq!(embedded(r#"{"pgshovel.json": 1, "b": 2}"#, false).as_deref(),
                   Some(r#"{"pgshovel.json":1,"b":2}"#));
    }

    #[test]
    fn refused() {
        for text in [r#"{"a": 1, "a": 2}"#, "1e400", "-1e400", "NaN", r#""\udc00""#, "[1,", "{\"a\":", "\"abc", "[1] 2", ""] {
            assert_eq!(embedded(text, false), None, "{text:?}");
        }
        // the same key in two objects is no duplicate
        assert_eq!(embedded(r#"[{"a": 1}, {"a": 2}]"#, false).as_deref(), Some(r#"[{"a":1},{"a":2}]"#));
    }

    #[test]
    fn too_deep_is_escaped_as_it_stands() {
        let deep = "[".repeat(MAX_EMBED_DEPTH + 1) + &"]".repeat(MAX_EMBED_DEPTH + 1);
        assert_eq!(embedded(&deep, false), Some(format!("{{\"pgshovel.json\":\"{deep}\"}}")));
        let limit = "[".repeat(MAX_EMBED_DEPTH) + &"]".repeat(MAX_EMBED_DEPTH);
        assert_eq!(embedded(&limit, false), Some(limit.clone()));
        // brackets inside strings (and after an escaped quote) do not count
        assert!(!too_deep(br#"["[[[", "\"{{{"]"#, 1));
        assert!(too_deep(br#"[["x"]]"#, 1));
    }
}
