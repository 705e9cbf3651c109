//! The deadline a gRPC client sends with each call (`grpc-timeout`), which the server
//! holds the call to.

use axum::http::{HeaderMap, HeaderName};
use std::time::Duration;

/// `grpc-timeout`, the header's name.
static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// The call's `grpc-timeout`: none when absent, or why it is invalid. The value is a
/// positive number of at most 8 digits and a unit: `H` hours, `M` minutes, `S` seconds,
/// `m` milliseconds, `u` microseconds, `n` nanoseconds (gRPC over HTTP/2, "Requests").
pub(crate) fn of(headers: &HeaderMap) -> Option<Result<Duration, String>> {
    let value = headers.get(&GRPC_TIMEOUT)?;
    let invalid = || {
        format!(
            "grpc-timeout {:?} is invalid: allowed 1 to 8 digits and a unit of H, M, S, m, u or n",
            String::from_utf8_lossy(value.as_bytes())
        )
    };
    let text = value.to_str().map_err(|_| invalid());
    Some(text.and_then(|text| parse(text).ok_or_else(invalid)))
}

fn parse(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let digits = &text[..text.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(amount * 3600),
        'M' => Duration::from_secs(amount * 60),
        'S' => Duration::from_secs(amount),
        'm' => Duration::from_millis(amount),
        'u' => Duration::from_micros(amount),
        'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn timeout(value: &str) -> Option<Result<Duration, String>> {
        let mut headers = HeaderMap::new();
        headers.insert("grpc-timeout", HeaderValue::from_str(value).unwrap());
        of(&headers)
    }

    #[test]
    fn every_unit_of_the_protocol_is_read() {
        for (text, duration) in [
            ("2H", Duration::from_secs(7200)),
            ("3M", Duration::from_secs(180)),
            ("99999999S", Duration::from_secs(99_999_999)),
            ("300m", Duration::from_millis(300)),
            ("1u", Duration::from_micros(1)),
            ("0n", Duration::ZERO),
        ] {
            assert_eq!(timeout(text), Some(Ok(duration)), "{text}");
        }
        assert_eq!(of(&HeaderMap::new()), None);
    }

    #[test]
    fn an_invalid_timeout_is_refused_naming_it() {
        for text in ["", "m", "300", "123456789m", "1.5S", "-1S", "10s", "10 m"] {
            assert_eq!(
                timeout(text),
                Some(Err(format!(
                    "grpc-timeout {text:?} is invalid: allowed 1 to 8 digits and a unit of H, M, S, m, u or n"
                ))),
                "{text:?}"
            );
        }
    }
}
