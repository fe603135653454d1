//! Where the chats' directories lie, their places: the default workdirs
//! (`agent.workdir`), the agents' homes (`homes/{chat}` beside the state
//! file) and each project's workdirs (`[projects.NAME].workdir`). Under the
//! sandbox every place's root (the directory before its first `{chat}`, or
//! the place itself without one) is hidden from each agent but for its own
//! directories, so the roots must lie apart; and `check-config` warns when
//! chats share one.

use std::path::{Path, PathBuf};

use toml::Value;

use super::{Backend, Config, ConfigError, Sandbox, bad_value};
use crate::agent::host::seal;

/// The placeholder for the chat id.
const CHAT: &str = "{chat}";

/// One place: the key that sets it, as written, and its template
/// (absolute, `{chat}` unfilled).
struct DirTemplate {
    key: String,
    shown: String,
    template: PathBuf,
}

impl DirTemplate {
    /// The directory holding every chat's directory of this place.
    fn root(&self) -> PathBuf {
        place_root(&self.template)
    }
}

/// The directory holding every chat's directory made from `template`:
/// the path before its first `{chat}`, or the template itself.
#[must_use]
pub fn place_root(template: &Path) -> PathBuf {
    seal::chat_root(template).unwrap_or_else(|| template.to_owned())
}

