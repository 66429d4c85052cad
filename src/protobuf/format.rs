//! The JSON text of values protobuf carries in binary: bytes as base64, times as RFC 3339,
//! durations as Go writes them.

/// Bytes as standard, padded base64 (Go's `encoding/json` for `[]byte`).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The longest time [`rfc3339`] writes: `2006-01-02T15:04:05.000000Z`.
pub(crate) const TIME_LEN: usize = 27;

/// `seconds` and `nanos` since the Unix epoch in UTC as Go's `Time.Format` writes them with
/// `time.RFC3339` (`2006-01-02T15:04:05Z`), or with `micro` as `RFC3339Micro`
/// (`2006-01-02T15:04:05.000000Z`, the nanoseconds truncated). `None` for a year outside
/// 0 to 9999, which RFC 3339 cannot write.
pub(crate) fn rfc3339(
    seconds: i64,
    nanos: i64,
    micro: bool,
    buf: &mut [u8; TIME_LEN],
) -> Option<&str> {
    let (seconds, nanos) = instant(seconds, nanos, micro)?;
    let nanos = i64::from(nanos);
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let mut w = Writer { buf, len: 0 };
    w.digits(year, 4);
    w.byte(b'-');
    w.digits(month, 2);
    w.byte(b'-');
    w.digits(day, 2);
    w.byte(b'T');
    w.digits(of_day / 3600, 2);
    w.byte(b':');
    w.digits(of_day / 60 % 60, 2);
    w.byte(b':');
    w.digits(of_day % 60, 2);
    if micro {
        w.byte(b'.');
        w.digits(nanos / 1000, 6);
    }
    w.byte(b'Z');
    let len = w.len;
    std::str::from_utf8(buf.get(..len)?).ok()
}

/// The instant [`rfc3339`] writes for `seconds` and `nanos`, as seconds and nanoseconds
/// (`0..1e9`) since the Unix epoch: the nanoseconds truncated to microseconds with `micro`,
/// dropped without. `None` for a year outside 0 to 9999.
pub(crate) fn instant(seconds: i64, nanos: i64, micro: bool) -> Option<(i64, i32)> {
    // Nanoseconds out of 0..1e9 carry into the seconds, as Go's `time.Unix` does.
    let seconds = seconds.checked_add(nanos.div_euclid(1_000_000_000))?;
    let nanos = nanos.rem_euclid(1_000_000_000);
    let (year, _, _) = civil_from_days(seconds.div_euclid(86_400));
    if !(0..=9999).contains(&year) {
        return None;
    }
    let nanos = if micro { nanos / 1000 * 1000 } else { 0 };
    Some((seconds, i32::try_from(nanos).ok()?))
}

struct Writer<'a> {
    buf: &'a mut [u8; TIME_LEN],
    len: usize,
}

impl Writer<'_> {
    fn byte(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    /// `v` (not negative) in exactly `width` decimal digits: written from the last digit back,
    /// one division by the constant 10 per digit rather than a power of ten per digit.
    fn digits(&mut self, mut v: i64, width: usize) {
        let end = self.len + width;
        if let Some(slots) = self.buf.get_mut(self.len..end) {
            for slot in slots.iter_mut().rev() {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let digit = (v % 10) as u8;
                *slot = b'0' + digit;
                v /= 10;
            }
            self.len = end;
        }
    }
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Nanoseconds as Go's `time.Duration.String()` writes them: `1h2m3.5s`, `1.5ms`, `0s`.
pub(crate) fn go_duration(nanos: i64) -> String {
    let mut out = String::new();
    if nanos < 0 {
        out.push('-');
    }
    let u = nanos.unsigned_abs();
    if u == 0 {
        out.push_str("0s");
    } else if u < 1_000 {
        out.push_str(&format!("{u}ns"));
    } else if u < 1_000_000 {
        out.push_str(&format!("{}{}µs", u / 1_000, fraction(u % 1_000, 3)));
    } else if u < 1_000_000_000 {
        out.push_str(&format!(
            "{}{}ms",
            u / 1_000_000,
            fraction(u % 1_000_000, 6)
        ));
    } else {
        let secs = u / 1_000_000_000;
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        if h > 0 {
            out.push_str(&format!("{h}h{m}m"));
        } else if m > 0 {
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&format!("{s}{}s", fraction(u % 1_000_000_000, 9)));
    }
    out
}

/// `.` and the `digits` digits of `v`, trailing zeros dropped; empty for 0.
fn fraction(v: u64, digits: usize) -> String {
    if v == 0 {
        return String::new();
    }
    let s = format!(".{v:0digits$}");
    s.trim_end_matches('0').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_as_go() {
        for (bytes, want) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (&[0xff, 0xfe, 0xfd][..], "//79"),
        ] {
            assert_eq!(base64(bytes), want);
        }
    }

    #[test]
    fn times_as_go() {
        let mut buf = [0; TIME_LEN];
        assert_eq!(rfc3339(0, 0, false, &mut buf), Some("1970-01-01T00:00:00Z"));
        assert_eq!(
            rfc3339(1_700_000_000, 123_456_789, false, &mut buf),
            Some("2023-11-14T22:13:20Z")
        );
        assert_eq!(
            rfc3339(1_700_000_000, 123_456_789, true, &mut buf),
            Some("2023-11-14T22:13:20.123456Z")
        );
        assert_eq!(
            rfc3339(951_782_400, 0, true, &mut buf),
            Some("2000-02-29T00:00:00.000000Z")
        );
        assert_eq!(
            rfc3339(-1, 0, false, &mut buf),
            Some("1969-12-31T23:59:59Z")
        );
        // Go's zero time, year 1.
        assert_eq!(
            rfc3339(-62_135_596_800, 0, false, &mut buf),
            Some("0001-01-01T00:00:00Z")
        );
        assert_eq!(
            rfc3339(253_402_300_799, 0, false, &mut buf),
            Some("9999-12-31T23:59:59Z")
        );
        assert_eq!(rfc3339(253_402_300_800, 0, false, &mut buf), None);
        assert_eq!(rfc3339(i64::MAX, 0, false, &mut buf), None);
        assert_eq!(rfc3339(i64::MIN, -1, false, &mut buf), None);
        // Nanoseconds carry into seconds.
        assert_eq!(
            rfc3339(0, -1_000, true, &mut buf),
            Some("1969-12-31T23:59:59.999999Z")
        );
    }

    #[test]
    fn durations_as_go() {
        for (nanos, want) in [
            (0, "0s"),
            (1, "1ns"),
            (999, "999ns"),
            (1_000, "1µs"),
            (1_500, "1.5µs"),
            (1_500_000, "1.5ms"),
            (1_000_000_000, "1s"),
            (1_500_000_000, "1.5s"),
            (60_000_000_000, "1m0s"),
            (61_000_000_000, "1m1s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_723_000_000_001, "1h2m3.000000001s"),
            (-90_000_000_000, "-1m30s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ] {
            assert_eq!(go_duration(nanos), want, "{nanos}");
        }
    }
}
