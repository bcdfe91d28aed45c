//! Standard Webhooks signatures: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, one per
//! key, space-separated, so that a receiver that knows either key of a rotation accepts.
//!
//! ring's HMAC is used because ring is linked already (rustls, the metrics server's basic
//! auth): no second implementation of SHA-256 in the binary.

use base64::Engine as _;
use presence_sweeper_config::{Secret, decode_secret};
use ring::hmac;

/// A secret that is not a usable `whsec_` key. It says which one (by position) and why, never
/// what it holds.
#[derive(Debug, thiserror::Error)]
#[error("webhooks.{endpoint}.secret: secret {position}: {why}")]
pub struct BadSecret {
    /// The endpoint's name.
    pub endpoint: String,
    /// Its position in the list, from 1.
    pub position: usize,
    /// What is wrong with it.
    pub why: String,
}

/// The keys an endpoint's requests are signed with. Its `Debug` shows how many, nothing else.
pub struct Signer {
    keys: Vec<hmac::Key>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({} keys)", self.keys.len())
    }
}

impl Signer {
    /// The keys of `secrets` (already checked by the configuration; checked again here so
    /// that no path signs with a key it misread).
    pub fn new(endpoint: &str, secrets: &[Secret]) -> Result<Self, BadSecret> {
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(i, s)| {
                decode_secret(s)
                    .map(|key| hmac::Key::new(hmac::HMAC_SHA256, &key))
                    .map_err(|why| BadSecret {
                        endpoint: endpoint.to_owned(),
                        position: i + 1,
                        why,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { keys })
    }

    /// The `webhook-signature` header's value for one attempt.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let timestamp = timestamp.to_string();
        let mut out = String::with_capacity(self.keys.len() * 48);
        for key in &self.keys {
            let mut ctx = hmac::Context::with_key(key);
            for part in [id.as_bytes(), b".", timestamp.as_bytes(), b".", body] {
                ctx.update(part);
            }
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str("v1,");
            base64::engine::general_purpose::STANDARD.encode_string(ctx.sign(), &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_cHJlc2VuY2Utc3dlZXBlci13ZWJob29rLXRlc3QtazE=";
    const ID: &str = "ps1_fbb9cca8fb803df3ea55910f43255cf2_1764460046500-0";
    const BODY: &str = r#"{"type":"presence.leave","conversation_id":"c42","user_id":"u7","reason":"expired","last_seen":1764460000.25,"timestamp":1764460046.5,"online":["u8"],"online_count":1,"prev":"0-0","id":"1764460046500-0"}"#;

    /// The signature the Python `standardwebhooks` package (1.0) computes for the same secret,
    /// id, timestamp and body (`Webhook(secret).sign(id, datetime(1764460047), body)`).
    const EXPECTED: &str = "v1,H0AArHkE6TFmjAUXKkPHqrNGD1W8GvSkvs9K5N9ex8Q=";

    fn signer(secrets: &[&str]) -> Signer {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new((*s).into())).collect();
        Signer::new("crm", &secrets).unwrap()
    }

    #[test]
    fn matches_the_reference_implementation() {
        assert_eq!(
            signer(&[SECRET]).sign(ID, 1764460047, BODY.as_bytes()),
            EXPECTED
        );
    }

    #[test]
    fn signs_with_every_key_of_a_rotation() {
        let other = "whsec_b3RoZXIta2V5LW9mLXByZXNlbmNlLXN3ZWVwZXI=";
        let both = signer(&[other, SECRET]).sign(ID, 1764460047, BODY.as_bytes());
        let (first, second) = both.split_once(' ').unwrap();
        assert_eq!(second, EXPECTED);
        assert_eq!(
            first,
            signer(&[other]).sign(ID, 1764460047, BODY.as_bytes())
        );
    }

    #[test]
    fn a_different_timestamp_or_body_changes_it() {
        let s = signer(&[SECRET]);
        assert_ne!(s.sign(ID, 1764460048, BODY.as_bytes()), EXPECTED);
        assert_ne!(s.sign(ID, 1764460047, b"{}"), EXPECTED);
    }

    #[test]
    fn a_bad_secret_is_named_by_position_not_shown() {
        let bad = [
            Secret::new(SECRET.into()),
            Secret::new("whsec_c2hvcnQ=".into()),
        ];
        let e = Signer::new("crm", &bad).unwrap_err().to_string();
        assert!(
            e.contains("webhooks.crm.secret") && e.contains("secret 2"),
            "{e}"
        );
        assert!(!e.contains("c2hvcnQ") && !format!("{:?}", signer(&[SECRET])).contains("whsec"));
    }
}
