//! Integers as text without the formatter (this runs for every integer and temporal value, and
//! for every change's position): decimal digits, zero-padded or signed, and the pgshovel.position
//! texts made of them (an LSN's hex prefix, an ordinal). The bottom of the crate: it uses no
//! other module.

/// Appends n in decimal, zero-padded to at least width digits (format's `{:0width$}` of an
/// unsigned value, without its allocation: this runs for every integer and temporal value; itoa
/// writes two digits a step).
pub fn push_uint(n: u64, width: usize, out: &mut Vec<u8>) {
    if width == 2 && n < 100 {
        out.extend_from_slice(&[b'0' + (n / 10) as u8, b'0' + (n % 10) as u8]); // a date's or a clock's part
        return;
    }
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(n).as_bytes();
    out.resize(out.len() + width.saturating_sub(digits.len()), b'0');
    out.extend_from_slice(digits);
}

/// A pgshovel.position (wire.change_header_at): prefix (wire.position_prefix) and the ordinal in
/// at least 10 digits.
pub fn position(prefix: &str, ordinal: u64) -> String {
    let mut out = Vec::with_capacity(prefix.len() + 10);
    out.extend_from_slice(prefix.as_bytes());
    push_uint(ordinal, 10, &mut out);
    String::from_utf8(out).expect("a str and ASCII digits")
}

/// The position prefix of a logical unit (wire.position_prefix): its commit LSN in 16 upper-case
/// hex digits and a colon, as `format!("{unit:016X}:")` writes it, without the formatter.
pub fn lsn_prefix(unit: u64) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(17);
    out.extend((0..16).rev().map(|i| HEX[(unit >> (4 * i)) as usize & 15]));
    out.push(b':');
    String::from_utf8(out).expect("ASCII hex digits")
}

/// Appends n in decimal (its Display, without the String).
pub fn push_int(n: i64, out: &mut Vec<u8>) {
    if n < 0 {
        out.push(b'-');
    }
    push_uint(n.unsigned_abs(), 0, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uint(n: u64, width: usize) -> String {
        let mut out = b"x".to_vec(); // appends: what is there stays
        push_uint(n, width, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn push_uint_pads_to_width() {
        assert_eq!(uint(7, 2), "x07");
        assert_eq!(uint(99, 2), "x99");
        assert_eq!(uint(100, 2), "x100");
        assert_eq!(uint(0, 0), "x0");
        assert_eq!(uint(42, 10), "x0000000042");
        assert_eq!(uint(123_456, 6), "x123456");
        assert_eq!(uint(u64::MAX, 0), format!("x{}", u64::MAX));
    }

    #[test]
    fn push_int_signs() {
        for n in [0, 1, -1, 10, -1234567890, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            push_int(n, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
    }

    #[test]
    fn position_and_lsn_prefix() {
        assert_eq!(lsn_prefix(0x1_0000_0010), "0000000100000010:");
        assert_eq!(lsn_prefix(u64::MAX), "FFFFFFFFFFFFFFFF:");
        assert_eq!(lsn_prefix(0xAB_CDEF), format!("{:016X}:", 0xAB_CDEFu64));
        assert_eq!(position("0000000100000010:", 7), "0000000100000010:0000000007");
        assert_eq!(position("p:", 12_345_678_901), "p:12345678901");
    }
}
