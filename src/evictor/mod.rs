//! A sweep at run time, its evictor: its settings, event encoder and eviction script, and the check of a
//! batch of its keys on one primary.
//!
//! - this module: [`Evictor`], what every check of it shares;
//! - `check`: one batch of keys, read, evicted and announced: the one evictor every source of
//!   work (a full pass, a deadline, reconciliation) goes through, as named steps, its pure ones
//!   the rules' (`plan`, `sizing`, `units`, `ahead`, `storm`);
//! - `apply`: the evict step (transactions, the bounded script, counting and announcing);
//! - `announce`: the events of what was removed, and publishing them;
//! - `streamed`: the evict step of a sweep with a stream (the stream script's calls).
//!
//! The daemon publishes the events from the eviction's reply instead of a script publishing
//! them. Why: ids that are not valid UTF-8 cannot be encoded as JSON in Lua (cjson passes the
//! bytes through); encoding JSON in Lua costs Redis's single thread several times what PUBLISH
//! of a ready payload does; and in a cluster a script may only touch its own slot, which a
//! `{conversation_id}` channel need not hash to. Exactly-once holds either way: only the call
//! whose removal took a member gets it back, so only that sweeper announces it. The cost is a
//! window between the reply and the PUBLISH in which a crash loses events, never duplicates
//! them. Redis pub/sub is at-most-once to subscribers anyway, and every event carries the
//! roster, so consumers already resynchronise from the next one.

mod announce;
mod apply;
mod check;
mod streamed;

use presence_sweeper_config as config;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use presence_sweeper_config::Config;
use presence_sweeper_redis::evict::EvictScript;
use presence_sweeper_redis::evict::preflight;
use presence_sweeper_redis::evict::stream::StreamScript;
use presence_sweeper_redis::{Error, Node, Store};
use presence_sweeper_rules::ahead::AheadWatch;
use presence_sweeper_rules::event::EventEncoder;
use presence_sweeper_rules::sizing::Sizing;
use presence_sweeper_rules::storm::{GuardReport, StormGuard, Unreported};
use presence_sweeper_rules::units::{UnitAlarm, UnitWatch};
use presence_sweeper_webhooks::DueSlots;

pub(crate) use check::CheckCtx;

/// How long a node's successful preflight stands: ACLs rarely change, and a failed check forgets
/// it at once.
const PREFLIGHT_VALID: Duration = Duration::from_secs(60);

/// A sweep's evictor: the sweep as configured, ready to check its keys. Shared by every
/// primary's work.
#[derive(Debug)]
pub struct Evictor {
    config: config::Sweep,
    encoder: EventEncoder,
    script: EvictScript,
    /// The eviction of a sweep with a stream.
    /// Hashed on first use: its SHA1 over 18 KB of source was 3 % of a clean pass's own
    /// instructions at 3,000 keys, for sweeps without a stream too.
    stream_script: std::sync::OnceLock<StreamScript>,
    /// `events.max_bytes`.
    max_bytes: usize,
    evict: config::Evict,
    sharded_pubsub: bool,
    guard: StormGuard,
    /// Whether its scores fit its `score_unit`; evicts nothing while they do not.
    units: UnitWatch,
    /// Scores ahead of Redis's clock: reported, never a reason to evict.
    ahead: AheadWatch,
    /// Whether a refused `PTTL` was said in the log already.
    pttl_said: std::sync::atomic::AtomicBool,
    /// How big its calls may be, from its ids' length.
    sizing: Sizing,
    /// When each node (by its id) last passed its preflight.
    preflights: Mutex<HashMap<String, Instant>>,
    /// Where a cluster's slots marked due for webhooks are said, for the daemon's deliverers.
    due_slots: Option<DueSlots>,
}

impl Evictor {
    /// The script of a sweep with a stream.
    fn stream_script(&self) -> &StreamScript {
        self.stream_script.get_or_init(StreamScript::new)
    }

    /// The sweep `config` with the eviction and publishing settings of `settings`, for a
    /// one-shot pass (its storm guard reports nowhere).
    pub fn new(config: &config::Sweep, settings: &Config) -> Self {
        Self::with_settings(
            config,
            &settings.evict,
            &settings.events,
            settings.redis.sharded_pubsub,
            Arc::new(Unreported),
            UnitAlarm::detached(),
        )
    }

