//! Slots this process has just marked due, per endpoint: the evictor says so after a stream
//! call that appended, so that on a cluster the endpoint's deliverer claims from that slot at
//! its next look (within [`POLL`](crate::POLL)) rather than at its next discovery. A hint only
//! hastens: discovery finds every due slot, hinted or not (another replica's, a predecessor's).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// Hints shared by the evictors (who mark) and the deliverers (who take). Clones share them;
/// at most one entry per endpoint and slot is held.
#[derive(Debug, Clone, Default)]
pub struct DueSlots {
    marked: Arc<Mutex<HashMap<String, BTreeSet<u16>>>>,
}

impl DueSlots {
    /// Says that streams in `slot` were appended to for `endpoints`.
    pub fn mark<'a>(&self, endpoints: impl IntoIterator<Item = &'a String>, slot: u16) {
        let mut marked = self.marked.lock().unwrap_or_else(|e| e.into_inner());
        for e in endpoints {
            marked.entry(e.clone()).or_default().insert(slot);
        }
    }

    /// The slots marked for `endpoint` since it last took them.
    pub(crate) fn take(&self, endpoint: &str) -> BTreeSet<u16> {
        let mut marked = self.marked.lock().unwrap_or_else(|e| e.into_inner());
        marked.remove(endpoint).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_endpoint_takes_its_own_marks_once() {
        let hints = DueSlots::default();
        let (a, b) = ("a".to_owned(), "b".to_owned());
        hints.mark([&a, &b], 7);
        hints.mark([&a], 7);
        hints.mark([&a], 9);
        assert_eq!(hints.take("a"), BTreeSet::from([7, 9]));
        assert_eq!(hints.take("a"), BTreeSet::new());
        assert_eq!(hints.take("b"), BTreeSet::from([7]));
    }
}
