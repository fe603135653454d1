//! `[agent.network]`: what network the sandboxed agent has. By default a
//! network namespace of its own, whose only way out is turnstile's proxy,
//! to the model API's host and port and to what `agent.network.allow`
//! names (exact hosts, `*.domain`, each with an optional `:port`, 443 when
//! none is given). `mode = "host"` is the explicit opt-out.

use serde::{Deserialize, Deserializer, Serialize};
use toml::Value;

use super::{Backend, Config, ConfigError, NetworkMode, Sandbox, bad_value};

/// The port an allow entry without one stands for.
pub const DEFAULT_PORT: u16 = 443;

/// `[agent.network]`
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// `"isolated"` (the default) or `"host"`.
    pub mode: NetworkMode,
    /// Hosts the agent may reach besides the model API: `example.com`,
    /// `*.example.com` (its subdomains), each with an optional `:port`.
    /// A list, or (from `TURNSTILE_AGENT_NETWORK_ALLOW`) one
    /// comma-separated string.
    #[serde(deserialize_with = "list_or_commas")]
    pub allow: Vec<String>,
}

/// A list of strings, or one string of comma-separated entries (how an
/// environment override of a table's entry arrives).
fn list_or_commas<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        List(Vec<String>),
        Text(String),
    }
    let given = Given::deserialize(deserializer).map_err(|_| {
        serde::de::Error::custom(
            "expected a list of hosts in square brackets, such as [\"example.com\"], \
             or one comma-separated text",
        )
    })?;
    Ok(match given {
        Given::List(list) => list,
        Given::Text(text) => text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

/// Which hosts an allow entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// This host exactly (a name, lowercase, or an IP address).
    Exact(String),
    /// Every subdomain of this domain (`*.example.com`), not the domain.
    Subdomains(String),
}

/// One entry of the allowlist: hosts and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    /// The hosts.
    pub host: HostPattern,
    /// The port.
    pub port: u16,
}

impl HostRule {
    /// Parses an `agent.network.allow` entry: `host`, `*.domain`, either
    /// with `:port`; an IPv6 address in brackets (`[::1]:8080`).
    ///
    /// # Errors
    ///
    /// Why `text` is no entry.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (host, port) = split_port(text)?;
        let host = normal_host(host);
        if let Some(domain) = host.strip_prefix("*.") {
            check_name(domain)?;
            if !domain.contains('.') {
                return Err(format!("`*.{domain}` would allow a whole top-level domain"));
            }
            return Ok(Self {
                host: HostPattern::Subdomains(domain.to_owned()),
                port,
            });
        }
        if host.parse::<std::net::IpAddr>().is_err() {
            check_name(&host)?;
        }
        Ok(Self {
            host: HostPattern::Exact(host),
            port,
        })
    }

    /// Whether it allows `host` (as [`normal_host`] makes it) on `port`.
    #[must_use]
    pub fn allows(&self, host: &str, port: u16) -> bool {
        port == self.port
            && match &self.host {
                HostPattern::Exact(exact) => exact == host,
                HostPattern::Subdomains(domain) => host
                    .strip_suffix(domain.as_str())
                    .and_then(|head| head.strip_suffix('.'))
                    .is_some_and(|head| !head.is_empty()),
            }
    }
}

impl std::fmt::Display for HostRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            HostPattern::Exact(host) if host.contains(':') => write!(f, "[{host}]:{}", self.port),
            HostPattern::Exact(host) => write!(f, "{host}:{}", self.port),
            HostPattern::Subdomains(domain) => write!(f, "*.{domain}:{}", self.port),
        }
    }
}

/// A host as it is compared: lowercase, without brackets or a final dot.
#[must_use]
pub fn normal_host(host: &str) -> String {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// `host:port`, `[v6]:port` or a bare host (port 443).
fn split_port(text: &str) -> Result<(&str, u16), String> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, tail) = rest.split_once(']').ok_or("an unclosed `[`")?;
        (host, tail.strip_prefix(':'))
    } else if text.matches(':').count() == 1 {
        let (host, port) = text.split_once(':').unwrap_or((text, ""));
        (host, Some(port))
    } else {
        (text, None)
    };
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(format!("`{port}` is not a port (1 to 65535)")),
        },
    };
    Ok((host, port))
}

/// A host name: dot-separated labels of letters, digits, `-` and `_`.
fn check_name(name: &str) -> Result<(), String> {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "`{name}` is not a host name (write `example.com`, `*.example.com`, either with \
             an optional `:port`)"
        ));
    }
    Ok(())
}

/// What the agent's network is, as the config makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkPolicy {
    /// The host's network: `agent.network.mode = "host"`, no sandbox, a
    /// launcher, or the scripted backend (no process).
    Shared(&'static str),
    /// A namespace of its own; out only through the proxy, to these.
    Isolated(Vec<HostRule>),
}

