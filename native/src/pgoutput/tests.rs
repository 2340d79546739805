//! pgoutput.rs and forms.rs on pgoutput messages as PostgreSQL sends them and the texts its
//! output functions print (the pinned settings: DateStyle ISO, TimeZone UTC, IntervalStyle
//! postgres, extra_float_digits 3).

use std::borrow::Cow;

use super::forms::{array_of, array_value, value, value_of, Form};
use super::*;
use crate::json;

/// A TupleData: per column Some(text) ('t'), None (NULL, 'n'), or Some("\u{0}u") (unchanged, 'u').
fn tuple_data(cols: &[Option<&str>]) -> Vec<u8> {
    let mut out = (cols.len() as u16).to_be_bytes().to_vec();
    for col in cols {
        match col {
            Some("\u{0}u") => out.push(b'u'),
            Some(text) => {
                out.push(b't');
                out.extend_from_slice(&(text.len() as u32).to_be_bytes());
                out.extend_from_slice(text.as_bytes());
            }
            None => out.push(b'n'),
        }
    }
    out
}

/// An I/U/D message of relation 16384: its old tuple ('K' or 'O' and its columns), then its new one.
fn message(kind: u8, old: Option<(u8, &[Option<&str>])>, new: Option<&[Option<&str>]>) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&16384u32.to_be_bytes());
    if let Some((tag, cols)) = old {
        out.push(tag);
        out.extend(tuple_data(cols));
    }
    if let Some(cols) = new {
        out.push(b'N');
        out.extend(tuple_data(cols));
    }
    out
}

const U: Option<&str> = Some("\u{0}u");

/// The set's columns: the relation's 1st, 3rd, 4th and 5th (its 2nd is not in the set).
fn rows() -> PgoutputRows {
    PgoutputRows { picks: vec![0, 2, 3, 4],
                   forms: vec![(Form::Int, false), (Form::Text, false), (Form::Date, false), (Form::Text, true)] }
}

