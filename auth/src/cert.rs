//! CURVE certificates in the ZeroMQ ecosystem's text format (czmq's `zcert`, ZPL): a `curve` section with
//! `public-key` and, in the secret file only, `secret-key`, both Z85, plus an optional `metadata` section. The
//! public file is `NAME`, the secret file `NAME_secret`, so pyzmq's `zmq.auth.load_certificate`, czmq and other
//! ZeroMQ tools read tickbox's keys and tickbox reads theirs (pyzmq's own `NAME.key` / `NAME.key_secret` too).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::{z85, AuthError};

/// Certificates are a few hundred bytes; anything bigger is not one, and is refused before it is read whole.
pub const MAX_CERTIFICATE_BYTES: u64 = 64 * 1024;

/// A CURVE key pair, or a public key alone (a peer's public certificate).
#[derive(Clone, PartialEq, Eq)]
pub struct Certificate {
    /// The 32-byte public key.
    pub public: [u8; 32],
    /// The 32-byte secret key, present only in a secret certificate.
    pub secret: Option<[u8; 32]>,
    /// `metadata` entries, kept in file order.
    pub metadata: Vec<(String, String)>,
}

impl std::fmt::Debug for Certificate {
    // Never print a secret key, not even in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("public", &self.public_z85())
            .field("secret", &self.secret.map(|_| "<redacted>"))
            .field("metadata", &self.metadata)
            .finish()
    }
}

impl Certificate {
    /// The public key as 40 characters of Z85: the form configs, ZAP user ids and logs use.
    pub fn public_z85(&self) -> String {
        z85::encode(&self.public).expect("32 bytes is a multiple of 4")
    }

    /// Parses certificate text. Only the `curve` section's keys are required; comments, blank lines and other
    /// sections are allowed, so certificates written by czmq and pyzmq read as well as ours.
    pub fn parse(text: &str) -> Result<Certificate, CertError> {
        let mut section: Option<String> = None;
        let mut public = None;
        let mut secret = None;
        let mut metadata = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line_no = index + 1;
            // ZPL comments are whole lines: Z85 keys themselves may hold '#'.
            let content = raw.trim_end();
            if content.trim().is_empty() || content.trim_start().starts_with('#') {
                continue;
            }
            let indented = content.starts_with(' ') || content.starts_with('\t');
            let line = content.trim();
            match line.split_once('=') {
                None if !indented => section = Some(line.to_string()),
                None => return Err(CertError::Syntax { line: line_no }),
                Some((name, value)) => {
                    let name = name.trim();
                    let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
                    match (section.as_deref(), name) {
                        (Some("curve"), "public-key") => public = Some(key(value, line_no)?),
                        (Some("curve"), "secret-key") => secret = Some(key(value, line_no)?),
                        (Some("metadata"), _) => {
                            metadata.push((name.to_string(), value.to_string()))
                        }
                        // pyzmq and older czmq write `public-key` at top level in some versions.
                        (None, "public-key") => public = Some(key(value, line_no)?),
                        (None, "secret-key") => secret = Some(key(value, line_no)?),
                        _ => {}
                    }
                }
            }
        }
        let public = public.ok_or(CertError::NoPublicKey)?;
        Ok(Certificate {
            public,
            secret,
            metadata,
        })
    }

    /// The public certificate's text (no secret key, whatever `self` holds).
    pub fn public_text(&self) -> String {
        self.render(false)
    }

    /// The secret certificate's text, or `None` when `self` has no secret key.
    pub fn secret_text(&self) -> Option<String> {
        self.secret.map(|_| self.render(true))
    }

    fn render(&self, with_secret: bool) -> String {
        let mut out = String::new();
        if with_secret {
            out.push_str("#   ZeroMQ CURVE **Secret** Certificate\n");
            out.push_str(
                "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n\n",
            );
        } else {
            out.push_str("#   ZeroMQ CURVE Public Certificate\n");
            out.push_str(
                "#   Exchange securely, or use a secure mechanism to verify the contents\n",
            );
            out.push_str("#   of this file after exchange.\n\n");
        }
        out.push_str("metadata\n");
        for (name, value) in &self.metadata {
            let _ = writeln!(out, "    {name} = \"{value}\"");
        }
        out.push_str("curve\n");
        let _ = writeln!(out, "    public-key = \"{}\"", self.public_z85());
        if let (true, Some(secret)) = (with_secret, self.secret) {
            let text = z85::encode(&secret).expect("32 bytes is a multiple of 4");
            let _ = writeln!(out, "    secret-key = \"{text}\"");
        }
        out
    }

    /// Reads a public or secret certificate file. A file holding a secret key must not be readable by group or
    /// others (as ssh does for private keys): a leaked secret key lets anyone pose as this process.
    pub fn load(path: &Path) -> Result<Certificate, AuthError> {
        let text = read_bounded(path)?;
        let cert = Certificate::parse(&text).map_err(|source| AuthError::Certificate {
            path: path.to_path_buf(),
            source,
        })?;
        if cert.secret.is_some() {
            refuse_loose_permissions(path)?;
        }
        Ok(cert)
    }

    /// Reads this process's own certificate: it must hold a secret key. `path` may name the public file; its
    /// `_secret` sibling is then read.
    pub fn load_secret(path: &Path) -> Result<Certificate, AuthError> {
        let cert = Certificate::load(path)?;
        if cert.secret.is_some() {
            return Ok(cert);
        }
        let sibling = secret_path(path);
        if sibling.exists() {
            let cert = Certificate::load(&sibling)?;
            if cert.secret.is_some() {
                return Ok(cert);
            }
        }
        Err(AuthError::NotSecret(path.to_path_buf()))
    }

    /// Writes `NAME` (public, mode 0644) and `NAME_secret` (mode 0600) into `dir`, refusing to overwrite either.
    pub fn save_pair(&self, dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), AuthError> {
        let secret_text = self
            .secret_text()
            .ok_or_else(|| AuthError::NotSecret(dir.join(name)))?;
        let public_path = dir.join(name);
        let secret_path = secret_path(&public_path);
        for path in [&public_path, &secret_path] {
            if path.exists() {
                return Err(AuthError::Exists(path.clone()));
            }
        }
        write_new(&secret_path, secret_text.as_bytes(), 0o600)?;
        write_new(&public_path, self.public_text().as_bytes(), 0o644)?;
        Ok((public_path, secret_path))
    }
}

