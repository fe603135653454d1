//! The import rules the module layout keeps (ARCHITECTURE.md, "Layers"),
//! read from the source: an import circle compiles, so only this test sees
//! one come back. Comments and `#[cfg(test)]` modules are not read, nor a
//! test module's own file (`tests.rs`, or a file under a `tests/` folder).

use std::path::{Path, PathBuf};

/// One rule: no file under `under` names any of `forbidden` in its code,
/// except where the name goes on into one of `allowed`.
struct Rule {
    /// Files, or folders read whole.
    under: &'static [&'static str],
    /// Paths those files may not use.
    forbidden: &'static [&'static str],
    /// Longer paths that a forbidden one may start.
    allowed: &'static [&'static str],
    /// Files, or folders, under `under` that the rule leaves out.
    except: &'static [&'static str],
    /// Why, for the failure message.
    why: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        under: &["src/agent.rs", "src/agent"],
        forbidden: &["crate::chat", "crate::telegram", "crate::app"],
        allowed: &[],
        except: &[],
        why: "the agent side knows nothing of the chat or of Telegram",
    },
    Rule {
        under: &["src"],
        except: &[
            "src/agent/claude.rs",
            "src/agent/claude",
            "src/agent/acp.rs",
            "src/agent/acp",
            "src/agent/backends.rs",
        ],
        forbidden: &["claude::", "acp::"],
        allowed: &[],
        why: "nothing outside a backend imports one, what every backend shares included: \
              it goes through `agent::` and `agent::backends` (where the backend is \
              chosen, the one place)",
    },
    Rule {
        under: &["src/agent/claude.rs", "src/agent/claude"],
        forbidden: &["acp::"],
        allowed: &[],
        except: &[],
        why: "no backend imports another",
    },
    Rule {
        under: &["src/agent/acp.rs", "src/agent/acp"],
        forbidden: &["claude::"],
        allowed: &[],
        except: &[],
        why: "no backend imports another",
    },
    Rule {
        under: &["src/chat.rs", "src/chat"],
        forbidden: &["claude::protocol", "ToolRegistry", "ToolName::parse"],
        allowed: &[],
        except: &[],
        why: "the turn sees typed calls: no protocol, no registry, no name taken apart",
    },
    Rule {
        under: &["src/agent/claude/protocol.rs", "src/agent/claude/protocol"],
        forbidden: &["permissions"],
        allowed: &[],
        except: &[],
        why: "the wire format decides nothing (permissions reads it, not the other way)",
    },
    Rule {
        under: &["src/state.rs", "src/state"],
        forbidden: &["crate::telegram", "crate::chat", "crate::agent"],
        allowed: &[],
        except: &[],
        why: "the store sits below everything it stores for",
    },
    Rule {
        under: &["src/incoming.rs", "src/incoming"],
        forbidden: &[
            "crate::telegram",
            "crate::chat",
            "crate::state",
            "crate::agent",
        ],
        allowed: &[],
        except: &[],
        why: "a message read once sits below the store that keeps it and the actors that act on it",
    },
    Rule {
        under: &["src/when.rs", "src/when"],
        forbidden: &[
            "crate::config",
            "crate::schedule",
            "crate::state",
            "crate::chat",
            "crate::telegram",
            "crate::agent",
            "crate::app",
        ],
        allowed: &[],
        except: &[],
        why: "a schedule's slot arithmetic is pure, below the config that checks timings with it",
    },
    Rule {
        under: &["src/schedule.rs", "src/schedule"],
        forbidden: &[
            "crate::chat",
            "crate::telegram",
            "crate::agent",
            "crate::app",
        ],
        allowed: &[],
        except: &[],
        why: "the scheduler sits below the chat: a run goes up as a RunDue the dispatcher takes",
    },
    Rule {
        under: &["src/ops/metrics.rs"],
        forbidden: &["crate::events", "super::"],
        allowed: &[],
        except: &[],
        why: "the metrics know nothing of the event bus that carries them",
    },
    Rule {
        under: &["src/events.rs", "src/ops.rs", "src/ops", "src/outcome.rs"],
        forbidden: &["crate::chat", "crate::telegram::intake", "crate::app"],
        allowed: &[],
        except: &[],
        why: "the bus, ops and the outcome value sit below the chat: what they need of it is handed in",
    },
    Rule {
        under: &[
            "src/telegram/outbox.rs",
            "src/telegram/outbox",
            "src/telegram/typing.rs",
        ],
        forbidden: &["crate::chat"],
        allowed: &["crate::chat::notices::"],
        except: &[],
        why: "the transport imports no chat type (the typing lease is `telegram::typing`'s)",
    },
    Rule {
        under: &["src/telegram/outbox"],
        forbidden: &["super::", "crate::telegram::outbox"],
        allowed: &[
            "super::deliver",
            "super::error",
            "super::jobs",
            "super::keyboard",
            "super::known",
            "super::lane",
            "super::live",
            "super::pacing",
            "super::post",
            "super::requests",
            "super::resend",
            "super::send",
            "super::workers",
        ],
        except: &[],
        why: "the outbox's parts reach each other, never back into the actor",
    },
    Rule {
        under: &["src/events.rs"],
        forbidden: &["crate::ops::"],
        allowed: &["crate::ops::metrics::"],
        except: &[],
        why: "the bus knows the metrics, nothing else of ops (which follows the bus)",
    },
    Rule {
        under: &["src"],
        forbidden: &[
            "teloxide::prelude",
            "teloxide::requests::Request",
            "teloxide::requests::HasPayload",
        ],
        allowed: &[],
        except: &[],
        why: "every Bot API method goes through telegram::call (teloxide's own path pauses 10 s after a 5xx)",
    },
];

