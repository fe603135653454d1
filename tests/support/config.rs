//! The bot's configuration for the tests and the benchmarks (which include
//! this file from `benches/support/mod.rs`): `TURNSTILE_*` variables loaded
//! by [`Config::load`] in process, or given to a `turnstile` child process
//! as its environment.
//!
//! Both callers name the fake Bot API as `bot_api` beside this module.

use std::collections::BTreeMap;

use turnstile::Config;

use super::bot_api::TOKEN;

/// The variables a [`Config`] is loaded from; later settings win.
#[derive(Clone, Debug)]
pub struct ConfigVars {
    vars: BTreeMap<String, String>,
}

impl ConfigVars {
    /// The fake's token, `telegram.api_url` = `api_url` and no merge window
    /// (every message its own turn unless a test sets one).
    pub fn new(api_url: &str) -> Self {
        Self {
            vars: BTreeMap::new(),
        }
        .set("TELEGRAM_BOT_TOKEN", TOKEN)
        .set("TURNSTILE_TELEGRAM_API_URL", api_url)
        .set("TURNSTILE_DISPATCHER_MERGE_WINDOW", "0s")
    }

    /// Sets one variable.
    pub fn set(mut self, key: &str, value: impl Into<String>) -> Self {
        self.vars.insert(key.to_string(), value.into());
        self
    }

    /// Sets every `(key, value)` in order.
    pub fn set_all<K, V>(mut self, pairs: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        for (key, value) in pairs {
            self.vars
                .insert(key.as_ref().to_string(), value.as_ref().to_string());
        }
        self
    }

    /// The variables, for the environment of a `turnstile` process.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Loads the configuration; panics with the loader's error.
    pub fn load(&self) -> Config {
        match Config::load(None, &self.vars) {
            Ok(config) => config,
            Err(e) => panic!("the test configuration does not load: {e}"),
        }
    }
}