/// Why certificate text was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CertError {
    /// A line that is neither a section name nor `name = value`.
    #[error("line {line}: expected `name = value` or a section name")]
    Syntax {
        /// 1-based line number.
        line: usize,
    },
    /// A key that is not 40 characters of Z85.
    #[error("line {line}: a key must be 40 characters of Z85")]
    BadKey {
        /// 1-based line number.
        line: usize,
    },
    /// No `curve` / `public-key`.
    #[error("no curve public-key")]
    NoPublicKey,
}

fn key(value: &str, line: usize) -> Result<[u8; 32], CertError> {
    z85::decode_key(value).ok_or(CertError::BadKey { line })
}

/// `NAME_secret` beside `NAME`.
pub fn secret_path(public: &Path) -> PathBuf {
    let mut name = public.file_name().unwrap_or_default().to_os_string();
    name.push("_secret");
    public.with_file_name(name)
}

fn read_bounded(path: &Path) -> Result<String, AuthError> {
    let io = |source| AuthError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.len() > MAX_CERTIFICATE_BYTES {
        return Err(AuthError::TooLarge(path.to_path_buf()));
    }
    std::fs::read_to_string(path).map_err(io)
}

fn refuse_loose_permissions(path: &Path) -> Result<(), AuthError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|source| AuthError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(AuthError::LoosePermissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), AuthError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| AuthError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                AuthError::Exists(path.to_path_buf())
            } else {
                io(e)
            }
        })?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A certificate laid out as czmq's zcert_save_secret writes it (keys are RFC 26's example server pair).
    const CZMQ_SECRET: &str = "#   ****  Generated on 2026-01-01 by CZMQ  ****\n\
#   ZeroMQ CURVE **Secret** Certificate\n\
#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.\n\
\n\
metadata\n\
    name = \"feed-1\"\n\
curve\n\
    public-key = \"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\"\n\
    secret-key = \"JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\"\n";

    #[test]
    fn reads_a_secret_certificate_as_czmq_writes_it() {
        let cert = Certificate::parse(CZMQ_SECRET).unwrap();
        assert_eq!(
            cert.public_z85(),
            "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
        );
        assert!(cert.secret.is_some());
        assert_eq!(cert.metadata, vec![("name".into(), "feed-1".into())]);
        let again = Certificate::parse(&cert.secret_text().unwrap()).unwrap();
        assert_eq!(again, cert);
        let public = Certificate::parse(&cert.public_text()).unwrap();
        assert_eq!(public.public, cert.public);
        assert!(
            public.secret.is_none(),
            "the public text must not carry the secret key"
        );
    }

    proptest::proptest! {
        #[test]
        fn every_key_pair_round_trips(public: [u8; 32], secret: [u8; 32]) {
            let cert = Certificate { public, secret: Some(secret), metadata: Vec::new() };
            proptest::prop_assert_eq!(Certificate::parse(&cert.secret_text().unwrap()).unwrap(), cert);
        }
    }

    #[test]
    fn damaged_text_is_refused_with_its_line() {
        assert_eq!(
            Certificate::parse("curve\n    public-key = \"short\"\n"),
            Err(CertError::BadKey { line: 2 })
        );
        assert_eq!(
            Certificate::parse("metadata\n"),
            Err(CertError::NoPublicKey)
        );
        assert_eq!(
            Certificate::parse("curve\n    oops\n"),
            Err(CertError::Syntax { line: 2 })
        );
    }

    #[test]
    fn a_pair_is_written_once_with_a_private_secret_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cert = Certificate::parse(CZMQ_SECRET).unwrap();
        let (public, secret) = cert.save_pair(dir.path(), "feed").unwrap();
        assert_eq!(secret.file_name().unwrap(), "feed_secret");
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(Certificate::load(&public).unwrap().public, cert.public);
        assert_eq!(
            Certificate::load_secret(&public).unwrap(),
            cert,
            "the public path finds its _secret sibling"
        );
        assert!(matches!(
            cert.save_pair(dir.path(), "feed"),
            Err(AuthError::Exists(_))
        ));

        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            Certificate::load(&secret),
            Err(AuthError::LoosePermissions { mode: 0o644, .. })
        ));
    }
}
