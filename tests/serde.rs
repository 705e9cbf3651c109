//! serde forms of `Id` (feature `serde`), through `serde_json` and `serde_test`.
//!
//! The IDs above 2^53 are the point: a JSON number there is rounded by JavaScript, so the
//! default form must be a string, and every form must carry all 64 bits exactly.
#![cfg(feature = "serde")]

use atomflake::Id;
use serde::{Deserialize, Serialize};
use serde_test::{Configure, Token, assert_de_tokens, assert_tokens};

/// Above 2^53, the top bit set: JavaScript would read it as 10765432100123458000.
const BIG: u64 = 10_765_432_100_123_456_789;

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Default {
    id: Id,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Integer {
    #[serde(with = "atomflake::serde::integer")]
    id: Id,
}

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Base32 {
    #[serde(with = "atomflake::serde::base32")]
    id: Id,
}

fn de_error<T: for<'de> Deserialize<'de> + core::fmt::Debug>(json: &str) -> String {
    serde_json::from_str::<T>(json).unwrap_err().to_string()
}

/// Asserts each JSON text's exact deserialization error.
fn assert_errors<T: for<'de> Deserialize<'de> + core::fmt::Debug>(cases: &[(&str, &str)]) {
    for &(json, message) in cases {
        assert_eq!(de_error::<T>(json), message, "{json}");
    }
}

#[test]
fn default_form_is_a_decimal_string() {
    for raw in [0, (1 << 53) + 1, BIG, u64::MAX] {
        let value = Default { id: Id::new(raw) };
        let json = serde_json::to_string(&value).unwrap();
        assert_eq!(json, format!(r#"{{"id":"{raw}"}}"#));
        assert_eq!(serde_json::from_str::<Default>(&json).unwrap(), value);
    }
}

#[test]
fn default_form_reads_integers_too() {
    let read = |json: &str| serde_json::from_str::<Default>(json).map(|v| v.id.get()).ok();
    assert_eq!(read(&format!(r#"{{"id":{BIG}}}"#)), Some(BIG));
    assert_eq!(read(r#"{"id":9007199254740993}"#), Some(9_007_199_254_740_993));
    assert_eq!(read(r#"{"id":0}"#), Some(0));
    // serde_json hands small non-negative numbers to visit_u64, i64 only for negatives;
    // serde_test checks the i64 path directly.
    assert_de_tokens(&Id::new(5).readable(), &[Token::I64(5)]);
    assert_de_tokens(&Id::new(5).readable(), &[Token::U8(5)]);
}

#[test]
fn default_form_errors_name_the_value() {
    assert_errors::<Default>(&[
        (
            r#"{"id":"12x"}"#,
            "invalid character 'x' at byte 2 in id: ids are written with the digits 0-9 only \
             at line 1 column 11",
        ),
        (
            r#"{"id":"18446744073709551616"}"#,
            "id is out of range: ids allow 0..=18446744073709551615 at line 1 column 28",
        ),
        (
            r#"{"id":-1}"#,
            "-1 is out of range for an id: ids allow 0..=18446744073709551615 at line 1 column 8",
        ),
        (
            r#"{"id":""}"#,
            "cannot parse an id from empty text at line 1 column 8",
        ),
        (
            r#"{"id":1.5}"#,
            "invalid type: floating point `1.5`, expected an id: a decimal string or a \
             non-negative integer at line 1 column 9",
        ),
    ]);
    // Above u64::MAX serde_json reads a float, which is refused, not rounded.
    assert_eq!(
        de_error::<Default>(r#"{"id":18446744073709551616}"#),
        "invalid type: floating point `1.8446744073709552e+19`, expected an id: a decimal \
         string or a non-negative integer at line 1 column 26"
    );
}

#[test]
fn integer_form_is_a_number() {
    let value = Integer { id: Id::new(BIG) };
    let json = serde_json::to_string(&value).unwrap();
    assert_eq!(json, format!(r#"{{"id":{BIG}}}"#));
    assert_eq!(serde_json::from_str::<Integer>(&json).unwrap(), value);
    assert_errors::<Integer>(&[
        (
            r#"{"id":-7}"#,
            "-7 is out of range for an id: ids allow 0..=18446744073709551615 at line 1 column 8",
        ),
        (
            r#"{"id":"12"}"#,
            "invalid type: string \"12\", expected an id: a non-negative integer at line 1 column 10",
        ),
    ]);
}

#[test]
fn base32_form_is_13_characters() {
    let value = Base32 { id: Id::new(BIG) };
    let json = serde_json::to_string(&value).unwrap();
    assert_eq!(json, r#"{"id":"9ASKZEMAQ4D8N"}"#);
    assert_eq!(serde_json::from_str::<Base32>(&json).unwrap(), value);
    assert_eq!(
        serde_json::from_str::<Base32>(r#"{"id":"9askzemaq4d8n"}"#).unwrap(),
        value
    );
    assert_errors::<Base32>(&[
        (
            r#"{"id":"9ASKZEMAQ4D8U"}"#,
            "invalid character 'U' at byte 12 in base32 id: base32 ids use Crockford's digits \
             0-9 and A-Z without U (I and L read as 1, O as 0) at line 1 column 21",
        ),
        (
            r#"{"id":"G000000000000"}"#,
            "base32 id \"G000000000000\" is out of range: ids allow 0000000000000..=FZZZZZZZZZZZZ \
             at line 1 column 21",
        ),
        (
            r#"{"id":"123"}"#,
            "base32 id has 3 characters: a base32 id has exactly 13 at line 1 column 11",
        ),
        (
            r#"{"id":12}"#,
            "invalid type: integer `12`, expected an id: 13 characters of Crockford base32 \
             at line 1 column 8",
        ),
    ]);
}

#[test]
fn compact_formats_get_the_plain_u64() {
    assert_tokens(&Id::new(BIG).compact(), &[Token::U64(BIG)]);
    assert_tokens(&Id::new(BIG).readable(), &[Token::Str("10765432100123456789")]);
}
