//! Python's `repr` of a float (what `json` writes for it), from zmij's shortest digits, rounded
//! half to even where Python's repr differs from them. json.rs writes floats through it; it uses
//! only digits.rs.

use crate::digits::push_uint;

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
    let mut buffer = zmij::Buffer::new();
    let (neg, digits, len, exp) = shortest(buffer.format_finite(f).as_bytes());
    let sig = &digits[..len];
    let even = half_even(f.abs(), std::str::from_utf8(sig).unwrap_or_default(), exp);
    let d = even.as_deref().map_or(sig, str::as_bytes);
    if neg {
        out.push(b'-');
    }
    let decpt = exp + 1;
    let n = d.len() as i32;
    if decpt > -4 && decpt <= 16 {
        if decpt <= 0 {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-decpt) as usize));
            out.extend_from_slice(d);
        } else if decpt >= n {
            out.extend_from_slice(d);
            out.extend(std::iter::repeat_n(b'0', (decpt - n) as usize));
            out.extend_from_slice(b".0");
        } else {
            out.extend_from_slice(&d[..decpt as usize]);
            out.push(b'.');
            out.extend_from_slice(&d[decpt as usize..]);
        }
    } else {
        out.push(d[0]);
        if n > 1 {
            out.push(b'.');
            out.extend_from_slice(&d[1..]);
        }
        out.extend_from_slice(if exp < 0 { b"e-" } else { b"e+" });
        push_uint(exp.unsigned_abs() as u64, 2, out);
    }
}

/// The shortest round-trip digits in zmij's text of a finite float ("-1.25e-7", "0.001",
/// "123.0", "1e+16"): (negative, the significant digits without leading or trailing zeros ("0"
/// for zero) and their number, the decimal exponent of the first).
fn shortest(text: &[u8]) -> (bool, [u8; 24], usize, i32) {
    let mut digits = [b'0'; 24];
    let neg = text.first() == Some(&b'-');
    let text = if neg { &text[1..] } else { text };
    let (mantissa, exp) = match text.iter().position(|&c| c == b'e' || c == b'E') {
        Some(at) => (&text[..at], parse_exp(&text[at + 1..])),
        None => (text, 0),
    };
    let point = mantissa.iter().position(|&c| c == b'.');
    let whole = point.map_or(mantissa, |at| &mantissa[..at]);
    let first = mantissa.iter().position(|&c| c.is_ascii_digit() && c != b'0');
    let Some(first) = first else { return (neg, digits, 1, 0) };
    // the digits from the first significant one on, the point skipped, trailing zeros trimmed
    let from = &mantissa[first..];
    let last = from.iter().rposition(|&c| c.is_ascii_digit() && c != b'0').unwrap_or(0);
    let mut len = 0;
    for &c in from[..=last].iter().filter(|c| c.is_ascii_digit()).take(digits.len()) {
        digits[len] = c;
        len += 1;
    }
    // the first digit's place: digits before the point count down from it, zeros after it too
    let place = match point {
        Some(at) if first > at => at as i32 - first as i32,
        _ => whole.len() as i32 - first as i32 - 1,
    };
    (neg, digits, len, place + exp)
}

fn parse_exp(text: &[u8]) -> i32 {
    let (neg, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let value = digits.iter().fold(0i32, |v, &c| v * 10 + (c - b'0') as i32);
    if neg { -value } else { value }
}

/// When |f|'s exact value lies exactly halfway between two n-digit strings, one of them zmij's
/// shortest digits, and the other has the even last digit and also reads back as f: that one
/// (Python's repr rounds half to even there; a shortest-digits algorithm need not).
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
    let even = if (last - b'0') % 2 == 0 { lo.to_string() } else { hi };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn repr(f: f64) -> String {
        let mut out = Vec::new();
        write_float(f, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writes_python_repr() {
        // (value, Python's repr of it)
        let cases = [
            (0.1, "0.1"), (100.0, "100.0"), (1234.5678, "1234.5678"), (-0.0, "-0.0"), (0.0, "0.0"),
            (1.0 / 3.0, "0.3333333333333333"), (123456789.0, "123456789.0"),
            (9007199254740993.0, "9007199254740992.0"), (1e15, "1000000000000000.0"), (0.0001, "0.0001"),
        ];
        for (f, want) in cases {
            assert_eq!(repr(f), want, "repr of {f:e}");
        }
    }

    #[test]
    fn exponent_forms() {
        // Python switches to the exponent form at 1e16 and below 1e-4, with at least two exponent digits
        let cases = [
            (1e16, "1e+16"), (1e22, "1e+22"), (1e-5, "1e-05"), (2.5e-7, "2.5e-07"), (-1.25e-7, "-1.25e-07"),
            (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"), (1.5e300, "1.5e+300"),
        ];
        for (f, want) in cases {
            assert_eq!(repr(f), want, "repr of {f:e}");
        }
    }

    #[test]
    fn non_finite_literals() {
        assert_eq!(repr(f64::NAN), "NaN");
        assert_eq!(repr(f64::INFINITY), "Infinity");
        assert_eq!(repr(f64::NEG_INFINITY), "-Infinity");
    }

    #[test]
    fn shortest_reads_zmij_text() {
        let (neg, digits, len, exp) = shortest(b"-1.25e-7");
        assert_eq!((neg, &digits[..len], exp), (true, &b"125"[..], -7));
        let (neg, digits, len, exp) = shortest(b"0.001");
        assert_eq!((neg, &digits[..len], exp), (false, &b"1"[..], -3));
        let (_, digits, len, exp) = shortest(b"1230.0");
        assert_eq!((&digits[..len], exp), (&b"123"[..], 3));
        let (_, digits, len, exp) = shortest(b"0.0");
        assert_eq!((&digits[..len], exp), (&b"0"[..], 0));
    }

    #[test]
    fn exact_decimal_digits() {
        assert_eq!(exact_digits(0.5).as_deref(), Some("5"));
        assert_eq!(exact_digits(3.0).as_deref(), Some("3"));
        assert_eq!(exact_digits(1e23).as_deref(), Some("99999999999999991611392"));
        assert_eq!(exact_digits(2f64.powi(70)).as_deref(), Some("1180591620717411303424"));
        assert_eq!(exact_digits(0.1), None); // too many digits to be a tie at 17
    }
}