impl NetworkPolicy {
    /// The first rule allowing `host` (as [`normal_host`] makes it) on
    /// `port`, if any.
    #[must_use]
    pub fn rule_for(&self, host: &str, port: u16) -> Option<&HostRule> {
        match self {
            Self::Shared(_) => None,
            Self::Isolated(rules) => rules.iter().find(|r| r.allows(host, port)),
        }
    }
}

impl Config {
    /// The model API's host and port, for the allowlist: for `claude`
    /// `ANTHROPIC_BASE_URL` (from `agent.env`, or from `env` when
    /// `agent.pass_env` names it), else `api.anthropic.com:443`; for `acp`
    /// `GOOGLE_GEMINI_BASE_URL` likewise, else
    /// `generativelanguage.googleapis.com:443`.
    pub fn model_api(&self, env: impl Fn(&str) -> Option<String>) -> Option<HostRule> {
        let (var, default) = match self.agent.backend {
            Backend::Scripted => return None,
            Backend::Claude => ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
            Backend::Acp => (
                "GOOGLE_GEMINI_BASE_URL",
                "https://generativelanguage.googleapis.com",
            ),
        };
        let given = self.agent.env.get(var).cloned().or_else(|| {
            self.agent
                .pass_env
                .iter()
                .any(|p| p == var)
                .then(|| env(var))
                .flatten()
        });
        let url = given.filter(|u| !u.is_empty());
        let url = reqwest::Url::parse(url.as_deref().unwrap_or(default)).ok()?;
        Some(HostRule {
            host: HostPattern::Exact(normal_host(url.host_str()?)),
            port: url.port_or_known_default()?,
        })
    }

    /// The agent's network, `env` read for a passed `ANTHROPIC_BASE_URL`.
    pub fn network_policy(&self, env: impl Fn(&str) -> Option<String>) -> NetworkPolicy {
        let agent = &self.agent;
        if agent.backend == Backend::Scripted {
            return NetworkPolicy::Shared("the scripted backend starts no process");
        }
        if agent.network.mode == NetworkMode::Host {
            return NetworkPolicy::Shared("agent.network.mode = \"host\"");
        }
        if agent.sandbox == Sandbox::None {
            return NetworkPolicy::Shared("agent.sandbox = \"none\" (no namespace without it)");
        }
        if !agent.launcher.is_empty() {
            return NetworkPolicy::Shared("agent.launcher is set (the launcher's host decides)");
        }
        let rules = self
            .model_api(env)
            .into_iter()
            .chain(
                agent
                    .network
                    .allow
                    .iter()
                    .filter_map(|e| HostRule::parse(e).ok()),
            )
            .collect();
        NetworkPolicy::Isolated(rules)
    }

    /// One line saying the effective network policy (`check-config`).
    pub fn network_summary(&self, env: impl Fn(&str) -> Option<String>) -> String {
        match self.network_policy(env) {
            NetworkPolicy::Shared(why) => format!(
                "network: the agent shares the host's network (loopback services, UNIX and \
                 abstract sockets, the internet): {why}"
            ),
            NetworkPolicy::Isolated(rules) => {
                let rules: Vec<String> = rules.iter().map(ToString::to_string).collect();
                format!(
                    "network: the agent has a network namespace of its own; out only through \
                     turnstile's proxy, to {} (agent.network.allow adds more)",
                    if rules.is_empty() {
                        "nothing".to_owned()
                    } else {
                        rules.join(", ")
                    }
                )
            }
        }
    }

    /// Every `agent.network.allow` entry parses.
    pub(super) fn check_network(&self) -> Result<(), ConfigError> {
        for entry in &self.agent.network.allow {
            HostRule::parse(entry).map_err(|reason| {
                bad_value("agent.network.allow", &Value::from(entry.as_str()), reason)
            })?;
        }
        Ok(())
    }

    /// The warning for a network shared with the host, when the agent
    /// would otherwise have its own.
    pub(super) fn network_warning(&self) -> Option<String> {
        let agent = &self.agent;
        if agent.backend == Backend::Scripted {
            return None;
        }
        if agent.network.mode == NetworkMode::Host {
            return Some(
                "agent.network.mode = \"host\": the agent shares the host's network: it reaches \
                 services on the host's loopback (the ops port included), the host's UNIX and \
                 abstract sockets (a root-owned docker.sock when turnstile runs as root) and \
                 every address on the internet (the default \"isolated\" gives it a namespace \
                 of its own)"
                    .to_owned(),
            );
        }
        if agent.sandbox == Sandbox::Bubblewrap && !agent.launcher.is_empty() {
            return Some(
                "agent.launcher is set: turnstile's network policy (agent.network) does not \
                 apply; the agent has whatever network the launcher gives it"
                    .to_owned(),
            );
        }
        None
    }
}

#[cfg(test)]
mod tests;
