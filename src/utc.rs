// Included by build.rs too (`include!`), so the commit date `envc --version` prints and the
// times `envc log` prints are written by one function: outer doc comments only.

/// `unix` (seconds since 1970, UTC) as RFC 3339 in UTC, to the second: `2026-12-06T08:10:00Z`.
pub fn rfc3339(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`,
/// for days on or after the epoch, so in unsigned arithmetic).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Counted from 0000-03-01, so a leap day is the last day of its 400-year era's years.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn unix_times_are_written_in_utc_rfc_3339() {
        for (unix, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_796_544_600, "2026-12-06T08:10:00Z"),
            (4_102_444_799, "2099-12-31T23:59:59Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
        ] {
            assert_eq!(rfc3339(unix), text, "{unix}");
        }
        // No overflow at the end of the range (overflow checks are on in release).
        assert!(rfc3339(u64::MAX).ends_with("Z"));
    }
}
