//! The daemon's webhook deliverers: one per enabled `[webhooks.<name>]`, each with its own
//! cancellation, started with the Redis connection and restarted when a reload changes the
//! endpoints (or how replicas share them).

use std::sync::Arc;
use std::time::Duration;

use presence_sweeper_config::{Config, Coordination, Webhook};
use presence_sweeper_redis::Store;
use presence_sweeper_webhooks::{Claiming, Deliverer, DueSlots};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::serve::metrics::Metrics;

/// The running deliverers and what they were started from.
pub(crate) struct Webhooks {
    store: Store,
    metrics: Arc<Metrics>,
    owner: String,
    due_slots: DueSlots,
    running: Option<Running>,
}

struct Running {
    hooks: Vec<Webhook>,
    coordination: Coordination,
    command_timeout: Duration,
    cancel: CancellationToken,
    tasks: JoinSet<()>,
}

impl Webhooks {
    /// Starts the deliverers of `config` on `store`, stopping with `cancel`; on a cluster they
    /// hear of the slots the evictors marked due through `due_slots`.
    pub(crate) fn start(
        store: Store,
        config: &Config,
        metrics: Arc<Metrics>,
        due_slots: DueSlots,
        cancel: &CancellationToken,
    ) -> Self {
        let mut hooks = Self {
            store,
            metrics,
            owner: owner_id(),
            due_slots,
            running: None,
        };
        hooks.run(config, cancel);
        hooks
    }

    fn run(&mut self, config: &Config, cancel: &CancellationToken) {
        let claiming = Claiming {
            owner: self.owner.clone(),
            lease: config.coordination.lease_ttl,
            command_timeout: config.redis.command_timeout,
            hints: self.due_slots.clone(),
        };
        let cancel = cancel.child_token();
        let mut tasks = JoinSet::new();
        for hook in config.enabled_webhooks() {
            match Deliverer::new(hook, self.store.clone(), self.metrics.webhooks(), &claiming) {
                Ok(d) => {
                    tasks.spawn(d.run(cancel.clone()));
                }
                Err(e) => tracing::error!(
                    webhook = %hook.name,
                    error = %e,
                    "the webhook cannot start; its events wait in Redis until a reload fixes it"
                ),
            }
        }
        self.running = Some(Running {
            hooks: config.webhooks.clone(),
            coordination: config.coordination.clone(),
            command_timeout: config.redis.command_timeout,
            cancel,
            tasks,
        });
    }

    /// Takes a reloaded configuration: restarts the deliverers if their settings changed.
    pub(crate) async fn apply(&mut self, config: &Config, cancel: &CancellationToken) {
        if let Some(r) = &self.running
            && r.hooks == config.webhooks
            && r.coordination == config.coordination
            && r.command_timeout == config.redis.command_timeout
        {
            return;
        }
        let old: Vec<Webhook> = self
            .running
            .as_ref()
            .map(|r| r.hooks.clone())
            .unwrap_or_default();
        self.stop().await;
        for gone in old
            .iter()
            .filter(|h| !config.enabled_webhooks().any(|n| n.name == h.name))
        {
            self.metrics.webhooks().forget(&gone.name);
        }
        self.run(config, cancel);
    }

    /// Stops every deliverer: attempts in flight end, claims go back to Redis for another
    /// replica.
    pub(crate) async fn stop(&mut self) {
        if let Some(mut r) = self.running.take() {
            r.cancel.cancel();
            while r.tasks.join_next().await.is_some() {}
        }
    }
}

/// This process's name in claims: unique per start, so a restarted daemon never mistakes its
/// predecessor's claims for its own.
fn owner_id() -> String {
    let mut bytes = [0u8; 8];
    let random = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    let suffix: String = match random {
        Ok(()) => bytes.iter().map(|b| format!("{b:02x}")).collect(),
        Err(_) => format!("{:x}", crate::time::unix_now().to_bits()),
    };
    format!("{}-{suffix}", std::process::id())
}