    /// The sweep `config` with explicit settings; its storm guard reports to `guard`, a wrong
    /// `score_unit` to `units`.
    pub(crate) fn with_settings(
        config: &config::Sweep,
        evict: &config::Evict,
        events: &config::Events,
        sharded_pubsub: bool,
        guard: Arc<dyn GuardReport>,
        units: UnitAlarm,
    ) -> Self {
        Self {
            ahead: AheadWatch::new(&config.name),
            pttl_said: std::sync::atomic::AtomicBool::new(false),
            units: UnitWatch::new(
                &config.name,
                config.score_unit,
                config.ttl.as_secs_f64(),
                units,
            ),
            encoder: EventEncoder::new(
                &config.event,
                &config.name,
                events.max_bytes,
                config.stream.is_some(),
            ),
            sizing: Sizing::new(events.max_bytes),
            guard: StormGuard::new(&config.storm_guard, &config.name, config.ttl, guard),
            config: config.clone(),
            script: EvictScript::new(),
            stream_script: std::sync::OnceLock::new(),
            max_bytes: events.max_bytes,
            evict: evict.clone(),
            sharded_pubsub,
            preflights: Mutex::default(),
            due_slots: None,
        }
    }

    /// Says to `hints` which of a cluster's slots its stream calls marked due for webhooks,
    /// so that the daemon's deliverers claim from them at once.
    pub(crate) fn with_due_slots(mut self, hints: DueSlots) -> Self {
        self.due_slots = Some(hints);
        self
    }

    /// The sweep's storm guard.
    pub(crate) fn guard(&self) -> &StormGuard {
        &self.guard
    }

    /// The sweep's configuration.
    pub fn config(&self) -> &config::Sweep {
        &self.config
    }

    /// Proves, once per [`PREFLIGHT_VALID`] per node, that the Redis user may do everything a
    /// check does with `key`, before anything is evicted. On connections of its own.
    pub(crate) async fn preflight(
        &self,
        store: &Store,
        node: &Node,
        key: &[u8],
    ) -> Result<(), Error> {
        let id = node.id().to_string();
        let fresh = self
            .preflights
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .is_some_and(|at| crate::time::now().saturating_duration_since(*at) < PREFLIGHT_VALID);
        if fresh {
            return Ok(());
        }
        let conversation_id = self.config.pattern.conversation_id(key).unwrap_or(key);
        let channel = self.config.channel.render(key, conversation_id);
        // A sharded publish in a cluster goes to the channel's own shard: probe it there.
        let routed_publish = self.sharded_pubsub && node.needs_slot_groups();
        let publish = (!routed_publish).then(|| self.publish_command());
        let template = self.config.channel.to_string();
        let stream_template = self.config.stream.as_ref().map(|s| s.key.to_string());
        let names = preflight::Names {
            keys: self.config.pattern.glob(),
            channel: &template,
            stream: stream_template.as_deref(),
        };
        let stream_key = self
            .config
            .stream
            .as_ref()
            .map(|s| s.key.render(key, conversation_id));
        let in_slot = node
            .needs_slot_groups()
            .then(|| presence_sweeper_webhooks::keys::slot_of(key));
        let due: Vec<String> = self.config.stream.as_ref().map_or_else(Vec::new, |s| {
            s.webhooks
                .iter()
                .map(|w| presence_sweeper_webhooks::keys::due_key(w, in_slot))
                .collect()
        });
        let stream =
            self.config
                .stream
                .as_ref()
                .zip(stream_key.as_deref())
                .map(|(config, stream_key)| preflight::StreamProbe {
                    key: stream_key,
                    script: self.stream_script(),
                    trims: config.retention.is_some(),
                    expires: config.effective_ttl().is_some(),
                    due: &due,
                });
        let mut con = store.dedicated(node).await?;
        preflight::prove(
            &mut con,
            key,
            &channel,
            names,
            publish,
            &self.script,
            stream,
        )
        .await?;
        if routed_publish {
            let mut con = store.dedicated_for_key(&channel).await?;
            preflight::prove_sharded_publish(&mut con, &channel, names).await?;
        }
        self.preflights
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, crate::time::now());
        Ok(())
    }

    /// Checks the permissions again before the next eviction on `node`: a failure may be a
    /// changed ACL.
    pub(crate) fn forget_preflight(&self, node: &Node) {
        self.preflights
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&node.id().to_string());
    }
}