/// A test or bench file that tests one backend's own protocol, and so may
/// import that backend (and no other).
struct BackendTest {
    /// The file.
    file: &'static str,
    /// The backend it tests (its module under `agent::`).
    backend: &'static str,
    /// Why it needs the backend itself, not `agent::backends`.
    why: &'static str,
}

/// The backends, by their module under `agent::`.
const BACKENDS: &[&str] = &["claude", "acp"];

/// Every test and bench but these goes through the neutral API
/// (`agent::backends`, `agent::host`).
const BACKEND_TESTS: &[BackendTest] = &[
    BackendTest {
        file: "tests/claude_backend.rs",
        backend: "claude",
        why: "the claude backend's control protocol and its faults, against fake-claude",
    },
    BackendTest {
        file: "tests/acp_backend.rs",
        backend: "acp",
        why: "the acp backend's JSON-RPC protocol and its faults, against fake-acp",
    },
    BackendTest {
        file: "benches/real_cli.rs",
        backend: "claude",
        why: "measures the backend against the bare stream-json protocol \
              (its lines, permission answers and MCP replies) spoken to the same CLI",
    },
];

/// Where the backend rules are written: the file names the paths it forbids.
const THIS_FILE: &str = "tests/layering.rs";

/// Whether `path` is a test module's file: `tests.rs`, or under `tests/`.
fn is_test_module(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs")
        || path.file_name().is_some_and(|n| n == "tests") && path.is_dir()
}

/// The `.rs` files at `path`: the file itself, or every file beneath it,
/// test modules' files left out.
fn files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut out = Vec::new();
    let entries = std::fs::read_dir(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let path = entry.path();
        if is_test_module(&path) {
            continue;
        }
        if path.is_dir() {
            out.extend(files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The code of a file: no comment lines, nothing from its first
/// `#[cfg(test)]` module on.
fn code(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed == "#[cfg(test)]"
            && lines[i + 1..]
                .iter()
                .find(|l| !l.trim().is_empty())
                .is_some_and(|l| l.trim_start().starts_with("mod "))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        out.push((i + 1, *line));
    }
    out
}

/// Where `line` names `forbidden` other than as the start of an allowed path.
fn breaks(line: &str, forbidden: &str, allowed: &[&str]) -> bool {
    line.match_indices(forbidden)
        .any(|(at, _)| !allowed.iter().any(|a| line[at..].starts_with(a)))
}

#[test]
fn no_module_imports_against_the_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    for rule in RULES {
        for under in rule.under {
            let path = root.join(under);
            assert!(path.exists(), "{under} is gone: update the rule");
            for except in rule.except {
                assert!(
                    root.join(except).exists(),
                    "{except} is gone: update the rule"
                );
            }
            let left_out = |file: &Path| rule.except.iter().any(|e| file.starts_with(root.join(e)));
            for file in files(&path).into_iter().filter(|f| !left_out(f)) {
                let text = std::fs::read_to_string(&file).expect("a source file");
                for (n, line) in code(&text) {
                    for forbidden in rule.forbidden {
                        if breaks(line, forbidden, rule.allowed) {
                            broken.push(format!(
                                "{}:{n}: `{forbidden}` ({}): {}",
                                file.strip_prefix(root).unwrap_or(&file).display(),
                                rule.why,
                                line.trim()
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn tests_and_benches_import_a_backend_only_to_test_its_own_protocol() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    for listed in BACKEND_TESTS {
        let text = std::fs::read_to_string(root.join(listed.file))
            .unwrap_or_else(|e| panic!("{}: {e}: update the allow-list", listed.file));
        let own = format!("agent::{}::", listed.backend);
        assert!(
            text.contains(&own),
            "{} no longer imports `{own}`: take it off the allow-list",
            listed.file
        );
    }
    for under in ["tests", "benches"] {
        for file in files(&root.join(under)) {
            let name = file.strip_prefix(root).unwrap_or(&file);
            if name == Path::new(THIS_FILE) {
                continue;
            }
            let listed = BACKEND_TESTS.iter().find(|t| Path::new(t.file) == name);
            let text = std::fs::read_to_string(&file).expect("a source file");
            for backend in BACKENDS {
                if listed.is_some_and(|t| t.backend == *backend) {
                    continue;
                }
                let forbidden = format!("{backend}::");
                let why = match listed {
                    Some(t) => format!("{} tests `{}` only: {}", t.file, t.backend, t.why),
                    None => "a test or bench goes through `agent::backends` or `agent::host`; \
                             only a file on BACKEND_TESTS tests a backend's own protocol"
                        .to_string(),
                };
                for (n, line) in code(&text) {
                    if breaks(line, &forbidden, &[]) {
                        broken.push(format!(
                            "{}:{n}: `{forbidden}` ({why}): {}",
                            name.display(),
                            line.trim()
                        ));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_reader_skips_comments_and_test_modules_only() {
    let text = "use crate::chat::X;\n// use crate::telegram::Y;\nfn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::app::Z;\n}\n";
    let kept: Vec<&str> = code(text).into_iter().map(|(_, l)| l).collect();
    assert_eq!(kept, vec!["use crate::chat::X;", "fn f() {}"]);
    assert!(is_test_module(Path::new("src/agent/tools/tests.rs")));
    assert!(!is_test_module(Path::new("src/agent/tools.rs")));
    assert!(breaks("use crate::ops::Metrics;", "crate::ops::", &[]));
    assert!(!breaks(
        "use crate::ops::metrics::Metrics;",
        "crate::ops::",
        &["crate::ops::metrics::"]
    ));
    assert!(breaks(
        "use crate::ops::{follow, metrics::Metrics};",
        "crate::ops::",
        &["crate::ops::metrics::"]
    ));
}
