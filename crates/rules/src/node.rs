//! Names of the primaries the rules speak of.

/// A primary's identity, stable across reconnections: `host:port` of a cluster primary, the
/// address of the one server, or the name Sentinel knows the primary by. It names the primary in
/// logs and in metric labels (a handful of values: one per primary).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(String);

impl NodeId {
    /// The identity `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
