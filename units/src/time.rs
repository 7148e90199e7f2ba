use crate::duration::parse_duration;
use crate::UnitsError;

/// A point in time, as ns since the Unix epoch: a bare integer of ns, RFC 3339 (`2026-01-02T14:30:00.5Z`,
/// `...+01:00`), or `+DURATION` after a reference that `reference` supplies (called only in that case, e.g. a
/// journal's first record time).
pub fn parse_time<E: From<UnitsError>>(
    input: &str,
    reference: impl FnOnce() -> Result<u64, E>,
) -> Result<u64, E> {
    let t = input.trim();
    let err = |reason: String| UnitsError::Time {
        input: input.to_owned(),
        reason,
    };
    if let Some(relative) = t.strip_prefix('+') {
        let d = parse_duration(relative).map_err(|e| err(e.to_string()))?;
        let ns = u64::try_from(d.as_nanos()).map_err(|_| err("out of range".into()))?;
        return Ok(reference()?.saturating_add(ns));
    }
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map_err(|_| err("out of range".into()).into());
    }
    parse_rfc3339(t).map_err(|reason| err(reason).into())
}

/// Parses RFC 3339 (`2026-01-02T14:30:00Z`, a `.fraction` of up to nine digits, `Z` or `±HH:MM`) into ns since the
/// Unix epoch. The error says which part is wrong.
pub fn parse_rfc3339(s: &str) -> Result<u64, String> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return Err(format!(
            "{s:?} is not a full RFC 3339 date-time (YYYY-MM-DDTHH:MM:SSZ)"
        ));
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let part = s.get(r).ok_or("bad layout")?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(format!("bad digits {part:?}"));
        }
        part.parse().map_err(|_| format!("bad number {part:?}"))
    };
    if !(b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't' | b' ')
        && b[13] == b':'
        && b[16] == b':')
    {
        return Err("bad layout (YYYY-MM-DDTHH:MM:SS)".into());
    }
    let (y, mo, d, h, mi, sec) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !((1..=12).contains(&mo) && (1..=31).contains(&d) && h < 24 && mi < 60 && sec < 61) {
        return Err("a field is out of range".into());
    }
    let mut i = 19;
    let mut frac_ns = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = &s[start..i];
        if digits.is_empty() || digits.len() > 9 {
            return Err("the fraction needs one to nine digits".into());
        }
        frac_ns =
            digits.parse::<i64>().map_err(|_| "bad fraction")? * 10i64.pow(9 - digits.len() as u32);
    }
    let offset_s = match &s[i..] {
        "Z" | "z" => 0,
        tz if tz.len() == 6
            && (tz.starts_with('+') || tz.starts_with('-'))
            && tz.as_bytes()[3] == b':' =>
        {
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            sign * (num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60)
        }
        other => return Err(format!("bad time zone {other:?} (Z or ±HH:MM)")),
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    if secs < 0 {
        return Err("before 1970".into());
    }
    Ok(secs as u64 * 1_000_000_000 + frac_ns as u64)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's civil-from-days inverse).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// RFC 3339 in UTC with nanoseconds: `2026-01-02T14:30:00.500000000Z`.
pub fn format_rfc3339(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ns % 1_000_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str) -> Result<u64, UnitsError> {
        parse_time(s, || Ok::<u64, UnitsError>(1_000))
    }

    #[test]
    fn parses_every_documented_form() {
        assert_eq!(t("1700000000000000000"), Ok(1_700_000_000_000_000_000));
        assert_eq!(t("1970-01-01T00:00:01Z"), Ok(1_000_000_000));
        assert_eq!(t("1970-01-01T01:00:01.5+01:00"), Ok(1_500_000_000));
        assert_eq!(t("2026-01-02T14:30:00Z"), Ok(1_767_364_200_000_000_000));
        assert_eq!(t("+1s"), Ok(1_000_001_000));
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let msg = t("09:30:00").unwrap_err().to_string();
        assert!(msg.contains("not a full RFC 3339 date-time"), "{msg}");
        assert!(t("2026-13-01T00:00:00Z").is_err());
        assert!(t("2026-01-01T00:00:00").is_err());
        assert!(t("+5").is_err());
        assert!(t("1969-12-31T23:59:59Z").is_err());
    }

    proptest! {
        #[test]
        fn format_then_parse_is_exact(ns in 0u64..4_000_000_000_000_000_000) {
            prop_assert_eq!(parse_rfc3339(&format_rfc3339(ns)), Ok(ns));
        }

        #[test]
        fn arbitrary_text_never_panics(s in "\\PC{0,40}") {
            let _ = t(&s);
        }
    }
}
