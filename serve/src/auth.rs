//! Bearer tokens for the ID endpoints ([`Tokens`]): `Authorization: Bearer TOKEN`, checked
//! against every token of a file in time that does not depend on where a token differs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

/// The tokens a request may present, read from a file: one per line, blank lines and lines
/// starting with `#` left out. [`reload`](Tokens::reload) reads the file again.
pub struct Tokens {
    file: PathBuf,
    held: RwLock<Arc<Vec<Vec<u8>>>>,
    /// Whether `/metrics` asks for a token too.
    metrics: bool,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.held.read().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("Tokens")
            .field("file", &self.file)
            .field("count", &count)
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

/// The shortest token taken: shorter ones can be guessed.
pub const MIN_TOKEN_LEN: usize = 16;

impl Tokens {
    /// The tokens in `file`; `metrics`: `/metrics` asks for one too.
    ///
    /// # Errors
    ///
    /// A file that cannot be read, holds no token, or a token shorter than
    /// [`MIN_TOKEN_LEN`] or with characters a header cannot carry (named by line, never
    /// shown).
    pub fn from_file(file: &Path, metrics: bool) -> Result<Tokens, String> {
        Ok(Tokens {
            file: file.to_owned(),
            held: RwLock::new(Arc::new(read(file)?)),
            metrics,
        })
    }

    /// Reads the file again; on an error the tokens in use stay.
    ///
    /// # Errors
    ///
    /// As [`Tokens::from_file`]'s.
    pub fn reload(&self) -> Result<usize, String> {
        let tokens = read(&self.file)?;
        let count = tokens.len();
        *self.held.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tokens);
        Ok(count)
    }

    /// [`Tokens::reload`], logged with `why`.
    pub fn reload_logged(&self, why: &str) {
        match self.reload() {
            Ok(count) => tracing::info!(
                target: "atomflake serve",
                event = "tokens_reloaded",
                count,
                "tokens reloaded ({why}): {count}"
            ),
            Err(error) => tracing::error!(
                target: "atomflake serve",
                event = "tokens_reload_failed",
                %error,
                "tokens not reloaded ({why}), those in use stay: {error}"
            ),
        }
    }

    /// Reloads whenever the file changes (looked at every second), on a task of the
    /// current runtime, and logs each reload or failure.
    pub fn watch_file(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let tokens = Arc::clone(self);
        crate::reload::watch_files(vec![self.file.clone()], move || {
            tokens.reload_logged("its file changed");
        })
    }

    /// Whether `/metrics` asks for a token.
    pub fn guard_metrics(&self) -> bool {
        self.metrics
    }

    /// Whether an `Authorization` header's value is `Bearer` and one of the tokens. Every
    /// token is compared, each over its whole length.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(presented) = authorization.and_then(bearer) else {
            return false;
        };
        let tokens = Arc::clone(&self.held.read().unwrap_or_else(PoisonError::into_inner));
        tokens
            .iter()
            .fold(false, |found, token| found | same(token, presented))
    }
}

/// The token of `Bearer TOKEN` (the scheme in any case, RFC 9110).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(token)
}

/// Whether `a` and `b` are equal, in time that depends on their lengths alone.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut differ = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i).copied().unwrap_or(0), b.get(i).copied().unwrap_or(0));
        differ |= usize::from(x ^ y);
    }
    std::hint::black_box(differ) == 0
}

fn read(file: &Path) -> Result<Vec<Vec<u8>>, String> {
    let shown = file.display();
    let text = std::fs::read_to_string(file).map_err(|error| format!("--token-file {shown}: {error}"))?;
    let mut tokens = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let token = line.trim();
        if token.is_empty() || token.starts_with('#') {
            continue;
        }
        let number = i + 1;
        if token.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "--token-file {shown}: the token on line {number} has {} characters: at least {MIN_TOKEN_LEN}",
                token.len()
            ));
        }
        if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(format!(
                "--token-file {shown}: the token on line {number} has a character other than visible ASCII"
            ));
        }
        tokens.push(token.as_bytes().to_vec());
    }
    if tokens.is_empty() {
        return Err(format!("--token-file {shown}: no token in it (one per line)"));
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("atomflake-tokens-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn each_token_is_admitted_and_nothing_else() {
        let path = file("good", "# ops\n0123456789abcdef\n\n  fedcba9876543210-second  \n");
        let tokens = Tokens::from_file(&path, false).unwrap();
        for header in ["Bearer 0123456789abcdef", "bearer fedcba9876543210-second"] {
            assert!(tokens.admits(Some(header.as_bytes())), "{header}");
        }
        for header in [
            "Bearer 0123456789abcdeF",
            "Bearer 0123456789abcde",
            "Bearer 0123456789abcdef0",
            "Basic 0123456789abcdef",
            "Bearer",
            "",
            "0123456789abcdef",
        ] {
            assert!(!tokens.admits(Some(header.as_bytes())), "{header}");
        }
        assert!(!tokens.admits(None));
        let debug = format!("{tokens:?}");
        assert!(
            !debug.contains("0123456789abcdef") && debug.contains("count: 2"),
            "{debug}"
        );

        std::fs::write(&path, "a-third-token-0123\n").unwrap();
        assert_eq!(tokens.reload(), Ok(1));
        assert!(tokens.admits(Some(b"Bearer a-third-token-0123")));
        assert!(!tokens.admits(Some(b"Bearer 0123456789abcdef")));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn every_bad_file_is_an_exact_error_that_shows_no_token() {
        let short = file("short", "0123456789abcdef\nshort-secret\n");
        let shown = short.display();
        assert_eq!(
            Tokens::from_file(&short, false).unwrap_err(),
            format!("--token-file {shown}: the token on line 2 has 12 characters: at least 16")
        );
        let spaced = file("spaced", "0123456789 abcdef\n");
        assert_eq!(
            Tokens::from_file(&spaced, false).unwrap_err(),
            format!(
                "--token-file {}: the token on line 1 has a character other than visible ASCII",
                spaced.display()
            )
        );
        let empty = file("empty", "# none yet\n\n");
        assert_eq!(
            Tokens::from_file(&empty, false).unwrap_err(),
            format!("--token-file {}: no token in it (one per line)", empty.display())
        );
        for path in [short, spaced, empty] {
            std::fs::remove_file(path).unwrap();
        }
        let missing = Path::new("/nonexistent/tokens");
        assert_eq!(
            Tokens::from_file(missing, false).unwrap_err(),
            "--token-file /nonexistent/tokens: No such file or directory (os error 2)"
        );
    }
}
