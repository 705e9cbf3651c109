//! Reading a connection string: a libpq URL or `key=value` settings, with the options
//! read here (TLS, the password file) taken out and the rest left to the client.

use super::tls::Tls;
use super::{ConfigError, Database, RootCert, SslMode};
use std::path::PathBuf;
use std::str::FromStr;

impl FromStr for Database {
    type Err = ConfigError;

    /// Parses a libpq URL or `key=value` settings; the TLS options (`sslmode`,
    /// `sslrootcert`, `sslcert`, `sslkey`) are read here, the rest by the client's
    /// [`postgres::Config`].
    fn from_str(text: &str) -> Result<Database, ConfigError> {
        let (rest, options) = take_tls_options(text)?;
        let config: postgres::Config = rest
            .parse()
            .map_err(|err: postgres::Error| ConfigError::Invalid {
                // The client's parse errors name the option, never its value; an option it
                // does not know (every one was checked above) is not named.
                reason: match std::error::Error::source(&err)
                    .map_or_else(|| err.to_string(), ToString::to_string)
                {
                    reason if reason.starts_with("unknown option") => "an unknown option".to_owned(),
                    reason => reason,
                },
            })?;
        let mut tls = Tls {
            mode: SslMode::Prefer,
            root: None,
            client: None,
        };
        let mut mode = None;
        let (mut cert, mut key, mut passfile) = (None, None, None);
        for (name, value) in options {
            match name {
                Own::Mode => mode = Some(value.parse::<SslMode>()?),
                Own::RootCert if value == "system" => tls.root = Some(RootCert::System),
                Own::RootCert => tls.root = Some(RootCert::File(value.into())),
                Own::Cert => cert = Some(PathBuf::from(value)),
                Own::Key => key = Some(PathBuf::from(value)),
                Own::PassFile => passfile = Some(PathBuf::from(value)),
            }
        }
        // libpq: the system's roots make verify-full the default.
        tls.mode = mode.unwrap_or(match tls.root {
            Some(RootCert::System) => SslMode::VerifyFull,
            _ => SslMode::Prefer,
        });
        tls.client = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err(ConfigError::ClientCertPair),
        };
        Database {
            config,
            tls,
            passfile,
        }
        .checked()
    }
}

/// The options read here, not by the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Own {
    Mode,
    RootCert,
    Cert,
    Key,
    PassFile,
}

impl Own {
    fn named(name: &str) -> Option<Own> {
        Some(match name {
            "sslmode" => Own::Mode,
            "sslrootcert" => Own::RootCert,
            "sslcert" => Own::Cert,
            "sslkey" => Own::Key,
            "passfile" => Own::PassFile,
            _ => return None,
        })
    }
}

/// The options a connection string may hold: the client's and the TLS ones read here.
const OPTIONS: [&str; 23] = [
    "host",
    "hostaddr",
    "port",
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
    "sslnegotiation",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "passfile",
];

/// An error unless `key` (at byte `at`) is one of [`OPTIONS`]. An unknown one is not
/// quoted: in a string whose quoting went wrong it can be a piece of a password.
fn check_option(key: &str, at: usize) -> Result<(), ConfigError> {
    if OPTIONS.contains(&key) {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        reason: format!(
            "an unknown option at byte {at} (not shown: with a quote missing, it can be part of \
             a password); allowed: {}",
            OPTIONS.join(", ")
        ),
    })
}

/// `text` without its TLS options, and those options (decoded) in order.
fn take_tls_options(text: &str) -> Result<(String, Vec<(Own, String)>), ConfigError> {
    match ["postgres://", "postgresql://"]
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix).map(|rest| text.len() - rest.len()))
    {
        Some(start) => take_from_url(text, start),
        None => take_from_settings(text),
    }
}

