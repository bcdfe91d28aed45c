//! The I/O of the keyspace-notification subscription: subscribing, proving it still delivers,
//! and looking at the server's `notify-keyspace-events` (turning them on where allowed).

use std::sync::Arc;

use presence_sweeper_redis::{Error, Node, Store};
use presence_sweeper_rules::keyspace::{Availability, channel_prefix};
use presence_sweeper_rules::primary::canary;
use presence_sweeper_rules::primary::notifications::{Config, Op, Outcome, Pending};

use super::io::RedisIo;
use super::ops::Ops;
use super::settings::LoopSettings;
use presence_sweeper_redis::keyspace::{self, Subscription};

impl Ops {
    /// The future of a subscription operation, on `patterns`.
    pub(crate) fn subscription(&self, op: Op<RedisIo>, patterns: Vec<String>) -> Pending<RedisIo> {
        let (store, node, settings) =
            (self.store.clone(), self.node.clone(), self.settings.clone());
        match op {
            Op::Subscribe => Box::pin(subscribe(store, node, patterns, settings)),
            Op::Ping(mut sub) => Box::pin(async move {
                match sub.ping(settings.command_timeout).await {
                    Ok(()) => Outcome::Kept(sub),
                    Err(e) => Outcome::Failed(e),
                }
            }),
            Op::Recheck(sub) => {
                drop((store, patterns));
                Box::pin(async move { Outcome::Looked(sub, look(node, &settings).await) })
            }
        }
    }
}

/// A look at the server's settings, on the primary's own connection (no new connection: it
/// comes every [`QUIET`](presence_sweeper_rules::primary::notifications::QUIET) on a quiet
/// keyspace), within the command
/// timeout. Turns them on again if the configuration allows.
async fn look(mut node: Node, settings: &LoopSettings) -> Config {
    let look = async {
        match keyspace::availability(&mut node).await? {
            Availability::On => Ok(Config::On),
            Availability::Off(flags) if settings.tracking.configure_notifications => {
                let set = keyspace::enable(&mut node, &flags).await?;
                tracing::info!(node = %node.id(), flags = %set, "turned keyspace notifications on (tracking.configure_notifications)");
                Ok(Config::On)
            }
            Availability::Off(flags) => Ok(Config::Off(flags)),
            Availability::Unknown(why) => Ok::<_, Error>(Config::Refused(why)),
        }
    };
    match tokio::time::timeout(settings.command_timeout, look).await {
        Ok(Ok(config)) => config,
        Ok(Err(e)) => {
            tracing::debug!(node = %node.id(), error = %e, "could not look at notify-keyspace-events");
            Config::NoAnswer
        }
        Err(_) => Config::NoAnswer,
    }
}

/// Subscribes to `patterns` on `node`'s server, whatever its settings say: where they are off
/// the subscription waits for them to be switched on, and where the server will not say,
/// notices arriving tell. A look at the settings goes first (turning notifications on if the
/// configuration allows); a server that does not answer it is tried again later.
async fn subscribe(
    store: Store,
    node: Node,
    patterns: Vec<String>,
    settings: Arc<LoopSettings>,
) -> Outcome<RedisIo> {
    let config = match look(node.clone(), &settings).await {
        Config::NoAnswer => {
            return Outcome::Failed(Error::Redis(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "RedisIo did not answer CONFIG GET notify-keyspace-events",
            ))));
        }
        config => config,
    };
    // The canary's own notices (the liveness probe writes it about once a second) prove that
    // notifications flow on a quiet keyspace. A pattern, not the key: the key is learnt by the
    // first probe, and each primary publishes only its own keys' events. An ACL without that
    // channel still gets the sweeps' notices.
    let canary = format!("{}{}*", channel_prefix(node.db()), canary::PREFIX);
    let attempt = async {
        let with_canary: Vec<String> = patterns.iter().cloned().chain([canary]).collect();
        let pubsub = store.subscriber(&node).await?;
        let timeout = settings.command_timeout;
        match Subscription::start(pubsub, node.db(), &with_canary, timeout).await {
            Err(Error::Permission { .. }) => {
                let pubsub = store.subscriber(&node).await?;
                Subscription::start(pubsub, node.db(), &patterns, timeout).await
            }
            started => started,
        }
    };
    match attempt.await {
        Ok(sub) => Outcome::Subscribed(Box::new(sub), config),
        Err(Error::Permission { .. }) => Outcome::Unavailable {
            why: format!(
                "the RedisIo user may not PSUBSCRIBE {} (add each to its ACL as a channel: &{})",
                patterns.join(", "),
                patterns.join(" &")
            ),
            refused: true,
        },
        Err(e) => Outcome::Failed(e),
    }
}
