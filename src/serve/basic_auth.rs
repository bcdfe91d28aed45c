//! HTTP basic authentication against bcrypt hashes (the web config file's
//! `basic_auth_users`).
//!
//! bcrypt is slow by design (tens of milliseconds at cost 10), and a scraper sends the same
//! credentials every 15 s, so, as the exporter toolkit does, a success is remembered and the
//! next request with the same credentials skips bcrypt. Remembered are HMAC tags under a key
//! drawn at start, never passwords or plain digests of them. Verifications run off the
//! runtime's thread (the daemon has one) and one at a time, so a flood of wrong passwords costs
//! at most one core and never stalls the sweeps.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use base64::Engine as _;
use ring::hmac;
use subtle::ConstantTimeEq as _;
use tokio::sync::Semaphore;

/// Remembered successes at most; past it the oldest is forgotten (it only costs one bcrypt).
const REMEMBERED: usize = 64;

/// The users and what has been verified.
pub(crate) struct BasicAuth {
    /// User name -> bcrypt hash.
    users: HashMap<String, String>,
    /// Verified in place of an unknown user's hash, so that an unknown name takes as long as a
    /// wrong password (no probing for names by timing).
    decoy: String,
    key: hmac::Key,
    remembered: Mutex<Vec<hmac::Tag>>,
    one_at_a_time: Semaphore,
}

impl std::fmt::Debug for BasicAuth {
    // Neither hashes nor tags: a `{:?}` must not put them in a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth")
            .field("users", &self.users.len())
            .finish_non_exhaustive()
    }
}

impl BasicAuth {
    /// Checks every hash; on error, the user whose hash is bad and why (the hash never shown).
    pub(crate) fn new(users: BTreeMap<String, String>) -> Result<Self, (String, String)> {
        for (name, hash) in &users {
            if let Err(e) = hash.parse::<bcrypt::HashParts>() {
                return Err((
                    name.clone(),
                    format!(
                        "not a bcrypt hash ({e}); make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n'"
                    ),
                ));
            }
        }
        let decoy = users.values().next().cloned().unwrap_or_default();
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| (String::new(), "no randomness from the system".to_owned()))?;
        Ok(Self {
            users: users.into_iter().collect(),
            decoy,
            key,
            remembered: Mutex::new(Vec::new()),
            one_at_a_time: Semaphore::new(1),
        })
    }

    /// How many users there are.
    pub(crate) fn users(&self) -> usize {
        self.users.len()
    }

    /// Whether `authorization` (the header's value) names a user and the right password.
    pub(crate) async fn verify(&self, authorization: &[u8]) -> bool {
        let Some((user, password)) = parse(authorization) else {
            return false;
        };
        let (known, hash) = match self.users.get(&user) {
            Some(hash) => (true, hash.clone()),
            None => (false, self.decoy.clone()),
        };
        // The stored hash is part of what is tagged: a user's new hash (a reload) is a miss.
        let tag = hmac::sign(
            &self.key,
            &[
                user.as_bytes(),
                b"\0",
                password.as_bytes(),
                b"\0",
                hash.as_bytes(),
            ]
            .concat(),
        );
        if known && self.is_remembered(&tag) {
            return true;
        }
        let Ok(_turn) = self.one_at_a_time.acquire().await else {
            return false;
        };
        // Several requests with the same new credentials queue up: the first one's bcrypt is
        // enough for all.
        if known && self.is_remembered(&tag) {
            return true;
        }
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .is_ok_and(|r| r.unwrap_or(false));
        if known && ok {
            let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
            if remembered.len() >= REMEMBERED {
                remembered.remove(0);
            }
            remembered.push(tag);
        }
        known && ok
    }

    /// Compares with every remembered tag in constant time, so the time taken says nothing
    /// about how close a guess came.
    fn is_remembered(&self, tag: &hmac::Tag) -> bool {
        let remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        remembered
            .iter()
            .fold(subtle::Choice::from(0), |found, t| {
                found | t.as_ref().ct_eq(tag.as_ref())
            })
            .into()
    }
}

/// `Basic base64(user:password)`; the scheme is case-insensitive (RFC 7617).
fn parse(authorization: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(authorization).ok()?.trim();
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> Vec<u8> {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {encoded}").into_bytes()
    }

    fn auth() -> BasicAuth {
        // Cost 4, the least bcrypt allows: these tests are about the logic, not the cost.
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        BasicAuth::new([("alice".to_owned(), hash)].into()).unwrap()
    }

    #[tokio::test]
    async fn right_wrong_and_unknown() {
        let a = auth();
        assert!(a.verify(&header("alice", "s3cret")).await);
        assert!(a.verify(&header("alice", "s3cret")).await, "from memory");
        assert_eq!(a.remembered.lock().unwrap().len(), 1);
        assert!(!a.verify(&header("alice", "wrong")).await);
        assert!(!a.verify(&header("bob", "s3cret")).await);
        assert!(!a.verify(b"Bearer abc").await);
        assert!(!a.verify(b"Basic !!!").await);
        let lower_scheme = [b"basic".as_slice(), &header("alice", "s3cret")[5..]].concat();
        assert!(a.verify(&lower_scheme).await);
        assert_eq!(
            a.remembered.lock().unwrap().len(),
            1,
            "failures are not remembered"
        );
    }

    #[test]
    fn bad_hashes_name_the_user_not_the_hash() {
        let (user, why) =
            BasicAuth::new([("bob".to_owned(), "plaintext-pw".to_owned())].into()).unwrap_err();
        assert_eq!(user, "bob");
        assert!(!why.contains("plaintext-pw"), "{why}");
    }

    #[test]
    fn passwords_may_hold_colons() {
        assert_eq!(
            parse(&header("u", "a:b")),
            Some(("u".to_owned(), "a:b".to_owned()))
        );
    }
}
