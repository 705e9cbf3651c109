//! Throwaway certificates for the TLS tests, made with the `openssl` command: a CA, and
//! server and client certificates it signs, as PEM files in a directory of the test's.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `openssl req` options for a new P-256 key, unencrypted.
const NEW_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// Certificates made with `openssl` in a directory of their own.
pub struct Pki {
    dir: PathBuf,
    /// Whether the directory is removed with the `Pki`.
    owned: bool,
}

impl Drop for Pki {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Pki {
    /// Certificates in `dir`, created when missing.
    pub fn new(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        Pki {
            dir: dir.to_owned(),
            owned: false,
        }
    }

    /// Certificates in a fresh temporary directory for `test`, removed when dropped.
    pub fn temporary(test: &str) -> Pki {
        Pki {
            dir: crate::fresh_dir(&format!("pki-{test}")),
            owned: true,
        }
    }

    /// The file `name` in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn openssl(&self, args: &[&str]) {
        self.run(Command::new("openssl").args(args), args);
    }

    fn run(&self, command: &mut Command, args: &[&str]) {
        let output = command.current_dir(&self.dir).output().expect("openssl");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// A self-signed CA: `NAME.pem` and `NAME.key`.
    pub fn ca(&self, name: &str) -> PathBuf {
        let (key, pem, subject) = (
            format!("{name}.key"),
            format!("{name}.pem"),
            format!("/CN={name}"),
        );
        #[rustfmt::skip]
        let rest = [
            "-keyout", &key, "-out", &pem, "-days", "2", "-subj", &subject,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ];
        self.openssl(&[&["req", "-x509"][..], &NEW_KEY, &rest].concat());
        self.path(&pem)
    }

    /// A certificate for `cn` signed by CA `ca`: `NAME.crt` and `NAME.key`. `names` is its
    /// subjectAltName (empty for a client certificate).
    pub fn leaf(&self, name: &str, ca: &str, cn: &str, names: &str) -> (PathBuf, PathBuf) {
        self.leaf_at(name, ca, cn, names, None)
    }

    /// [`leaf`](Pki::leaf), valid for two days from five days ago: expired. Signed under
    /// the `faketime` command (Debian `faketime`).
    pub fn expired_leaf(&self, name: &str, ca: &str, cn: &str, names: &str) -> (PathBuf, PathBuf) {
        self.leaf_at(name, ca, cn, names, Some("-5d"))
    }

    /// [`leaf`](Pki::leaf) whose `notAfter` is `seconds` from now (to the second): signed
    /// under the `faketime` command two days less `seconds` ago, valid for two days.
    pub fn expiring_leaf(&self, name: &str, ca: &str, cn: &str, seconds: u64) -> (PathBuf, PathBuf) {
        let offset = format!("-{}", 2 * 24 * 3600 - seconds);
        self.leaf_at(name, ca, cn, "", Some(&offset))
    }

    /// The `notAfter` of the certificate `NAME.crt`, in Unix seconds (read by `openssl`,
    /// converted by GNU `date`).
    pub fn not_after(&self, name: &str) -> u64 {
        let output = Command::new("openssl")
            .args(["x509", "-noout", "-enddate", "-dateopt", "iso_8601", "-in"])
            .arg(self.path(&format!("{name}.crt")))
            .output()
            .expect("openssl");
        let text = String::from_utf8(output.stdout).unwrap();
        // notAfter=2026-11-28 21:32:11Z
        let date = text.trim().trim_start_matches("notAfter=");
        let output = Command::new("date")
            .args(["-u", "+%s", "-d", date])
            .output()
            .expect("date");
        let seconds = String::from_utf8(output.stdout).unwrap();
        seconds
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("notAfter {text:?}: {seconds:?}"))
    }

    fn leaf_at(
        &self,
        name: &str,
        ca: &str,
        cn: &str,
        names: &str,
        offset: Option<&str>,
    ) -> (PathBuf, PathBuf) {
        let (key, csr, subject) = (format!("{name}.key"), format!("{name}.csr"), format!("/CN={cn}"));
        let rest = ["-keyout", &key, "-out", &csr, "-subj", &subject];
        self.openssl(&[&["req"][..], &NEW_KEY, &rest].concat());
        let extensions = if names.is_empty() {
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n".to_owned()
        } else {
            format!(
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n\
                 subjectAltName={names}\n"
            )
        };
        std::fs::write(self.path(&format!("{name}.ext")), extensions).unwrap();
        let sign = [
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &format!("{name}.crt"),
            "-extfile",
            &format!("{name}.ext"),
        ];
        match offset {
            None => self.openssl(&sign),
            Some(offset) => self.run(
                Command::new("faketime")
                    .args(["-f", offset, "openssl"])
                    .args(sign),
                &sign,
            ),
        }
        (
            self.path(&format!("{name}.crt")),
            self.path(&format!("{name}.key")),
        )
    }
}

/// Whether `openssl` runs; says the test is skipped when not (a failure under CI=true).
pub fn has_openssl(test: &str) -> bool {
    crate::has_command(test, "openssl", "version", "to make the test's certificates")
}
