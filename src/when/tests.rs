use chrono::{NaiveDate, TimeZone as _};

use super::*;

fn at(tz: Tz, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
    tz.with_ymd_and_hms(y, mo, d, h, mi, 0)
        .earliest()
        .unwrap()
        .timestamp_millis()
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
    at(Tz::UTC, y, mo, d, h, mi)
}

fn timing(when: When, tz: &str) -> Timing {
    Timing {
        when,
        tz: zone(tz).unwrap(),
    }
}

#[test]
fn every_is_aligned_to_the_unix_epoch() {
    let t = timing(When::every("5s").unwrap(), "UTC");
    assert_eq!(t.next_after(0), Some(5_000));
    assert_eq!(t.next_after(4_999), Some(5_000));
    assert_eq!(t.next_after(5_000), Some(10_000), "strictly after");
    assert_eq!(t.next_after(1_733_300_001_234), Some(1_733_300_005_000));
    let hourly = timing(When::every("1h").unwrap(), "Europe/Berlin");
    assert_eq!(
        hourly.next_after(utc(2026, 3, 29, 0, 30)),
        Some(utc(2026, 3, 29, 1, 0))
    );
    assert_eq!(t.slots_between(0, 20_000), (4, Some(20_000)));
    assert_eq!(t.slots_between(1, 4_999), (0, None));
}

#[test]
fn once_runs_once_after_its_delay() {
    let t = timing(When::once_in("30m", 1_000).unwrap(), "UTC");
    assert_eq!(t.next_after(0), Some(1_000 + 30 * 60_000));
    assert_eq!(t.next_after(1_000 + 30 * 60_000), None);
    assert!(t.when.is_once());
}

#[test]
fn daily_at_follows_the_zones_wall_clock_across_dst() {
    let berlin = zone("Europe/Berlin").unwrap();
    let t = timing(When::daily("09:00").unwrap(), "Europe/Berlin");
    // Before the change (CET, UTC+1) and after it (CEST, UTC+2).
    assert_eq!(
        t.next_after(utc(2026, 3, 28, 0, 0)),
        Some(utc(2026, 3, 28, 8, 0))
    );
    assert_eq!(
        t.next_after(utc(2026, 3, 28, 8, 0)),
        Some(utc(2026, 3, 29, 7, 0))
    );
    assert_eq!(
        t.next_after(utc(2026, 3, 29, 7, 0)),
        Some(at(berlin, 2026, 3, 30, 9, 0))
    );
    assert_eq!(When::daily("9:05").unwrap().stored(), "at 09:05");
    for bad in ["24:00", "09:60", "9", "nine", "09:5", "-1:00", ""] {
        assert!(matches!(When::daily(bad), Err(WhenError::Time(_))), "{bad}");
    }
}

#[test]
fn cron_in_a_zone_with_a_dst_change() {
    let ny = zone("America/New_York").unwrap();
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist.
    let gap = timing(When::cron("30 2 * * *").unwrap(), "America/New_York");
    let day_before = gap.next_after(utc(2026, 3, 7, 0, 0)).unwrap();
    assert_eq!(day_before, at(ny, 2026, 3, 7, 2, 30));
    let in_gap = gap.next_after(day_before).unwrap();
    assert_eq!(
        in_gap,
        utc(2026, 3, 8, 7, 0),
        "the first instant after the gap, 03:00 EDT"
    );
    assert_eq!(
        gap.next_after(in_gap),
        Some(at(ny, 2026, 3, 9, 2, 30)),
        "not skipped, not twice"
    );
    // 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice, runs once.
    let overlap = timing(When::cron("30 1 * * *").unwrap(), "America/New_York");
    let first = overlap.next_after(utc(2026, 11, 1, 0, 0)).unwrap();
    assert_eq!(first, utc(2026, 11, 1, 5, 30), "01:30 EDT");
    let next = overlap.next_after(first).unwrap();
    assert_eq!(
        next,
        at(ny, 2026, 11, 2, 1, 30),
        "the repeated 01:30 EST is not a second run"
    );
    // Weekdays at 9, local: 13:00 UTC in summer, 14:00 in winter.
    let weekdays = timing(When::cron("0 9 * * 1-5").unwrap(), "America/New_York");
    assert_eq!(
        weekdays.next_after(utc(2026, 10, 30, 14, 0)),
        Some(utc(2026, 11, 2, 14, 0))
    );
    assert_eq!(
        weekdays.next_after(utc(2026, 10, 29, 14, 0)),
        Some(utc(2026, 10, 30, 13, 0))
    );
    let _ = NaiveDate::from_ymd_opt(2026, 1, 1);
}

#[test]
fn a_bad_cron_expression_is_a_clear_error() {
    for (expr, says) in [
        ("0 9 * *", "five are needed"),
        ("0 9 * * 1-5 2026", "five are needed"),
        ("61 9 * * *", "61 9 * * *"),
        ("0 9 * * funday", "funday"),
        ("", "five are needed"),
    ] {
        let err = When::cron(expr).unwrap_err().to_string();
        assert!(err.contains("bad cron expression"), "{expr}: {err}");
        assert!(err.contains(says), "{expr}: {err}");
    }
    assert!(matches!(zone("Mars/Olympus"), Err(WhenError::Zone(_))));
    assert!(matches!(When::every("0s"), Err(WhenError::Duration { .. })));
    assert!(matches!(
        When::every("soon"),
        Err(WhenError::Duration { .. })
    ));
}

#[test]
fn the_stored_form_reads_back() {
    for when in [
        When::every("90m").unwrap(),
        When::daily("07:30").unwrap(),
        When::cron("*/15  9-17 * * 1-5").unwrap(),
        When::Once(1_733_300_000_000),
    ] {
        assert_eq!(When::from_stored(&when.stored()).unwrap(), when);
    }
    assert!(When::from_stored("sometimes 3").is_err());
}

#[test]
fn missed_slots_are_counted_and_the_last_named() {
    let t = timing(When::cron("*/10 * * * *").unwrap(), "UTC");
    let (n, last) = t.slots_between(utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 1, 5));
    assert_eq!((n, last), (6, Some(utc(2026, 1, 1, 1, 0))));
    let every = timing(When::every("1s").unwrap(), "UTC");
    assert_eq!(every.slots_between(0, 7 * 86_400_000).0, 7 * 86_400);
    // Past the count, the last slot is still the last one.
    let minutely = timing(When::cron("* * * * *").unwrap(), "UTC");
    let (n, last) = minutely.slots_between(0, 20_000 * 60_000 + 30_000);
    assert_eq!((n, last), (MAX_COUNTED, Some(20_000 * 60_000)));
}

#[test]
fn the_shortest_gap_is_what_min_interval_is_checked_against() {
    let minute = timing(When::cron("* * * * *").unwrap(), "UTC");
    assert_eq!(minute.shortest_gap(0, 50), Some(Duration::from_secs(60)));
    let pair = timing(When::cron("0,2 9 * * *").unwrap(), "UTC");
    assert_eq!(pair.shortest_gap(0, 50), Some(Duration::from_secs(120)));
    let once = timing(When::Once(10), "UTC");
    assert_eq!(once.shortest_gap(0, 50), None);
}
