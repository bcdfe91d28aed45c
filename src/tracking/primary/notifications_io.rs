//! The I/O of the keyspace-notification subscription: subscribing, proving it still delivers,
//! and looking at the server's `notify-keyspace-events` (turning them on where allowed).

use std::sync::Arc;

use presence_sweeper_redis::{Error, Node, Store};
use presence_sweeper_rules::keyspace::{Availability, Channels, channel_prefix, new_key_channel};
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
                Box::pin(async move {
                    let (config, channels) = look(node, &settings).await;
                    // The server now publishes on other channels than those listened to (an
                    // operator changed the flags): subscribe again, walking what went unheard.
                    if config == Config::On
                        && sub.channels() != Channels::Both
                        && channels != sub.channels()
                    {
                        return Outcome::Failed(Error::Redis(redis::RedisError::from((
                            redis::ErrorKind::Client,
                            "notify-keyspace-events changed: subscribing to its channels again",
                        ))));
                    }
                    Outcome::Looked(sub, config)
                })
            }
        }
    }
}

/// A look at the server's settings, on the primary's own connection (no new connection: it
/// comes every [`QUIET`](presence_sweeper_rules::primary::notifications::QUIET) on a quiet
/// keyspace), within the command timeout. Turns them on again if the configuration allows.
/// Says which channels to listen to: those the server publishes on, or both where it will not
/// say or publishes neither yet.
async fn look(mut node: Node, settings: &LoopSettings) -> (Config, Channels) {
    let look = async {
        match keyspace::availability(&mut node).await? {
            Availability::On(channels) => Ok((Config::On, channels)),
            Availability::Off(flags) if settings.tracking.configure_notifications => {
                let set = keyspace::enable(&mut node, &flags).await?;
                tracing::info!(node = %node.id(), flags = %set, "turned keyspace notifications on (tracking.configure_notifications)");
                Ok((Config::On, Channels::of(&set).unwrap_or(Channels::Both)))
            }
            Availability::Off(flags) => Ok((Config::Off(flags), Channels::Both)),
            Availability::Unknown(why) => Ok::<_, Error>((Config::Refused(why), Channels::Both)),
        }
    };
    match tokio::time::timeout(settings.command_timeout, look).await {
        Ok(Ok(looked)) => looked,
        Ok(Err(e)) => {
            tracing::debug!(node = %node.id(), error = %e, "could not look at notify-keyspace-events");
            (Config::NoAnswer, Channels::Both)
        }
        Err(_) => (Config::NoAnswer, Channels::Both),
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
    let (config, channels) = match look(node.clone(), &settings).await {
        (Config::NoAnswer, _) => {
            return Outcome::Failed(Error::Redis(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "Redis did not answer CONFIG GET notify-keyspace-events",
            ))));
        }
        looked => looked,
    };
    // The canary's own notices (the liveness probe writes it about once a second) prove that
    // notifications flow on a quiet keyspace. A pattern, not the key: the key is learnt by the
    // first probe, and each primary publishes only its own keys' events. An ACL without that
    // channel still gets the sweeps' notices.
    // New keys, where the server publishes them, rather than every write of the sweeps' keys:
    // a tracked key's deadline comes from its checks, so heartbeats need not be heard.
    //
    // An ACL may refuse a channel: the canary's (the sweeps' notices still prove the flow), or
    // the new keys' where the server will not say what it publishes (the keyspace's still
    // serve). So the subscription is tried with less each time the ACL refuses.
    let canary = format!("{}{}*", channel_prefix(node.db()), canary::PREFIX);
    let keyspace = patterns.clone();
    let mut patterns = match channels.keyspace() {
        true => patterns,
        false => Vec::new(),
    };
    if channels.new_keys() {
        patterns.push(new_key_channel(node.db()));
    }
    let mut tries = vec![
        (
            patterns.iter().cloned().chain([canary.clone()]).collect(),
            channels,
        ),
        (patterns.clone(), channels),
    ];
    if channels == Channels::Both {
        let with_canary = keyspace.iter().cloned().chain([canary.clone()]).collect();
        tries.push((with_canary, Channels::Keyspace));
        tries.push((keyspace, Channels::Keyspace));
    }
    // The last refused try names the channels to grant: the sweeps' own where the server
    // will not say which it publishes (the documented ACL grants those).
    let mut refused_for = patterns;
    let attempt = async {
        let timeout = settings.command_timeout;
        let mut refused = None;
        for (these, listening) in tries {
            let pubsub = store.subscriber(&node).await?;
            match Subscription::start(pubsub, node.db(), &these, timeout).await {
                Ok(sub) => return Ok(sub.listening_to(listening)),
                Err(e @ Error::Permission { .. }) => {
                    refused = Some(e);
                    refused_for = these.into_iter().filter(|p| *p != canary).collect();
                }
                Err(e) => return Err(e),
            }
        }
        Err(refused.expect("tried"))
    };
    match attempt.await {
        Ok(sub) => Outcome::Subscribed(Box::new(sub), config),
        Err(Error::Permission { .. }) => Outcome::Unavailable {
            why: format!(
                "the Redis user may not PSUBSCRIBE {} (add each to its ACL as a channel: &{})",
                refused_for.join(", "),
                refused_for.join(" &")
            ),
            refused: true,
        },
        Err(e) => Outcome::Failed(e),
    }
}
