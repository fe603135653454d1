//! A start-up error says what went wrong and keeps the error it came from.

use std::error::Error as _;

use turnstile::telegram_client;
use turnstile::{Config, StartError};

#[test]
fn api_url_that_does_not_parse_keeps_the_parse_error() {
    let mut config = Config::default();
    config.telegram.api_url = "http://[::1".to_owned();
    let err = telegram_client(&config).expect_err("not a URL");
    assert!(matches!(err, StartError::BadApiUrl { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "telegram.api_url \"http://[::1\" is not a valid URL: invalid IPv6 address"
    );
    let source = err.source().expect("the parse error is kept");
    assert_eq!(source.to_string(), "invalid IPv6 address");
}
