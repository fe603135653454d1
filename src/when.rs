//! When a schedule runs: its [`When`] (`every`, daily `at`, `cron`, once
//! `in`) in a time zone, and [`Timing::next_after`], the pure function from
//! an instant to the schedule's next slot. A slot is a unix time in
//! milliseconds: the claim's key, so the same slot is the same number in
//! every process.
//!
//! Cron expressions are read by `croner` (five fields, POSIX/Vixie
//! semantics, DST gaps and overlaps handled: a time skipped by a gap runs
//! at the first instant after it, a time repeated by an overlap runs once);
//! time zones are the IANA database compiled in by `chrono-tz`, so a host
//! without `/usr/share/zoneinfo` reads `Europe/Berlin` all the same.

use std::fmt;
use std::time::Duration;

use chrono::{TimeZone as _, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// The shortest `every` there is (slots are whole seconds).
pub const MIN_EVERY: Duration = Duration::from_secs(1);

/// How many `cron` or `at` slots are counted at most when telling how many
/// were missed (the count is then "at least"); each costs a cron search on
/// the actor thread. `every` slots are counted by arithmetic, uncapped.
pub const MAX_COUNTED: u64 = 10_000;

/// Why a schedule's timing could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhenError {
    /// A cron expression croner refuses (or one that is not five fields).
    #[error("bad cron expression “{expr}”: {reason}")]
    Cron {
        /// As written.
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A duration humantime refuses, or one under a second.
    #[error("bad duration “{text}”: {reason}")]
    Duration {
        /// As written.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A daily time that is not `HH:MM`.
    #[error("bad time “{0}”: write it as HH:MM, from 00:00 to 23:59")]
    Time(String),
    /// A name not in the IANA time zone database.
    #[error("unknown time zone “{0}” (an IANA name such as Europe/Berlin or UTC)")]
    Zone(String),
    /// Not one of the forms.
    #[error(
        "write when it runs as `every 2h`, `at 09:00`, `cron \"0 9 * * 1-5\"` or `in 30m`; got “{0}”"
    )]
    Form(String),
}

/// When a schedule runs, without its zone.
#[derive(Debug, Clone)]
pub enum When {
    /// Every period, on slots aligned to the Unix epoch (a `5s` schedule
    /// runs at times divisible by 5 s).
    Every(Duration),
    /// Every day at this local time (hour, minute).
    Daily(u8, u8, Box<Cron>),
    /// A five-field cron expression, as written and parsed.
    Cron(String, Box<Cron>),
    /// Once, at this unix time in milliseconds.
    Once(i64),
}

impl PartialEq for When {
    fn eq(&self, other: &Self) -> bool {
        self.stored() == other.stored()
    }
}

impl When {
    /// Every `text` (humantime), at least [`MIN_EVERY`].
    pub fn every(text: &str) -> Result<Self, WhenError> {
        let period = duration(text)?;
        Ok(Self::Every(period))
    }

    /// Daily at `HH:MM`.
    pub fn daily(text: &str) -> Result<Self, WhenError> {
        let bad = || WhenError::Time(text.to_owned());
        let (h, m) = text.split_once(':').ok_or_else(bad)?;
        let ok = |s: &str| !s.is_empty() && s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit());
        if !ok(h) || m.len() != 2 || !ok(m) {
            return Err(bad());
        }
        let (hour, minute): (u8, u8) =
            (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
        if hour > 23 || minute > 59 {
            return Err(bad());
        }
        let cron = parse_cron(&format!("{minute} {hour} * * *"))?;
        Ok(Self::Daily(hour, minute, Box::new(cron)))
    }

    /// A five-field cron expression.
    pub fn cron(expr: &str) -> Result<Self, WhenError> {
        let expr = expr.split_whitespace().collect::<Vec<_>>().join(" ");
        let cron = parse_cron(&expr)?;
        Ok(Self::Cron(expr, Box::new(cron)))
    }

    /// Once, `text` (humantime) after `now_ms`.
    pub fn once_in(text: &str, now_ms: i64) -> Result<Self, WhenError> {
        let delay = duration(text)?;
        let delay = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        Ok(Self::Once(now_ms.saturating_add(delay)))
    }

    /// What the store keeps: `every 30m`, `at 09:00`, `cron 0 9 * * 1-5`,
    /// `once <unix ms>`; read back by [`When::from_stored`].
    pub fn stored(&self) -> String {
        match self {
            Self::Every(period) => format!("every {}", humantime::format_duration(*period)),
            Self::Daily(h, m, _) => format!("at {h:02}:{m:02}"),
            Self::Cron(expr, _) => format!("cron {expr}"),
            Self::Once(at) => format!("once {at}"),
        }
    }

    /// Reads [`When::stored`] back.
    pub fn from_stored(text: &str) -> Result<Self, WhenError> {
        let form = || WhenError::Form(text.to_owned());
        let (kind, rest) = text.split_once(' ').ok_or_else(form)?;
        match kind {
            "every" => Self::every(rest),
            "at" => Self::daily(rest),
            "cron" => Self::cron(rest),
            "once" => rest.trim().parse().map(Self::Once).map_err(|_| form()),
            _ => Err(form()),
        }
    }

