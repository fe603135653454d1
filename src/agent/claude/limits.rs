//! When a usage limit resets, as the CLI words it in the refusal's text.
//!
//! With an API key the CLI passes none on (the API's `retry-after` and
//! `anthropic-ratelimit-unified-reset` headers stay inside it); with a
//! subscription login its text may carry one. The forms read here:
//! - `Claude AI usage limit reached|1767052800`: the Unix time (seconds, or
//!   milliseconds) after the bar;
//! - `… resets 3pm (Europe/Berlin)`, `… resets at 3:30pm (Europe/Berlin)`,
//!   `… resets 15:00 (UTC)`, `… resets 3pm` (UTC when no zone is named):
//!   the next such wall-clock time in that zone.
//!
//! The 2.1.332 binary holds the pieces `You've hit your `, ` resets `,
//! `resets at ` and ` limit resets ` (it builds the sentence from them);
//! the bar form is older CLIs'.

use chrono::{DateTime, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

/// The reset time (Unix seconds) named in `text`, judged from `now`; `None`
/// when it names none, or one that has passed.
pub fn reset_at(text: &str, now: DateTime<Utc>) -> Option<i64> {
    let at = bar_form(text).or_else(|| resets_form(text, now))?;
    (at > now.timestamp()).then_some(at)
}

/// `…limit reached|<unix time>`.
fn bar_form(text: &str) -> Option<i64> {
    let (_, after) = text.split_once("limit reached|")?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    let n: i64 = digits.parse().ok()?;
    // Milliseconds, when it is that large.
    Some(if n > 100_000_000_000 { n / 1000 } else { n })
}

/// `resets [at] <time> [(<zone>)]`.
fn resets_form(text: &str, now: DateTime<Utc>) -> Option<i64> {
    let (_, after) = text.split_once("resets ")?;
    let after = after.strip_prefix("at ").unwrap_or(after).trim_start();
    let time_end = after.find([' ', '(', '.', ',', ')']).unwrap_or(after.len());
    let time = wall_time(&after[..time_end])?;
    let rest = &after[time_end..];
    let zone: Tz = match rest.trim_start().strip_prefix('(') {
        Some(inner) => inner.split(')').next()?.trim().parse().ok()?,
        None => Tz::UTC,
    };
    let local_now = now.with_timezone(&zone);
    let mut day = local_now.date_naive();
    // Today's, or tomorrow's once today's has passed.
    for _ in 0..2 {
        if let Some(at) = zone.from_local_datetime(&day.and_time(time)).earliest()
            && at > local_now
        {
            return Some(at.timestamp());
        }
        day = day.succ_opt()?;
    }
    None
}

/// `3pm`, `3:30pm`, `11am`, `15:00`.
fn wall_time(s: &str) -> Option<NaiveTime> {
    let lower = s.to_ascii_lowercase();
    let (clock, pm) = match (lower.strip_suffix("am"), lower.strip_suffix("pm")) {
        (Some(c), _) => (c.to_string(), Some(false)),
        (_, Some(c)) => (c.to_string(), Some(true)),
        _ => (lower.clone(), None),
    };
    let (h, m) = match clock.split_once(':') {
        Some((h, m)) => (h.parse::<u32>().ok()?, m.parse::<u32>().ok()?),
        None if pm.is_some() => (clock.parse::<u32>().ok()?, 0),
        // A bare number is no time ("resets 5 times").
        None => return None,
    };
    let h = match pm {
        Some(_) if !(1..=12).contains(&h) => return None,
        Some(true) => h % 12 + 12,
        Some(false) => h % 12,
        None => h,
    };
    NaiveTime::from_hms_opt(h, m, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    const NOW: &str = "2026-12-04T12:00:00Z";

    #[test]
    fn the_bar_form_is_a_unix_time() {
        let now = at(NOW);
        let later = now.timestamp() + 3600;
        let text = format!("Claude AI usage limit reached|{later}");
        assert_eq!(reset_at(&text, now), Some(later));
        let ms = format!("Claude AI usage limit reached|{}", later * 1000);
        assert_eq!(reset_at(&ms, now), Some(later));
        // A time that has passed is none.
        let past = format!("Claude AI usage limit reached|{}", now.timestamp() - 1);
        assert_eq!(reset_at(&past, now), None);
    }

    #[test]
    fn resets_at_a_wall_clock_time_in_a_zone() {
        let now = at(NOW); // 13:00 in Berlin
        let text = "You've hit your session limit · resets 3pm (Europe/Berlin)";
        assert_eq!(
            reset_at(text, now),
            Some(at("2026-12-04T14:00:00Z").timestamp())
        );
        let text = "You've hit your limit · resets at 3:30pm (Europe/Berlin)";
        assert_eq!(
            reset_at(text, now),
            Some(at("2026-12-04T14:30:00Z").timestamp())
        );
        // Earlier today there: tomorrow's.
        let text = "usage limit; resets 11am (Europe/Berlin)";
        assert_eq!(
            reset_at(text, now),
            Some(at("2026-12-05T10:00:00Z").timestamp())
        );
        // 24-hour clock, and UTC without a zone.
        assert_eq!(
            reset_at("limit resets 15:00", now),
            Some(at("2026-12-04T15:00:00Z").timestamp())
        );
        assert_eq!(
            reset_at("limit resets 12am (UTC).", now),
            Some(at("2026-12-05T00:00:00Z").timestamp())
        );
    }

    #[test]
    fn text_without_a_reset_time_is_none() {
        let now = at(NOW);
        for text in [
            "API Error: Request rejected (429) · rate limited",
            "resets 5 times",
            "resets 13pm (Europe/Berlin)",
            "resets 3pm (Not/AZone)",
            "resets 25:00",
            "",
        ] {
            assert_eq!(reset_at(text, now), None, "{text}");
        }
    }
}
