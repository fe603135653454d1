//! How the client shows the server's lines to a person: one or more text
//! lines each, in colour only when asked (stdout a terminal, `NO_COLOR`
//! unset). The answer's pieces are gathered into lines: a whole line shows
//! as soon as it is written, the rest waits for its end of line (the
//! answer itself then comes whole).

use super::protocol::ServerLine;

/// Most bytes of a line of the answer held before it shows unfinished.
const PARTIAL_BYTES: usize = 4096;

/// Whether to paint: stdout is a terminal and `NO_COLOR` is not set to
/// something (<https://no-color.org>).
pub fn colour_wanted(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Renders lines, keeping the unfinished line of an answer being written.
#[derive(Debug, Default)]
pub struct LineRenderer {
    colour: bool,
    /// The answer's line being written, not shown yet.
    partial: String,
}

impl LineRenderer {
    /// A renderer painting when `colour`.
    pub fn new(colour: bool) -> Self {
        Self {
            colour,
            partial: String::new(),
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// What `line` shows, if anything yet.
    pub fn render(&mut self, line: &ServerLine) -> Option<String> {
        match line {
            ServerLine::Writing { text, fresh } => self.writing(text, *fresh),
            ServerLine::Said { .. } | ServerLine::TurnEnded { .. } => {
                // The answer came whole, or will not come.
                self.partial.clear();
                Some(self.shown(line))
            }
            other => Some(self.shown(other)),
        }
    }

    /// A piece of the answer: the lines it finished.
    fn writing(&mut self, text: &str, fresh: bool) -> Option<String> {
        if fresh {
            self.partial.clear();
        }
        self.partial.push_str(text);
        let cut = match self.partial.rfind('\n') {
            Some(at) => at,
            None if self.partial.len() > PARTIAL_BYTES => self.partial.len(),
            None => return None,
        };
        let rest = self.partial.split_off(cut);
        let done = std::mem::replace(&mut self.partial, rest.trim_start_matches('\n').into());
        let lines: Vec<String> = done
            .lines()
            .map(|line| self.paint("2", &format!("  | {line}")))
            .collect();
        (!lines.is_empty()).then(|| lines.join("\n"))
    }

    /// `line` as shown by itself.
    fn shown(&self, line: &ServerLine) -> String {
        match line {
            ServerLine::Hello { version } => format!("protocol {version}"),
            ServerLine::Conversation {
                conversation,
                title,
                state,
                last_activity,
                ..
            } => format!(
                "{:<24} {:<8} {:<20} {}",
                conversation,
                state,
                chrono::DateTime::from_timestamp(*last_activity, 0)
                    .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
                    .unwrap_or_default(),
                title
            ),
            ServerLine::Listed { count } => format!("{count} conversation(s)"),
            ServerLine::Following { conversation } => self.paint(
                "2",
                &format!("-- following {conversation} (Ctrl-D or Ctrl-C ends)"),
            ),
            ServerLine::Message { from, text } => {
                format!("{} {text}", self.paint("1;36", &format!("{from}:")))
            }
            ServerLine::TurnStarted { turn } => self.paint("2", &format!("-- turn {turn} started")),
            ServerLine::Status { text } => {
                self.paint("2", &format!("  ~ {}", text.replace('\n', " - ")))
            }
            ServerLine::Writing { text, .. } => self.paint("2", &format!("  | {text}")),
            ServerLine::Said { text } => format!("{} {text}", self.paint("1;32", "bot:")),
            ServerLine::TurnEnded { turn, outcome } => {
                self.paint("2", &format!("-- turn {turn} ended: {outcome}"))
            }
            ServerLine::Asked { question, options } => {
                let mut shown = format!("{} {question}", self.paint("1;33", "approval asked:"));
                for (n, offer) in options.iter().enumerate() {
                    shown.push_str(&format!("\n  [{}] {}", n + 1, offer.label));
                }
                if !options.is_empty() {
                    shown.push_str(&self.paint("2", "\n  (type a number to answer)"));
                }
                shown
            }
            ServerLine::Decided { decision } => self.paint("33", &format!("-- {decision}")),
            // The inbox row's id is from a reserved range, nothing to a
            // person; `--json` keeps it.
            ServerLine::Accepted { .. } => self.paint("2", "(sent)"),
            ServerLine::Missed { count } => self.paint(
                "33",
                &format!("... {count} line(s) missed: this terminal fell behind"),
            ),
            ServerLine::Bye { reason } => self.paint("33", &format!("-- {reason}")),
            ServerLine::Error { message } => self.paint("31", &format!("error: {message}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writing(text: &str, fresh: bool) -> ServerLine {
        ServerLine::Writing {
            text: text.into(),
            fresh,
        }
    }

    #[test]
    fn colour_only_on_a_terminal_and_not_when_no_color_is_set() {
        assert!(colour_wanted(true, None));
        assert!(!colour_wanted(false, None));
        assert!(!colour_wanted(true, Some("1".as_ref())));
        assert!(colour_wanted(true, Some("".as_ref())), "an empty NO_COLOR");
        let mut plain = LineRenderer::new(false);
        let said = ServerLine::Said { text: "hi".into() };
        assert_eq!(plain.render(&said).as_deref(), Some("bot: hi"));
        let mut painted = LineRenderer::new(true);
        assert_eq!(
            painted.render(&said).as_deref(),
            Some("\x1b[1;32mbot:\x1b[0m hi")
        );
    }

    #[test]
    fn a_typed_line_taken_shows_as_sent_without_its_inbox_id() {
        let accepted = ServerLine::Accepted {
            update_id: -4_503_599_627_370_496,
        };
        let mut plain = LineRenderer::new(false);
        assert_eq!(plain.render(&accepted).as_deref(), Some("(sent)"));
        let mut painted = LineRenderer::new(true);
        assert_eq!(
            painted.render(&accepted).as_deref(),
            Some("\x1b[2m(sent)\x1b[0m")
        );
    }

    #[test]
    fn an_answer_being_written_shows_line_by_line_and_a_fresh_text_drops_the_rest() {
        let mut r = LineRenderer::new(false);
        assert_eq!(r.render(&writing("Here is", true)), None);
        assert_eq!(
            r.render(&writing(" one\nand two\nand", false)).as_deref(),
            Some("  | Here is one\n  | and two")
        );
        assert_eq!(
            r.render(&writing("new\n", true)).as_deref(),
            Some("  | new")
        );
        assert_eq!(r.render(&writing("x".repeat(10).as_str(), false)), None);
        let said = ServerLine::Said { text: "all".into() };
        assert_eq!(r.render(&said).as_deref(), Some("bot: all"));
        assert_eq!(r.render(&writing("\n", false)), None, "no empty line");
        let long = "y".repeat(PARTIAL_BYTES + 1);
        let shown = r.render(&writing(&long, true)).expect("a long line shows");
        assert_eq!(shown, format!("  | {long}"));
        let status = ServerLine::Status {
            text: "🔧 Bash: ls\n1 tool call · 0s".into(),
        };
        assert_eq!(
            r.render(&status).as_deref(),
            Some("  ~ 🔧 Bash: ls - 1 tool call · 0s")
        );
    }
}
