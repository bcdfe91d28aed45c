//! What the workers and the subscriber share: the trackers that judge every event, the
//! counters, and the narrator told of each event as it is judged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::scenario::Scenario;
use super::tracker::{Judgement, Tracker};

/// One event the run judged, as a narrator hears of it the moment it arrives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heard<'e> {
    pub(crate) conversation: &'e str,
    pub(crate) user: u64,
    pub(crate) verdict: Judgement,
}

/// Told of every event the run judges, as it arrives (the demo prints them).
pub(crate) type Narrator = Box<dyn Fn(Heard<'_>) + Send + Sync>;

/// What the workers and the subscriber share.
pub(super) struct Board {
    pub(super) online: Mutex<Tracker>,
    pub(super) typing: Mutex<Tracker>,
    pub(super) unexpected: AtomicU64,
    pub(super) next_user: AtomicU64,
    /// Conversations opened during the run so far.
    pub(super) new_conversations: AtomicU64,
    pub(super) prefix: String,
    pub(super) online_count: String,
    pub(super) typing_count: Option<String>,
    pub(super) narrator: Option<Narrator>,
}

impl Board {
    pub(super) fn new(plan: &Scenario, narrator: Option<Narrator>) -> Self {
        Self {
            online: Mutex::new(Tracker::new(plan.sweep.ttl.as_secs_f64())),
            typing: Mutex::new(Tracker::new(
                plan.typing.as_ref().map_or(0.0, |t| t.ttl.as_secs_f64()),
            )),
            unexpected: AtomicU64::new(0),
            next_user: AtomicU64::new(1),
            new_conversations: AtomicU64::new(0),
            prefix: plan.prefix(),
            online_count: format!("{}_count", plan.sweep.name),
            typing_count: plan.typing.as_ref().map(|t| format!("{}_count", t.name)),
            narrator,
        }
    }

    /// A new user number: ids are never reused, so a rejoining user is a new member.
    pub(super) fn new_user(&self) -> u64 {
        self.next_user.fetch_add(1, Ordering::Relaxed)
    }

    /// The number of a new conversation.
    pub(super) fn new_conversation(&self) -> u64 {
        self.new_conversations.fetch_add(1, Ordering::Relaxed)
    }

    /// Judges one event, which arrived at `arrived` on Redis's clock (as the watcher last read
    /// it, plus the time since; its `timestamp`, the eviction's own instant, when the watcher has
    /// not read it yet).
    pub(super) fn event(&self, payload: &[u8], arrived: Option<f64>) {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(payload) else {
            self.unexpected.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(conversation) = v["conversation_id"].as_str() else {
            self.unexpected.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if !conversation.starts_with(&self.prefix) {
            // Another run's or the app's: not ours to judge.
            return;
        }
        // The roster field is named after the sweep, which tells the two sweeps apart even when
        // they publish on one channel with one event type.
        let tracker = if v.get(&self.online_count).is_some() {
            &self.online
        } else if self
            .typing_count
            .as_ref()
            .is_some_and(|c| v.get(c).is_some())
        {
            &self.typing
        } else {
            return;
        };
        let user = v["user_id"]
            .as_str()
            .and_then(|u| u.strip_prefix('u'))
            .and_then(|n| n.parse::<u64>().ok());
        let (Some(user), Some(timestamp)) = (user, v["timestamp"].as_f64()) else {
            self.unexpected.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let verdict = lock(tracker).observe(user, arrived.unwrap_or(timestamp));
        if verdict == Judgement::Unknown {
            self.unexpected.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(narrator) = &self.narrator {
            narrator(Heard {
                conversation,
                user,
                verdict,
            });
        }
    }
}

pub(super) fn lock(m: &Mutex<Tracker>) -> MutexGuard<'_, Tracker> {
    // No tracker update can panic midway, so a lock poisoned by a panic elsewhere is still sound.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
