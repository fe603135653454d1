//! The words of a schedule, as the chat and the agent write them:
//! `every 2h`, `at 09:00` (daily), `cron "0 9 * * 1-5"`, `in 30m` (once).
//! [`read_command`] reads `/schedule`'s arguments (the timing, then the
//! prompt); [`read_when`] reads the agent's `when` (the timing alone).

use super::when::{When, WhenError};

/// The text after `/schedule`: its timing and its prompt.
///
/// # Errors
///
/// A [`WhenError`] saying what is wrong, for the chat.
pub fn read_command(args: &str, now_ms: i64) -> Result<(When, String), WhenError> {
    let args = args.trim();
    let (kind, rest) = split_word(args);
    let (when, prompt) = match kind.to_ascii_lowercase().as_str() {
        "every" => {
            let (d, prompt) = split_word(rest);
            (When::every(d)?, prompt)
        }
        "at" => {
            let (t, prompt) = split_word(rest);
            (When::daily(t)?, prompt)
        }
        "in" => {
            let (d, prompt) = split_word(rest);
            (When::once_in(d, now_ms)?, prompt)
        }
        "cron" => {
            let (expr, prompt) = cron_words(rest)?;
            (When::cron(&expr)?, prompt)
        }
        _ => return Err(WhenError::Form(args.to_owned())),
    };
    Ok((when, prompt.trim().to_owned()))
}

/// The agent's `when`: one of the forms, without a prompt (the quotes
/// around a cron expression are optional).
///
/// # Errors
///
/// A [`WhenError`] saying what is wrong, for the agent.
pub fn read_when(text: &str, now_ms: i64) -> Result<When, WhenError> {
    let text = text.trim();
    let (kind, rest) = split_word(text);
    let rest = rest.trim();
    match kind.to_ascii_lowercase().as_str() {
        "every" => When::every(rest),
        "at" => When::daily(rest),
        "in" => When::once_in(rest, now_ms),
        "cron" => When::cron(unquote(rest)),
        _ => Err(WhenError::Form(text.to_owned())),
    }
}

/// The first word and the rest (trimmed at its start).
fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    text.split_once(char::is_whitespace)
        .map_or((text, ""), |(word, rest)| (word, rest.trim_start()))
}

/// A cron expression, quoted (`"…"`, or the typographic quotes a phone
/// may put) or as its first five words, and the rest.
fn cron_words(text: &str) -> Result<(String, &str), WhenError> {
    for (open, close) in [('"', '"'), ('“', '”'), ('\'', '\'')] {
        if let Some(inner) = text.strip_prefix(open) {
            let Some((expr, rest)) = inner.split_once(close) else {
                return Err(WhenError::Cron {
                    expr: text.to_owned(),
                    reason: "the closing quote is missing".into(),
                });
            };
            return Ok((expr.to_owned(), rest));
        }
    }
    let mut rest = text;
    let mut fields = Vec::new();
    for _ in 0..5 {
        let (word, after) = split_word(rest);
        if word.is_empty() {
            break;
        }
        fields.push(word);
        rest = after;
    }
    Ok((fields.join(" "), rest))
}

fn unquote(text: &str) -> &str {
    let t = text.trim();
    for (open, close) in [('"', '"'), ('“', '”'), ('\'', '\'')] {
        if let Some(inner) = t.strip_prefix(open).and_then(|t| t.strip_suffix(close)) {
            return inner;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn each_form_of_the_command_is_read() {
        let (when, prompt) = read_command("every 2h check the build", 0).unwrap();
        assert_eq!(
            (when, prompt.as_str()),
            (When::Every(Duration::from_secs(7200)), "check the build")
        );
        let (when, prompt) = read_command("at 9:30 standup notes", 0).unwrap();
        assert_eq!(
            (when.stored(), prompt.as_str()),
            ("at 09:30".into(), "standup notes")
        );
        let (when, prompt) = read_command("cron \"0 9 * * 1-5\" weekday report", 0).unwrap();
        assert_eq!(
            (when.stored(), prompt.as_str()),
            ("cron 0 9 * * 1-5".into(), "weekday report")
        );
        let (when, prompt) = read_command("cron 0 9 * * 1-5 weekday report", 0).unwrap();
        assert_eq!(
            (when.stored(), prompt.as_str()),
            ("cron 0 9 * * 1-5".into(), "weekday report")
        );
        let (when, prompt) = read_command("In 30m stretch", 1_000).unwrap();
        assert_eq!(
            (when, prompt.as_str()),
            (When::Once(1_000 + 1_800_000), "stretch")
        );
    }

    #[test]
    fn a_bad_command_says_what_is_wrong() {
        let err = read_command("cron \"0 9 * *\" report", 0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bad cron expression") && err.contains("five are needed"),
            "{err}"
        );
        let err = read_command("cron \"0 25 * * *\" report", 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bad cron expression “0 25 * * *”"), "{err}");
        let err = read_command("cron \"0 9 * * *", 0).unwrap_err().to_string();
        assert!(err.contains("closing quote"), "{err}");
        let err = read_command("sometimes do it", 0).unwrap_err().to_string();
        assert!(err.contains("every 2h"), "{err}");
        assert!(read_command("every often x", 0).is_err());
        assert!(read_command("at 25:00 x", 0).is_err());
    }

    #[test]
    fn the_agents_when_is_read() {
        assert_eq!(read_when("every 90m", 0).unwrap().stored(), "every 1h 30m");
        assert_eq!(
            read_when("cron \"0 9 * * 1-5\"", 0).unwrap().stored(),
            "cron 0 9 * * 1-5"
        );
        assert_eq!(
            read_when("cron 0 9 * * 1-5", 0).unwrap().stored(),
            "cron 0 9 * * 1-5"
        );
        assert_eq!(read_when("in 1h", 5).unwrap(), When::Once(5 + 3_600_000));
        assert!(read_when("tomorrow", 0).is_err());
    }
}
