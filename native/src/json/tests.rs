//! json.rs against what Python's `json.loads` reads and `json.dumps(..., ensure_ascii=False,
//! separators=(",", ":"))` writes.

use std::borrow::Cow;

use super::*;

fn written(v: &Value) -> String {
    let mut out = Vec::new();
    write(v, &mut out);
    String::from_utf8(out).unwrap()
}

fn str_of(s: &str) -> String {
    let mut out = Vec::new();
    write_str(s, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn parses_a_capture_row() {
    let text = r#"[12345, "C-1", null, true, false, 1.5e3, -7, 12345678901234567890, [], {"a": [1, {}]}]"#;
    let want = Value::Arr(vec![
        Value::Int(12345), Value::Str("C-1".into()), Value::Null, Value::Bool(true), Value::Bool(false),
        Value::Float(1500.0), Value::Int(-7), Value::BigInt("12345678901234567890".into()), Value::Arr(vec![]),
        Value::Obj(vec![("a".into(), Value::Arr(vec![Value::Int(1), Value::Obj(vec![])]))]),
    ]);
    assert_eq!(parse(text, false), Some(want));
    assert_eq!(parse(" \t\r\n1 \n", false), Some(Value::Int(1)));
}

#[test]
fn minus_zero() {
    assert_eq!(parse("-0", false), Some(Value::Int(0))); // json.loads
    let Some(Value::Float(f)) = parse("-0", true) else { panic!("rows.loads_row reads -0 as a float") };
    assert!(f == 0.0 && f.is_sign_negative());
    assert_eq!(parse("-0.0", false), Some(Value::Float(-0.0)));
}

#[test]
fn escapes_decode() {
    let text = r#""q\" b\\ s\/ \b\f\n\r\t \u00e9 \ud83d\ude00 \u0000""#;
    assert_eq!(parse(text, false), Some(Value::Str("q\" b\\ s/ \u{8}\u{c}\n\r\t é 😀 \u{0}".into())));
}

#[test]
fn multi_byte_text_is_borrowed() {
    let text = r#"["héllo 日本 😀", "a\u00e9"]"#;
    let Some(Value::Arr(items)) = parse(text, false) else { panic!("an array") };
    assert!(matches!(&items[0], Value::Str(Cow::Borrowed("héllo 日本 😀"))));
    assert!(matches!(&items[1], Value::Str(Cow::Owned(s)) if s == "aé"));
}

#[test]
fn refuses_what_python_reads_otherwise() {
    let refused = [
        "NaN", "Infinity", "-Infinity", r#"{"a": 1, "a": 2}"#, r#""\ud800""#, r#""\ud800\u0041""#, "\"a\u{1}b\"",
        "01", "1.", ".5", "1e", "+1", "[1,]", "{\"a\" 1}", "[1] x", "tru", "\"\\x\"", r#""\u12g4""#, "",
    ];
    for text in refused {
        assert_eq!(parse(text, false), None, "{text:?}");
    }
}

#[test]
fn truncated_input_is_refused() {
    let whole = r#"{"k": ["a\n", 1.5, null, {"x": true}], "é": "日本"}"#;
    assert!(parse(whole, false).is_some());
    for (end, _) in whole.char_indices().skip(1) {
        assert_eq!(parse(&whole[..end], false), None, "cut at {end}: {:?}", &whole[..end]);
    }
}

#[test]
fn nesting_limit() {
    let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
    assert!(parse(&deep(MAX_DEPTH + 1), false).is_some());
    assert_eq!(parse(&deep(MAX_DEPTH + 2), false), None);
}

#[test]
fn integers_beyond_i64() {
    assert_eq!(parse("9223372036854775807", false), Some(Value::Int(i64::MAX)));
    assert_eq!(parse("-9223372036854775809", false), Some(Value::BigInt("-9223372036854775809".into())));
    assert_eq!(parse(&"9".repeat(4300), false), None); // beyond Python's int digit limit
}

#[test]
fn writes_compact_json() {
    let text = r#"[1, -2, 1.0, 2.5e-7, 1e16, "a", [], {"k": null, "l": [true, false]}, 123456789012345678901]"#;
    let v = parse(text, false).unwrap();
    assert_eq!(written(&v), r#"[1,-2,1.0,2.5e-07,1e+16,"a",[],{"k":null,"l":[true,false]},123456789012345678901]"#);
    assert_eq!(written(&Value::Int(i64::MIN)), i64::MIN.to_string());
}

#[test]
fn write_str_escapes_as_python() {
    assert_eq!(str_of("plain"), r#""plain""#);
    assert_eq!(str_of("a\"b\\c"), r#""a\"b\\c""#);
    assert_eq!(str_of("\n\r\t\u{8}\u{c}"), r#""\n\r\t\b\f""#);
    assert_eq!(str_of("\u{0}\u{1f}\u{7f}"), "\"\\u0000\\u001f\u{7f}\""); // DEL is not escaped
    assert_eq!(str_of("é 日本 😀 /"), "\"é 日本 😀 /\""); // ensure_ascii=False; no \/
}

#[test]
fn next_special_finds_each_position() {
    // every position in and around the eight-byte words, with multi-byte text before it
    for special in [b'"', b'\\', b'\n', 0x00, 0x1f] {
        for at in 0..24 {
            let mut s = "é".repeat(12).into_bytes();
            s[at] = special;
            let naive = s.iter().position(|&b| SPECIAL[b as usize]).unwrap();
            assert_eq!(next_special(&s, 0), naive, "{special:#x} at {at}");
        }
    }
    assert_eq!(next_special(b"no specials here at all", 0), 23);
    assert_eq!(next_special(b"a\"b\"", 2), 3);
}
