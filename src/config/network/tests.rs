use super::*;
use crate::config::tests::{assert_bad_value, load_err, load_text};

/// Nobody's environment.
fn no_env(_: &str) -> Option<String> {
    None
}

fn rule(text: &str) -> HostRule {
    HostRule::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn an_exact_host_allows_that_host_on_its_port_only() {
    let plain = rule("Registry.NPMjs.org.");
    assert!(plain.allows("registry.npmjs.org", 443));
    assert!(!plain.allows("registry.npmjs.org", 80));
    assert!(!plain.allows("evil.registry.npmjs.org", 443));
    assert!(!plain.allows("registry.npmjs.org.evil.com", 443));
    let local = rule("127.0.0.1:8080");
    assert!(local.allows("127.0.0.1", 8080));
    assert!(
        !local.allows("127.0.0.1", 9464),
        "another port stays closed"
    );
    let v6 = rule("[::1]:8080");
    assert!(v6.allows("::1", 8080));
    assert_eq!(v6.to_string(), "[::1]:8080");
}

#[test]
fn a_wildcard_allows_subdomains_only() {
    let any = rule("*.crates.io");
    assert!(any.allows("static.crates.io", 443));
    assert!(any.allows("a.b.crates.io", 443));
    assert!(
        !any.allows("crates.io", 443),
        "the domain itself is not a subdomain"
    );
    assert!(!any.allows("evilcrates.io", 443));
    assert!(!any.allows("static.crates.io", 22));
    assert!(rule("*.example.com:8443").allows("x.example.com", 8443));
}

#[test]
fn bad_entries_are_refused_naming_key_and_value() {
    for bad in [
        "",
        "*.com",
        "*",
        "host:0",
        "host:99999",
        "host:port",
        "a b.com",
        "http://example.com",
        "example.com/path",
        "[::1",
    ] {
        let text = format!("[agent.network]\nallow = [{bad:?}]\n");
        let err = load_err(&text, &[]);
        let message = assert_bad_value(&err, "agent.network.allow");
        assert!(message.contains(&format!("{bad:?}")), "{bad}: {message}");
    }
    let err = load_err("[agent.network]\nmode = \"open\"\n", &[]);
    let message = assert_bad_value(&err, "agent.network.mode");
    assert!(message.contains("\"isolated\" or \"host\""), "{message}");
}

#[test]
fn the_allowlist_comes_from_the_file_or_one_comma_separated_variable() {
    let from_file = load_text(
        "[agent]\nbackend = \"claude\"\n[agent.network]\nallow = [\"github.com\", \"*.crates.io\"]\n",
        &[],
    )
    .expect("loads");
    let from_env = load_text(
        "[agent]\nbackend = \"claude\"\n",
        &[("TURNSTILE_AGENT_NETWORK_ALLOW", "github.com, *.crates.io")],
    )
    .expect("loads");
    assert_eq!(from_file.agent.network, from_env.agent.network);
    assert_eq!(
        from_env.network_policy(no_env),
        NetworkPolicy::Isolated(vec![
            rule("api.anthropic.com:443"),
            rule("github.com"),
            rule("*.crates.io"),
        ])
    );
}

#[test]
fn the_model_api_comes_from_the_agents_base_url() {
    let set = load_text(
        "[agent]\nbackend = \"claude\"\n[agent.env]\nANTHROPIC_BASE_URL = \"http://127.0.0.1:8080/v1\"\n",
        &[],
    )
    .expect("loads");
    assert_eq!(set.model_api(no_env), Some(rule("127.0.0.1:8080")));
    let passed = load_text(
        "[agent]\nbackend = \"claude\"\npass_env = [\"ANTHROPIC_BASE_URL\"]\n",
        &[],
    )
    .expect("loads");
    let env = |name: &str| (name == "ANTHROPIC_BASE_URL").then(|| "https://proxy.corp:8443".into());
    assert_eq!(passed.model_api(env), Some(rule("proxy.corp:8443")));
    // Not passed: turnstile's own variable is not the agent's.
    let unpassed = load_text("[agent]\nbackend = \"claude\"\n", &[]).expect("loads");
    assert_eq!(unpassed.model_api(env), Some(rule("api.anthropic.com:443")));
    let gemini =
        load_text("[agent]\nbackend = \"acp\"\ncommand = \"gemini\"\n", &[]).expect("loads");
    assert_eq!(
        gemini.model_api(no_env),
        Some(rule("generativelanguage.googleapis.com"))
    );
}

#[test]
fn the_summary_says_the_effective_policy_and_the_opt_out_is_warned_about() {
    let isolated = load_text(
        "[agent]\nbackend = \"claude\"\n[agent.network]\nallow = [\"github.com\"]\n",
        &[],
    )
    .expect("loads");
    let summary = isolated.network_summary(no_env);
    assert!(summary.contains("namespace of its own"), "{summary}");
    assert!(
        summary.contains("api.anthropic.com:443, github.com:443"),
        "{summary}"
    );
    assert_eq!(isolated.network_warning(), None);
    let host = load_text(
        "[agent]\nbackend = \"claude\"\n[agent.network]\nmode = \"host\"\n",
        &[],
    )
    .expect("loads");
    assert!(
        host.network_summary(no_env)
            .contains("shares the host's network")
    );
    let warning = host.network_warning().expect("warned");
    assert!(
        warning.contains("agent.network.mode = \"host\""),
        "{warning}"
    );
    assert!(host.warnings().iter().any(|w| w == &warning));
    let none =
        load_text("[agent]\nbackend = \"claude\"\nsandbox = \"none\"\n", &[]).expect("loads");
    let summary = none.network_summary(no_env);
    assert!(summary.contains("agent.sandbox = \"none\""), "{summary}");
    assert!(
        none.warnings()
            .iter()
            .any(|w| w.contains("shares the host's network")),
        "{:?}",
        none.warnings()
    );
}
