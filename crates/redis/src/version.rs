//! Which server answers, and whether it is new enough, from its `INFO server` text.
//!
//! Valkey reports `redis_version:7.2.4` (the Redis it forked from) whatever its own version;
//! that is in `valkey_version`, and `server_name:valkey` names it.

/// A server's name and version, as `INFO server` gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerVersion {
    /// `Redis` or `Valkey`, for messages.
    pub name: &'static str,
    /// As the server spells it (`7.0.15`, `9.1.2`); empty if it gave none.
    pub version: String,
}

impl ServerVersion {
    /// Reads the `INFO server` text of one server.
    pub(crate) fn from_info(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let valkey = field("valkey_version");
        let name = if valkey.is_some() || field("server_name") == Some("valkey") {
            "Valkey"
        } else {
            "Redis"
        };
        let version = valkey.or(field("redis_version")).unwrap_or_default();
        Self {
            name,
            version: version.to_owned(),
        }
    }

    /// `(major, minor)`; a part that is not a number counts as 0.
    fn major_minor(&self) -> (u32, u32) {
        let mut parts = self.version.split('.').map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }

    /// Whether presence-sweeper can use this server: it needs `ZRANGE ... BYSCORE` and
    /// `SCAN ... TYPE`, from Redis 6.2 on. Every Valkey has them (its first release was 7.2).
    pub(crate) fn is_supported(&self) -> bool {
        let minimum = match self.name {
            "Valkey" => (7, 2),
            _ => (6, 2),
        };
        self.major_minor() >= minimum
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.version.as_str() {
            "" => write!(f, "{} of unknown version", self.name),
            v => write!(f, "{} {v}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(fields: &[&str]) -> String {
        let mut text = String::from("# Server\r\n");
        for f in fields {
            text += f;
            text += "\r\n";
        }
        text + "os:Linux\r\n"
    }

    #[test]
    fn valkey_is_known_by_its_own_version_not_the_redis_one_it_reports() {
        let v = ServerVersion::from_info(&info(&[
            "redis_version:7.2.4",
            "server_name:valkey",
            "valkey_version:9.1.2",
        ]));
        assert_eq!((v.name, v.version.as_str()), ("Valkey", "9.1.2"));
        assert_eq!(v.to_string(), "Valkey 9.1.2");
        assert!(v.is_supported());
        let v8 = ServerVersion::from_info(&info(&[
            "redis_version:7.2.4",
            "server_name:valkey",
            "valkey_version:8.0.1",
        ]));
        assert_eq!(v8.to_string(), "Valkey 8.0.1");
        // Named by server_name alone: its redis_version stands in.
        let named = ServerVersion::from_info(&info(&["redis_version:7.2.4", "server_name:valkey"]));
        assert_eq!(named.to_string(), "Valkey 7.2.4");
        assert!(named.is_supported());
    }

    #[test]
    fn redis_needs_6_2() {
        let redis = |v: &str| ServerVersion::from_info(&info(&[&format!("redis_version:{v}")]));
        assert_eq!(redis("7.0.15").to_string(), "Redis 7.0.15");
        assert!(redis("7.0.15").is_supported());
        assert!(redis("6.2.0").is_supported());
        assert!(redis("8.2.1").is_supported());
        assert!(!redis("6.0.16").is_supported());
        assert!(!redis("5.0.14").is_supported());
        // A field whose name only starts the same is not the version.
        let other =
            ServerVersion::from_info(&info(&["redis_version_x:9.0", "redis_version:6.0.1"]));
        assert_eq!(other.version, "6.0.1");
    }

    #[test]
    fn no_version_at_all_is_refused_and_said_so() {
        let v = ServerVersion::from_info("# Server\r\nos:Linux\r\n");
        assert_eq!(v.to_string(), "Redis of unknown version");
        assert!(!v.is_supported());
    }
}