/// Whether either of `a` and `b` is the other or lies inside it.
fn overlap(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

impl Config {
    /// Every place, the homes and the default workdirs first.
    fn places(&self) -> Vec<DirTemplate> {
        let mut places = vec![
            DirTemplate {
                key: "state.path (the agents' homes, homes/{chat} beside it)".into(),
                shown: self.state.path.to_string_lossy().into_owned(),
                template: self.agent_home(),
            },
            DirTemplate {
                key: "agent.workdir".into(),
                shown: self.agent.workdir.to_string_lossy().into_owned(),
                template: self.agent_workdir(),
            },
        ];
        places.extend(self.projects.iter().map(|(name, project)| DirTemplate {
            key: format!("projects.{name}.workdir"),
            shown: project.workdir.to_string_lossy().into_owned(),
            template: self.project_workdir(project),
        }));
        places
    }

    /// Every place's root: what the sandbox hides from each agent but for
    /// its own directories.
    #[must_use]
    pub fn place_roots(&self) -> Vec<PathBuf> {
        self.places().iter().map(DirTemplate::root).collect()
    }

    /// Under the sandbox, every place's root lies apart from every other
    /// (neither is the other nor inside it, also with symlinks resolved),
    /// and none is `/` or a system directory the sandbox never hides.
    pub(super) fn check_places(&self) -> Result<(), ConfigError> {
        if self.agent.sandbox != Sandbox::Bubblewrap {
            return Ok(());
        }
        let places = self.places();
        for (i, place) in places.iter().enumerate() {
            let root = place.root();
            let fail = |why: String| {
                Err(bad_value(
                    &place.key,
                    &Value::from(place.shown.as_str()),
                    why,
                ))
            };
            if seal::is_system(&root) || root.parent().is_none() {
                return fail(format!(
                    "its chats' directories lie in `{}`, a system directory the sandbox cannot \
                     hide, so every chat would see the others'; put them in a directory of \
                     their own (such as `{}`)",
                    root.display(),
                    root.join("chats").join(CHAT).display()
                ));
            }
            for other in &places[..i] {
                let theirs = other.root();
                if overlap(&root, &theirs)
                    || overlap(&seal::resolved(&root), &seal::resolved(&theirs))
                {
                    return fail(format!(
                        "its directories (in `{}`) and those of {} (in `{}`) overlap: under the \
                         sandbox each chat sees the whole of its own directory, so one would \
                         see the other's; give each a directory apart from the others",
                        root.display(),
                        other.key,
                        theirs.display()
                    ));
                }
            }
        }
        Ok(())
    }

    /// With the `claude` or `acp` backend: what makes chats share a
    /// directory, so one chat's agent reads another's files or transcripts.
    pub(super) fn sharing_warnings(&self) -> Vec<String> {
        if !matches!(self.agent.backend, Backend::Claude | Backend::Acp) {
            return Vec::new();
        }
        let mut warnings = Vec::new();
        for var in ["HOME", "CLAUDE_CONFIG_DIR"] {
            // Its value is not shown: `agent.env` may hold secrets.
            if self.agent.env.contains_key(var) {
                warnings.push(format!(
                    "agent.env.{var} is set: every chat's agent shares that directory, where \
                     the agent keeps every session's transcript, so one chat's agent can read \
                     another chat's conversations; leave it unset (each chat then gets its own \
                     homes/{{chat}})"
                ));
            }
        }
        let places = self.places();
        for place in places.iter().filter(|p| p.key.ends_with(".workdir")) {
            if !place.template.to_string_lossy().contains(CHAT) {
                warnings.push(format!(
                    "{} = {:?} has no {CHAT}: every conversation working there shares `{}` (its \
                     files, and with a shared home its transcripts); add {CHAT} to give each \
                     its own",
                    place.key,
                    place.shown,
                    place.template.display()
                ));
            }
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::{assert_bad_value, load_err, load_text};

    const STATE: &str = "[state]\npath = \"/var/lib/t/t.db\"\n";

    #[test]
    fn places_apart_load_and_are_all_hidden() {
        let config = load_text(
            &format!(
                "{STATE}[projects.alpha]\nworkdir = \"/srv/alpha/{{chat}}\"\n\
                 [projects.beta]\nworkdir = \"beta\"\n"
            ),
            &[],
        )
        .expect("loads");
        let mut roots = config.place_roots();
        roots.sort();
        assert_eq!(
            roots,
            [
                "/srv/alpha",
                "/var/lib/t/beta",
                "/var/lib/t/homes",
                "/var/lib/t/workspaces"
            ]
            .map(std::path::PathBuf::from)
        );
    }

    #[test]
    fn overlapping_places_are_refused_naming_both() {
        for (table, key, other) in [
            // Inside the default workdirs' root.
            (
                "[projects.a]\nworkdir = \"workspaces/a/{chat}\"\n",
                "projects.a.workdir",
                "agent.workdir",
            ),
            // The default workdirs' root itself.
            (
                "[projects.a]\nworkdir = \"workspaces\"\n",
                "projects.a.workdir",
                "agent.workdir",
            ),
            // One project inside another, or the same directories.
            (
                "[projects.a]\nworkdir = \"/srv/a\"\n[projects.b]\nworkdir = \"/srv/a/b/{chat}\"\n",
                "projects.b.workdir",
                "projects.a.workdir",
            ),
            (
                "[projects.a]\nworkdir = \"/srv/p/{chat}/x\"\n[projects.b]\nworkdir = \"/srv/p/{chat}/y\"\n",
                "projects.b.workdir",
                "projects.a.workdir",
            ),
            // A workdir holding the homes.
            (
                "[agent]\nworkdir = \"/var/lib/t/homes/w/{chat}\"\n",
                "agent.workdir",
                "homes",
            ),
        ] {
            let err = load_err(&format!("{STATE}{table}"), &[]);
            let message = assert_bad_value(&err, key);
            assert!(message.contains(other), "{table}: {message}");
        }
    }

    #[test]
    fn a_place_in_a_system_directory_or_at_the_root_is_refused() {
        for (table, key) in [
            (
                "[projects.a]\nworkdir = \"/srv/{chat}\"\n",
                "projects.a.workdir",
            ),
            (
                "[projects.a]\nworkdir = \"/{chat}\"\n",
                "projects.a.workdir",
            ),
            ("[agent]\nworkdir = \"/home/{chat}\"\n", "agent.workdir"),
        ] {
            let err = load_err(&format!("{STATE}{table}"), &[]);
            let message = assert_bad_value(&err, key);
            assert!(message.contains("system directory"), "{table}: {message}");
        }
        // Without the sandbox nothing is hidden: the layout is the operator's.
        load_text(
            &format!(
                "{STATE}[agent]\nsandbox = \"none\"\n[projects.a]\nworkdir = \"/srv/{{chat}}\"\n"
            ),
            &[],
        )
        .expect("loads");
    }

    #[test]
    fn places_meeting_through_a_symlink_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("dir");
        std::os::unix::fs::symlink(&real, dir.path().join("link")).expect("symlink");
        let text = format!(
            "{STATE}[projects.a]\nworkdir = \"{0}/real/{{chat}}\"\n\
             [projects.b]\nworkdir = \"{0}/link/b/{{chat}}\"\n",
            dir.path().display()
        );
        let err = load_err(&text, &[]);
        assert_bad_value(&err, "projects.b.workdir");
    }

    #[test]
    fn shared_homes_and_workdirs_are_warned_about_for_agent_backends() {
        let shared = "[agent]\nbackend = \"claude\"\nworkdir = \"/srv/w\"\n\
                      [agent.env]\nHOME = \"/srv/h\"\nCLAUDE_CONFIG_DIR = \"/srv/c\"\n\
                      [projects.p]\nworkdir = \"/srv/p\"\n";
        for backend in ["claude", "acp"] {
            let text = format!(
                "{STATE}{}",
                shared.replace("claude\"", &format!("{backend}\""))
            );
            let warnings = load_text(&text, &[]).expect("loads").warnings().join("\n");
            for part in [
                "agent.env.HOME is set",
                "agent.env.CLAUDE_CONFIG_DIR is set",
                "agent.workdir = \"/srv/w\" has no {chat}",
                "projects.p.workdir = \"/srv/p\" has no {chat}",
                "transcript",
            ] {
                assert!(
                    warnings.contains(part),
                    "{backend}: {part:?} not in {warnings}"
                );
            }
        }
        let warnings = load_text(&format!("{STATE}[agent]\nbackend = \"claude\"\n"), &[])
            .expect("loads")
            .warnings()
            .join("\n");
        assert!(!warnings.contains("{chat}"), "{warnings}");
        assert!(!warnings.contains("agent.env"), "{warnings}");
    }
}
