//! The password of a connection string that gives none: `PGPASSWORD` or a password file,
//! found as libpq finds them.

use super::{ConfigError, Database};
use std::path::{Path, PathBuf};

impl Database {
    /// The password for a connection whose string gives none, as libpq finds it:
    /// `PGPASSWORD`, else the first line of the password file (`passfile`, else
    /// `PGPASSFILE`, else `~/.pgpass`) that matches the host, port, database and user. A
    /// file that does not exist gives none; one that others may read is refused when it
    /// has the password.
    pub(super) fn password(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        if self.config.get_password().is_some() {
            return Ok(None);
        }
        if let Some(password) = std::env::var_os("PGPASSWORD") {
            return Ok(Some(password.into_encoded_bytes()));
        }
        let Some(path) = self
            .passfile
            .clone()
            .or_else(|| std::env::var_os("PGPASSFILE").map(PathBuf::from))
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pgpass")))
        else {
            return Ok(None);
        };
        let Some(user) = self.config.get_user() else {
            return Ok(None);
        };
        let unreadable = |reason: String| ConfigError::File {
            option: "passfile",
            path: path.clone(),
            reason,
        };
        let metadata = match std::fs::metadata(&path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(unreadable(error.to_string())),
        };
        let text = std::fs::read_to_string(&path).map_err(|error| unreadable(error.to_string()))?;
        let dbname = self.config.get_dbname().unwrap_or(user);
        let Some(password) = self
            .targets()
            .into_iter()
            .find_map(|(host, port)| passfile_entry(&text, &host, port, dbname, user))
        else {
            return Ok(None);
        };
        // libpq ignores such a file with a warning; here it is an error, once it would
        // have given the password.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(unreadable(format!(
                    "mode {mode:04o} lets others read it: allowed 0600 or less"
                )));
            }
        }
        Ok(Some(password.into_bytes()))
    }
}

/// The password of the first line of a password file (`host:port:database:user:password`,
/// `*` for any, `\\` escaping `:` and itself, `#` starting a comment) that matches. A Unix
/// socket directory matches its path or `localhost`.
fn passfile_entry(text: &str, host: &str, port: u16, dbname: &str, user: &str) -> Option<String> {
    let port = port.to_string();
    let socket = host.starts_with('/');
    text.lines().find_map(|line| {
        let line = line.trim_end_matches('\r');
        if line.starts_with('#') {
            return None;
        }
        let mut fields = vec![String::new()];
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => fields.last_mut()?.push(chars.next().unwrap_or('\\')),
                ':' if fields.len() < 5 => fields.push(String::new()),
                c => fields.last_mut()?.push(c),
            }
        }
        let [line_host, line_port, line_db, line_user, password] = <[String; 5]>::try_from(fields).ok()?;
        let host_matches = line_host == "*" || line_host == host || (socket && line_host == "localhost");
        let matches = |field: &str, value: &str| field == "*" || field == value;
        (host_matches && matches(&line_port, &port) && matches(&line_db, dbname) && matches(&line_user, user))
            .then_some(password)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_password_file_line_that_matches_gives_the_password() {
        let file = "# comment\n\
                    db:5432:app:other:not-this-user\n\
                    db:6543:*:app:not-this-port\n\
                    d\\:b:*:*:app:escaped\\:host\n\
                    localhost:*:*:app:on-the-socket\r\n\
                    db:*:app:app:pa\\\\ss:word\n\
                    *:*:*:*:anything\n\
                    short:line\n";
        let entry = |host: &str, port: u16, db: &str, user: &str| passfile_entry(file, host, port, db, user);
        assert_eq!(entry("db", 5432, "app", "app").as_deref(), Some("pa\\ss:word"));
        assert_eq!(entry("d:b", 1, "x", "app").as_deref(), Some("escaped:host"));
        assert_eq!(
            entry("/run/postgresql", 5432, "app", "app").as_deref(),
            Some("on-the-socket")
        );
        assert_eq!(
            entry("db", 5432, "app", "other").as_deref(),
            Some("not-this-user")
        );
        assert_eq!(entry("elsewhere", 1, "x", "y").as_deref(), Some("anything"));
        assert_eq!(
            passfile_entry("short:line\n# c:d:e:f:g\n", "short", 1, "line", "x"),
            None
        );
    }
}