/// From a URL: the parameters after the `?` that follows the credentials.
fn take_from_url(text: &str, start: usize) -> Result<(String, Vec<(Own, String)>), ConfigError> {
    // The client takes the first `@` anywhere as the end of the credentials; libpq, the
    // first before a `/`. Where they could differ, or where a second `@` would make part
    // of a password a host or a database name, the URL is refused.
    if let Some(at) = text[start..].find('@') {
        let credentials = &text[start..start + at];
        if credentials.contains(['/', '?']) || text[start + at + 1..].contains('@') {
            return Err(ConfigError::Invalid {
                reason: "an `@` that does not end the user and password (not shown): escape an \
                         `@` in the user, the password or a parameter as %40"
                    .to_owned(),
            });
        }
    }
    let after_credentials = text[start..].find('@').map_or(start, |at| start + at + 1);
    let Some(query) = text[after_credentials..]
        .find('?')
        .map(|at| after_credentials + at)
    else {
        return Ok((text.to_owned(), Vec::new()));
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in text[query + 1..].split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(key)?;
        check_option(&key, pair.as_ptr() as usize - text.as_ptr() as usize)?;
        match Own::named(&key) {
            Some(option) => taken.push((option, percent_decode(value)?)),
            None => kept.push(pair),
        }
    }
    let mut rest = text[..query].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, taken))
}

fn percent_decode(text: &str) -> Result<String, ConfigError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let byte = text
                .get(at + 1..at + 3)
                .filter(|hex| hex.bytes().all(|digit| digit.is_ascii_hexdigit()))
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| ConfigError::Invalid {
                    reason: format!("a bad percent escape at byte {at} of a parameter"),
                })?;
            out.push(byte);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ConfigError::Invalid {
        reason: "a parameter that is not UTF-8 once decoded".to_owned(),
    })
}