const ROW: [Option<&str>; 5] = [Some("42"), None, Some("héllo \"q\" 日本"), Some("2000-03-01"), Some(r#"{a,NULL,"b c","x\"y"}"#)];
const ROW_JSON: &str = r#"[42,"héllo \"q\" 日本",60,["a",null,"b c","x\"y"]]"#;

fn text(b: Option<Vec<u8>>) -> Option<String> {
    b.map(|b| String::from_utf8(b).unwrap())
}

fn decoded(data: &[u8]) -> Option<(Option<String>, Option<String>, Vec<usize>)> {
    rows().decode(data).map(|(row, before, unchanged)| (text(row), text(before), unchanged))
}

#[test]
fn insert() {
    let got = decoded(&message(b'I', None, Some(&ROW)));
    assert_eq!(got, Some((Some(ROW_JSON.into()), None, vec![])));
}

#[test]
fn values_are_what_the_json_parses_to() {
    let data = message(b'I', None, Some(&ROW));
    let (kind, row, before, unchanged) = rows().values(&data).unwrap();
    assert_eq!((kind, before, unchanged), (b'I', None, vec![]));
    assert_eq!(json::Value::Arr(row.unwrap()), json::parse(ROW_JSON, true).unwrap());
}

#[test]
fn update_with_unchanged_toast() {
    let new = [Some("42"), None, Some("b"), Some("1999-12-31"), U];
    // replica identity default: the key's old tuple ('K'), the unchanged value not known
    let key = [Some("41"), None, None, None, None];
    let got = decoded(&message(b'U', Some((b'K', &key)), Some(&new)));
    assert_eq!(got, Some((Some(r#"[42,"b",-1,null]"#.into()), Some("[41,null,null,null]".into()), vec![3])));
    // replica identity full ('O'): the old tuple has the value
    let got = decoded(&message(b'U', Some((b'O', &ROW)), Some(&new)));
    assert_eq!(got, Some((Some(r#"[42,"b",-1,["a",null,"b c","x\"y"]]"#.into()), Some(ROW_JSON.into()), vec![])));
    // no old tuple
    let got = decoded(&message(b'U', None, Some(&new)));
    assert_eq!(got, Some((Some(r#"[42,"b",-1,null]"#.into()), None, vec![3])));
}

#[test]
fn delete_row_is_its_old_row() {
    let got = decoded(&message(b'D', Some((b'O', &ROW)), None));
    assert_eq!(got, Some((Some(ROW_JSON.into()), None, vec![])));
    // an old row with an unchanged value: Python names the error
    assert_eq!(decoded(&message(b'D', Some((b'O', &[Some("1"), None, U, None, None])), None)), None);
}

#[test]
fn truncated_message_is_refused() {
    let data = message(b'U', Some((b'K', &[Some("41"), None, None, None, None])), Some(&ROW));
    assert!(decoded(&data).is_some());
    for end in 0..data.len() {
        assert_eq!(decoded(&data[..end]), None, "cut at {end}");
    }
    let mut longer = data.clone();
    longer.push(b'n');
    assert_eq!(decoded(&longer), None, "bytes after the tuples");
}

#[test]
fn malformed_messages_are_refused() {
    let mut binary = message(b'I', None, Some(&ROW));
    binary[8] = b'b'; // the first column's kind: binary
    assert_eq!(decoded(&binary), None);
    let mut not_utf8 = message(b'I', None, Some(&[Some("42"), None, Some("ab"), None, None]));
    let at = not_utf8.len() - 4; // inside "ab"
    not_utf8[at] = 0xff;
    assert_eq!(decoded(&not_utf8), None);
    assert_eq!(decoded(&message(b'I', None, Some(&[Some("42"), None]))), None, "fewer columns than picked");
    assert_eq!(decoded(&message(b'I', None, None)), None, "an Insert without its new tuple");
    assert_eq!(decoded(&message(b'T', None, Some(&ROW))), None, "not an I/U/D message");
    assert_eq!(decoded(&message(b'I', None, Some(&[Some("4x2"), None, None, None, None]))), None, "not an int");
}

fn form_json(form: Form, text: &str) -> Option<String> {
    let mut out = Vec::new();
    value(form, text, &mut out)?;
    Some(String::from_utf8(out).unwrap())
}

#[test]
fn scalar_forms() {
    let cases: &[(Form, &str, Option<&str>)] = &[
        (Form::Bool, "t", Some("true")), (Form::Bool, "f", Some("false")), (Form::Bool, "true", None),
        (Form::Int, "-9223372036854775808", Some("-9223372036854775808")),
        (Form::Int, "123456789012345678901234567890", Some("123456789012345678901234567890")),
        (Form::Int, "-0", None), (Form::Int, "007", None), (Form::Int, "1.5", None),
        (Form::Float, "1.5e+300", Some("1.5e+300")), (Form::Float, "-0", Some("-0.0")),
        (Form::Float, "0.123456789012345", Some("0.123456789012345")), (Form::Float, "12345.67", Some("12345.67")),
        (Form::Float, "NaN", Some(r#""NaN""#)), (Form::Float, "-Infinity", Some(r#""-Infinity""#)),
        (Form::Float, "1e", None), (Form::Float, "inf", None),
        (Form::Bytea, "\\x00ff", Some(r#""00ff""#)), (Form::Bytea, "00ff", None),
        (Form::Text, "tab\there \"é\"", Some(r#""tab\there \"é\"""#)), (Form::Python, "x", None),
    ];
    for (form, text, want) in cases {
        assert_eq!(form_json(*form, text).as_deref(), *want, "{text:?}");
    }
}

#[test]
fn temporal_forms() {
    let int = |form: Form, text: &str| match value_of(form, Cow::Borrowed(text)) {
        Some(json::Value::Int(i)) => Some(i),
        _ => None,
    };
    assert_eq!(int(Form::Date, "2000-01-01"), Some(0));
    assert_eq!(int(Form::Date, "2026-11-23"), Some(9823));
    assert_eq!(int(Form::Date, "2024-02-29"), Some(8825));
    assert_eq!(int(Form::Date, "1900-02-28"), Some(-36466));
    assert_eq!(int(Form::Date, "0001-01-01 BC"), Some(-730485));
    assert_eq!(int(Form::Date, "infinity"), Some(i32::MAX as i64));
    assert_eq!(int(Form::Date, "2000-1-01"), None);
    assert_eq!(int(Form::Date, "2000-01-01 AD"), None);
    assert_eq!(int(Form::Time, "12:34:56.123456"), Some(45_296_123_456));
    assert_eq!(int(Form::Time, "24:00:00"), Some(86_400_000_000));
    assert_eq!(int(Form::Time, "12:34:56.1234567"), None);
    assert_eq!(int(Form::Timestamp, "2026-11-23 12:34:56.123456+00"), Some(848_752_496_123_456));
    assert_eq!(int(Form::Timestamp, "2026-11-23 12:34:56+05:30"), Some(848_732_696_000_000));
    assert_eq!(int(Form::Timestamp, "2000-01-01 00:00:00"), Some(0));
    assert_eq!(int(Form::Timestamp, "-infinity"), Some(i64::MIN));
    assert_eq!(int(Form::Timestamp, "2000-01-01T00:00:00"), None);
    assert_eq!(form_json(Form::Interval, "1 year 2 mons -3 days 04:05:06.5").as_deref(), Some("[14,-3,14706500000]"));
    assert_eq!(form_json(Form::Interval, "-04:05:06").as_deref(), Some("[0,0,-14706000000]"));
    assert_eq!(form_json(Form::Interval, "00:00:00").as_deref(), Some("[0,0,0]"));
    assert_eq!(form_json(Form::Interval, "1 fortnight"), None);
    assert_eq!(form_json(Form::Interval, ""), None);
}

#[test]
fn array_forms() {
    let json = |form: Form, text: &str| {
        let mut out = Vec::new();
        array_value(form, text, &mut out).map(|()| String::from_utf8(out).unwrap())
    };
    assert_eq!(json(Form::Text, "{}").as_deref(), Some("[]"));
    assert_eq!(json(Form::Int, "{1,NULL,-3}").as_deref(), Some("[1,null,-3]"));
    assert_eq!(json(Form::Text, r#"{é,"日 本","NULL","a\\b","q\"",""}"#).as_deref(),
               Some(r#"["é","日 本","NULL","a\\b","q\"",""]"#));
    for refused in ["{{1,2},{3,4}}", "[0:1]={1,2}", "{1, 2}", "{1,}", "{\"a}", "1,2", "{a\"b}"] {
        assert_eq!(json(Form::Text, refused), None, "{refused:?}");
    }
    assert_eq!(json(Form::Int, "{1,x}"), None, "an element its form refuses");
    let Some(json::Value::Arr(items)) = array_of(Form::Date, "{2000-01-01,NULL}") else { panic!("an array") };
    assert_eq!(items, vec![json::Value::Int(0), json::Value::Null]);
}
