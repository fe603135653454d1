//! A `result`'s `usage`, read leniently.

use serde::Deserialize;

use super::lenient;
use crate::agent::TokenUsage;

/// A `result`'s `usage`: the Messages API's counts, summed over the turn.
#[derive(Debug, Default, PartialEq, Eq, Deserialize)]
pub struct UsageLine {
    /// Tokens read outside any cache.
    #[serde(default, deserialize_with = "lenient")]
    pub input_tokens: u64,
    /// Tokens read and written to the cache.
    #[serde(default, deserialize_with = "lenient")]
    pub cache_creation_input_tokens: u64,
    /// Tokens read from the cache.
    #[serde(default, deserialize_with = "lenient")]
    pub cache_read_input_tokens: u64,
    /// Tokens written.
    #[serde(default, deserialize_with = "lenient")]
    pub output_tokens: u64,
}

impl From<UsageLine> for TokenUsage {
    /// Everything read counts as input, from a cache or not.
    fn from(line: UsageLine) -> Self {
        Self {
            input_tokens: line
                .input_tokens
                .saturating_add(line.cache_creation_input_tokens)
                .saturating_add(line.cache_read_input_tokens),
            output_tokens: line.output_tokens,
        }
    }
}