    /// Whether it runs once only.
    pub fn is_once(&self) -> bool {
        matches!(self, Self::Once(_))
    }
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Once(at) => write!(f, "once at {}", show_ms(*at, Tz::UTC)),
            Self::Cron(expr, _) => write!(f, "cron \"{expr}\""),
            other => f.write_str(&other.stored()),
        }
    }
}

/// A humantime duration of at least [`MIN_EVERY`].
fn duration(text: &str) -> Result<Duration, WhenError> {
    let err = |reason: String| WhenError::Duration {
        text: text.to_owned(),
        reason,
    };
    let period = humantime::parse_duration(text.trim()).map_err(|e| err(e.to_string()))?;
    if period < MIN_EVERY {
        return Err(err("under a second".into()));
    }
    // Slots are unix milliseconds: a period past them never comes.
    if i64::try_from(period.as_millis()).is_err() {
        return Err(err("too long".into()));
    }
    Ok(period)
}

/// Five fields, no seconds (croner would also take six).
fn parse_cron(expr: &str) -> Result<Cron, WhenError> {
    let err = |reason: String| WhenError::Cron {
        expr: expr.to_owned(),
        reason,
    };
    let fields = expr.split_whitespace().count();
    if fields != 5 && !expr.trim_start().starts_with('@') {
        return Err(err(format!(
            "it has {fields} fields; five are needed: minute hour day-of-month month day-of-week"
        )));
    }
    let parser = CronParser::builder().seconds(Seconds::Disallowed).build();
    parser.parse(expr).map_err(|e| err(e.to_string()))
}

/// A time zone by its IANA name.
pub fn zone(name: &str) -> Result<Tz, WhenError> {
    name.parse::<Tz>()
        .map_err(|_| WhenError::Zone(name.to_owned()))
}

/// A schedule's timing: when, and in which zone (`cron` and `at` read the
/// zone's wall clock; `every` and `in` do not need one).
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// When.
    pub when: When,
    /// Where its wall clock hangs.
    pub tz: Tz,
}

impl Timing {
    /// The first slot strictly after `after_ms` (unix ms), if there is one:
    /// none for a once past, or a cron expression that never matches again.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match &self.when {
            When::Every(period) => {
                let p = i64::try_from(period.as_millis()).ok()?.max(1);
                after_ms.div_euclid(p).checked_add(1)?.checked_mul(p)
            }
            When::Once(at) => (*at > after_ms).then_some(*at),
            When::Daily(_, _, cron) | When::Cron(_, cron) => {
                let from = self.tz.timestamp_millis_opt(after_ms).single()?;
                let next = cron.find_next_occurrence(&from, false).ok()?;
                Some(next.with_timezone(&Utc).timestamp_millis())
            }
        }
    }

    /// The slots in `(after_ms, upto_ms]`: how many (counted up to
    /// [`MAX_COUNTED`]) and the last.
    pub fn slots_between(&self, after_ms: i64, upto_ms: i64) -> (u64, Option<i64>) {
        if let When::Every(period) = &self.when {
            // Arithmetic, so a `1s` schedule down for a week costs nothing.
            let Ok(p) = i64::try_from(period.as_millis()) else {
                return (0, None);
            };
            let (first, last) = (after_ms.div_euclid(p.max(1)), upto_ms.div_euclid(p.max(1)));
            let count = u64::try_from(last - first).unwrap_or(0);
            return (count, (count > 0).then(|| last * p));
        }
        let (mut count, mut last, mut at) = (0, None, after_ms);
        while let Some(next) = self.next_after(at).filter(|&n| n <= upto_ms) {
            count += 1;
            last = Some(next);
            at = next;
            if count >= MAX_COUNTED {
                // Past the count, only the last slot matters.
                return (count, self.last_until(upto_ms).or(last));
            }
        }
        (count, last)
    }

    /// Its last slot at or before `upto_ms` (for `every`, `cron` and `at`;
    /// a once's is its time).
    fn last_until(&self, upto_ms: i64) -> Option<i64> {
        match &self.when {
            When::Every(period) => {
                let p = i64::try_from(period.as_millis()).ok()?.max(1);
                upto_ms.div_euclid(p).checked_mul(p)
            }
            When::Once(at) => (*at <= upto_ms).then_some(*at),
            When::Daily(_, _, cron) | When::Cron(_, cron) => {
                let upto = self.tz.timestamp_millis_opt(upto_ms).single()?;
                let last = cron.find_previous_occurrence(&upto, true).ok()?;
                Some(last.with_timezone(&Utc).timestamp_millis())
            }
        }
    }

    /// The shortest gap between its next `samples` slots after `from_ms`:
    /// what `schedules.min_interval` is checked against (none for a once).
    pub fn shortest_gap(&self, from_ms: i64, samples: usize) -> Option<Duration> {
        if let When::Every(period) = &self.when {
            return Some(*period);
        }
        let mut prev = self.next_after(from_ms)?;
        let mut shortest: Option<i64> = None;
        for _ in 0..samples {
            let Some(next) = self.next_after(prev) else {
                break;
            };
            shortest = Some(shortest.map_or(next - prev, |s| s.min(next - prev)));
            prev = next;
        }
        shortest.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
    }
}

/// A unix time in milliseconds as the zone's wall clock, for the chat.
pub fn show_ms(ms: i64, tz: Tz) -> String {
    match tz.timestamp_millis_opt(ms).single() {
        Some(at) => at.format("%Y-%m-%d %H:%M %Z").to_string(),
        None => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod tests;
