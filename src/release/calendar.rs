//! The wall clock as the release records it: RFC 3339 UTC timestamps for history rows,
//! baseline `blessed_at`/`expires_at`, with `SOURCE_DATE_EPOCH` honoured so reproducible
//! builds of baselines are possible. Hand-written (Howard Hinnant's civil-date algorithm,
//! a dozen lines) rather than a date crate: we only ever format UTC seconds.

/// Seconds since the Unix epoch: `SOURCE_DATE_EPOCH` when set, else the system clock.
pub fn now_secs() -> i64 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        })
}

/// The current time in RFC 3339 (UTC, seconds), or `SOURCE_DATE_EPOCH` when set.
pub fn now_rfc3339() -> String {
    rfc3339(now_secs())
}

/// The time `days` days from now, in RFC 3339 (a baseline's `expires_at`).
pub fn days_from_now_rfc3339(days: u32) -> String {
    rfc3339(now_secs() + i64::from(days) * 86_400)
}

/// `secs` since the epoch in RFC 3339 (UTC, seconds): the civil date from days since
/// 1970-01-01 (Howard Hinnant's algorithm).
pub fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_906_800), "2026-11-28T23:00:00Z");
    }
}
