//! Secrets: values that never print themselves, the files they are read from, and URLs shown
//! with their passwords hidden.

use std::fmt;
use std::path::{Path, PathBuf};

/// A secret that never prints itself.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Reads a password file (one line; a trailing newline is stripped). The error is the reason,
/// for the caller to attach to its key.
pub(super) fn read_secret(path: &str) -> Result<Secret, String> {
    let text = std::fs::read_to_string(expand_credentials_dir(path))
        .map_err(|e| format!("cannot read the password file: {e}"))?;
    let password = text.strip_suffix('\n').unwrap_or(&text);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() {
        return Err("the password file is empty".into());
    }
    Ok(Secret::new(password.to_owned()))
}

/// Reads a PEM file (certificates or a key). The error is the reason, for the caller to attach
/// to its key.
pub(super) fn read_pem(path: &str) -> Result<Vec<u8>, String> {
    let pem = std::fs::read(expand_credentials_dir(path))
        .map_err(|e| format!("cannot read the file: {e}"))?;
    if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err("not a PEM file (no -----BEGIN line)".into());
    }
    Ok(pem)
}

/// Expands a leading `$CREDENTIALS_DIRECTORY` / `${CREDENTIALS_DIRECTORY}`, where systemd's
/// `LoadCredential=` puts secrets; the directory is only known once the service starts.
fn expand_credentials_dir(path: &str) -> PathBuf {
    for var in ["${CREDENTIALS_DIRECTORY}", "$CREDENTIALS_DIRECTORY"] {
        if let Some(rest) = path.strip_prefix(var)
            && let Ok(dir) = std::env::var("CREDENTIALS_DIRECTORY")
        {
            return Path::new(&dir).join(rest.trim_start_matches('/'));
        }
    }
    PathBuf::from(path)
}

/// Hides the password in a Redis URL: `redis://user:secret@host` becomes `redis://user:***@host`,
/// and a `pass`/`password` query parameter (`unix:///sock?pass=secret`) becomes `***`. The
/// userinfo runs to the last `@`, so a password with an unescaped `/`, `?` or `#` is hidden too.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let (head, rest) = url.split_at(scheme_end + 3);
    let rest = match rest.rfind('@') {
        None => rest.to_owned(),
        Some(at) => {
            let userinfo = &rest[..at];
            let hidden = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                // `redis://secret@host` puts the password in the user position.
                None => "***".to_owned(),
            };
            format!("{hidden}{}", &rest[at..])
        }
    };
    let Some((path, query)) = rest.split_once('?') else {
        return format!("{head}{rest}");
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _))
                if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
            {
                format!("{k}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{head}{path}?{}", query.join("&"))
}
