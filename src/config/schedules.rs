//! `[schedules]`: the operator's schedules (`[[schedules.list]]`) and the
//! settings every schedule shares. (TOML cannot have both `[schedules]`
//! and `[[schedules]]`, so the operator's schedules are the `list` key.)

use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Value;

use super::{CatchUp, ConfigError, PermissionMode, bad_value};
use crate::when::{When, zone};

/// `[schedules]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulesConfig {
    /// The zone `cron` and `at` read when a schedule names none (IANA).
    pub timezone: String,
    /// The shortest gap between runs of a schedule made in the chat or by
    /// the agent (the operator's own are not bound by it).
    #[serde(with = "humantime_serde")]
    pub min_interval: Duration,
    /// What the slots missed while the bot was down become.
    pub catch_up: CatchUp,
    /// What answers a schedule the agent asks to make: `"ask"` (the
    /// default) asks the chat as for a tool, `"allow"` makes it unasked,
    /// `"deny"` refuses it.
    pub agent: PermissionMode,
    /// The operator's schedules; the chat cannot remove them.
    pub list: Vec<OperatorSchedule>,
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        Self {
            timezone: "UTC".to_owned(),
            min_interval: Duration::from_secs(5 * 60),
            catch_up: CatchUp::Once,
            agent: PermissionMode::Ask,
            list: Vec::new(),
        }
    }
}

/// One `[[schedules.list]]` table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct OperatorSchedule {
    /// Its name, unique among the operator's: shown in the run's text
    /// (`⏰ NAME: prompt`) and the key its slots are claimed under.
    pub name: String,
    /// The chat it runs in.
    pub chat: i64,
    /// The forum topic it runs in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<i32>,
    /// A period (humantime), slots aligned to the Unix epoch; or `cron`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// Five cron fields; or `every`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The zone of `cron` (IANA); default `schedules.timezone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// What the agent is asked.
    pub prompt: String,
}

impl OperatorSchedule {
    /// Its timing, or the error naming the key at fault (`at` names it as
    /// `schedules.list[N]`).
    pub fn when(&self, at: &str) -> Result<When, ConfigError> {
        let shown = |v: &Option<String>| Value::from(v.clone().unwrap_or_default());
        match (&self.every, &self.cron) {
            (Some(every), None) => When::every(every)
                .map_err(|e| bad_value(&format!("{at}.every"), &shown(&self.every), e.to_string())),
            (None, Some(cron)) => When::cron(cron)
                .map_err(|e| bad_value(&format!("{at}.cron"), &shown(&self.cron), e.to_string())),
            _ => Err(bad_value(
                at,
                &Value::from(self.name.clone()),
                "needs exactly one of `every` or `cron`",
            )),
        }
    }
}

impl SchedulesConfig {
    /// The default zone, each schedule's zone, name, chat, prompt and
    /// timing: the first error names its key.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        zone(&self.timezone).map_err(|e| {
            bad_value(
                "schedules.timezone",
                &Value::from(self.timezone.clone()),
                e.to_string(),
            )
        })?;
        if self.min_interval.is_zero() {
            return Err(bad_value(
                "schedules.min_interval",
                &Value::from("0s"),
                "must be greater than zero",
            ));
        }
        for (i, s) in self.list.iter().enumerate() {
            let at = format!("schedules.list[{i}]");
            if s.name.trim().is_empty() {
                return Err(bad_value(
                    &format!("{at}.name"),
                    &Value::from(""),
                    "must not be empty",
                ));
            }
            if self.list[..i].iter().any(|o| o.name == s.name) {
                return Err(bad_value(
                    &format!("{at}.name"),
                    &Value::from(s.name.clone()),
                    "another schedule has this name",
                ));
            }
            if s.chat == 0 {
                return Err(bad_value(
                    &format!("{at}.chat"),
                    &Value::Integer(0),
                    "must be a chat id",
                ));
            }
            if s.prompt.trim().is_empty() {
                return Err(bad_value(
                    &format!("{at}.prompt"),
                    &Value::from(""),
                    "must not be empty",
                ));
            }
            if let Some(tz) = &s.tz {
                zone(tz).map_err(|e| {
                    bad_value(&format!("{at}.tz"), &Value::from(tz.clone()), e.to_string())
                })?;
            }
            s.when(&at)?;
        }
        Ok(())
    }
}