/// From `key=value` settings (libpq's rules: spaces around `=`, values in single quotes
/// or bare, `\` escaping the next character in both), split where the client splits
/// them: at every Unicode whitespace.
fn take_from_settings(text: &str) -> Result<(String, Vec<(Own, String)>), ConfigError> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let byte = |index: usize| chars.get(index).map_or(text.len(), |&(at, _)| at);
    let char_at = |index: usize| chars.get(index).map(|&(_, c)| c);
    let skip_spaces = |mut index: usize| {
        while char_at(index).is_some_and(char::is_whitespace) {
            index += 1;
        }
        index
    };
    let mut rest = String::with_capacity(text.len());
    let mut taken = Vec::new();
    let mut index = 0;
    loop {
        index = skip_spaces(index);
        if index == chars.len() {
            break;
        }
        let start = index;
        while char_at(index).is_some_and(|c| c != '=' && !c.is_whitespace()) {
            index += 1;
        }
        let key = &text[byte(start)..byte(index)];
        check_option(key, byte(start))?;
        index = skip_spaces(index);
        if char_at(index) != Some('=') {
            return Err(ConfigError::Invalid {
                reason: format!("option `{key}` has no `=`"),
            });
        }
        let after_equals = index + 1;
        index = skip_spaces(after_equals);
        let spaced = index > after_equals;
        let mut value = String::new();
        if char_at(index) == Some('\'') {
            index += 1;
            loop {
                match char_at(index) {
                    None => {
                        return Err(ConfigError::Invalid {
                            reason: format!("the quoted value of option `{key}` is not closed"),
                        });
                    }
                    Some('\'') => break,
                    Some('\\') if index + 1 < chars.len() => {
                        value.push(chars[index + 1].1);
                        index += 2;
                    }
                    Some(c) => {
                        value.push(c);
                        index += 1;
                    }
                }
            }
            index += 1;
        } else {
            while let Some(c) = char_at(index).filter(|c| !c.is_whitespace()) {
                let escaped = c == '\\' && index + 1 < chars.len();
                if escaped {
                    index += 1;
                }
                value.push(chars[index].1);
                index += 1;
            }
            // `user= password=...`: libpq takes the next setting as the value. An empty
            // value is written `''`; anything else would show the next setting (a
            // password) as a user name, a path or a mode.
            let next_setting = value
                .split_once('=')
                .is_some_and(|(name, _)| OPTIONS.contains(&name));
            if spaced && next_setting {
                return Err(ConfigError::Invalid {
                    reason: format!("option `{key}` has an empty value: write an empty value as ''"),
                });
            }
        }
        if let Some(option) = Own::named(key) {
            taken.push((option, value));
        } else {
            rest.push_str(&text[byte(start)..byte(index)]);
            rest.push(' ');
        }
    }
    Ok((rest, taken))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Database, ConfigError> {
        text.parse()
    }

    #[test]
    fn tls_options_are_taken_out_of_both_forms_and_the_rest_is_the_clients() {
        // (the string, what is left for the client, the `sslmode` taken)
        for (text, client_part, mode) in [
            (
                "host=db user='a b' sslmode = require password='x\\'y' sslrootcert=/r.pem",
                "host=db user='a b' password='x\\'y' ",
                "require",
            ),
            (
                "postgres://u:p%3F@h:1/d?sslmode=verify-ca&application_name=x&sslrootcert=%2Fr.pem",
                "postgres://u:p%3F@h:1/d?application_name=x",
                "verify-ca",
            ),
        ] {
            let (rest, taken) = take_tls_options(text).unwrap();
            assert_eq!(rest, client_part, "{text}");
            assert_eq!(
                taken,
                [(Own::Mode, mode.to_owned()), (Own::RootCert, "/r.pem".to_owned())],
                "{text}"
            );
        }
        let (rest, _) = take_tls_options("postgresql://h/d?sslmode=disable").unwrap();
        assert_eq!(rest, "postgresql://h/d");
        // A `?` in the password is the query's start to some readers, and then the
        // password would be shown as a user name: refused, never quoted. Escaped, it is
        // the password's.
        assert!(take_tls_options("postgres://u:a?b@h/d").is_err());
        let (rest, taken) = take_tls_options("postgres://u:a%3Fb@h/d?sslmode=require").unwrap();
        assert_eq!((rest.as_str(), taken.len()), ("postgres://u:a%3Fb@h/d", 1));
    }

    /// What every error and every `Debug` or `Display` of a parsed string is checked
    /// against: a password in two halves, so that half of a misquoted one is caught too.
    const HALVES: [&str; 2] = ["Pw0rdQ", "Zecret"];

    fn shows_no_password(text: &str, shown: &str) {
        for half in HALVES {
            assert!(!shown.contains(half), "{text:?} shows {half:?}: {shown}");
        }
    }

    /// Parses `text`, and checks that neither the error nor the database shows the password.
    fn parse_hiding(text: &str) -> Result<Database, ConfigError> {
        let parsed = parse(text);
        match &parsed {
            Ok(database) => shows_no_password(text, &format!("{database} {database:?}")),
            Err(error) => shows_no_password(text, &format!("{error} {error:?}")),
        }
        parsed
    }

    #[test]
    fn no_error_shows_a_password_however_the_string_is_broken() {
        let secret = HALVES.join("");
        let spaced = HALVES.join(" ");
        let cases = [
            format!("host=db password={secret} port=99999"),
            format!("host=db password={secret} sslmode=verify"),
            format!("host=db password={secret} sslmode=verify-full sslrootcert=/nonexistent"),
            format!("host=db password='{secret}"),
            // Misquoted: the second half reads as an option's name.
            format!("host=db password={spaced}"),
            format!("host=db password={spaced}=x"),
            format!("postgres://app:{secret}@db:99999/app"),
            format!("postgres://app:{secret}@db/app?sslmode=nope"),
            format!("postgres://app:{secret}@db/app?bogus=1"),
            format!("postgres://app:{secret}@db/app?sslrootcert=%zz"),
            // An `@` left unescaped in the password: the rest reads as the host.
            format!("postgres://app:{}@{}@db/app", HALVES[0], HALVES[1]),
            format!("postgres://app:{}@{}/w@db/app", HALVES[0], HALVES[1]),
            format!(
                "postgres://db/app?password={}@{}&sslmode=verify-full",
                HALVES[0], HALVES[1]
            ),
            // An empty value takes the next setting, the password, as its value.
            format!("host=db sslmode= password={secret}"),
            format!("host=db sslrootcert= password={secret}"),
            format!("host=db user= password={secret}"),
            format!("host=db dbname = password = {secret}"),
            // The client splits at every Unicode whitespace, and so does the parser here.
            format!("host=db password={}\u{a0}{}=x", HALVES[0], HALVES[1]),
            format!("host=db password={}\u{b}{}=x", HALVES[0], HALVES[1]),
            format!("postgres://db/app?sslrootcert=%+2f&password={secret}"),
        ];
        for text in &cases {
            assert!(parse_hiding(text).is_err(), "{text}");
        }
        assert_eq!(
            parse_hiding(&format!("host=db password={spaced}"))
                .unwrap_err()
                .to_string(),
            format!(
                "invalid connection string: an unknown option at byte 24 (not shown: with a \
                 quote missing, it can be part of a password); allowed: {}",
                OPTIONS.join(", ")
            )
        );
        // A setting after a vertical tab or a no-break space is a setting, TLS ones too.
        for space in ['\u{b}', '\u{a0}'] {
            let database = parse_hiding(&format!("host=db{space}sslmode=disable")).unwrap();
            assert_eq!(database.ssl_mode(), SslMode::Disable);
        }
        assert_eq!(
            parse_hiding("host=db sslmode=require\u{a0}sslrootcert=/nonexistent").unwrap_err(),
            ConfigError::File {
                option: "sslrootcert",
                path: "/nonexistent".into(),
                reason: "No such file or directory (os error 2)".to_owned()
            }
        );
        let database = parse_hiding(&format!("postgres://app:{secret}@db:5433/ids?sslmode=disable")).unwrap();
        assert_eq!(database.to_string(), "app@db:5433/ids (sslmode=disable)");
        let database = parse_hiding(&format!(
            "host=a,b port=1,2 user=app password='{spaced}' dbname=d"
        ))
        .unwrap();
        assert_eq!(database.to_string(), "app@a:1,b:2/d (sslmode=prefer)");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        /// Strings made of options, broken pieces and a password (bare, quoted, spaced, in
        /// a URL): whatever parses or fails, nothing shown holds either half of it.
        #[test]
        fn nothing_shown_holds_the_password(
            pieces in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("host=db".to_owned()),
                    proptest::strategy::Just("port=5432".to_owned()),
                    proptest::strategy::Just("port=x".to_owned()),
                    proptest::strategy::Just("user=app".to_owned()),
                    proptest::strategy::Just("sslmode=require".to_owned()),
                    proptest::strategy::Just("sslmode=verify".to_owned()),
                    proptest::strategy::Just("sslrootcert=/nonexistent".to_owned()),
                    proptest::strategy::Just("sslcert=/nonexistent".to_owned()),
                    "[a-z=' \\\\@%&?/:é\t]{0,6}",
                ],
                0..6,
            ),
            at in 0usize..6,
            form in 0usize..5,
        ) {
            let (first, second) = (HALVES[0], HALVES[1]);
            let password = match form {
                0 => format!("password={first}{second}"),
                1 => format!("password='{first} {second}'"),
                2 => format!("password={first} {second}"),
                3 => format!("password = '{first}\\'{second}"),
                _ => String::new(),
            };
            let mut pieces = pieces;
            if form == 4 {
                let url = format!("postgres://app:{first}{second}@db/app?{}", pieces.join("&"));
                let _ = parse_hiding(&url);
                let url = format!("postgres://app:{first}@{second}@db/app");
                let _ = parse_hiding(&url);
            } else {
                pieces.insert(at.min(pieces.len()), password);
                let _ = parse_hiding(&pieces.join(" "));
            }
        }
    }
}
