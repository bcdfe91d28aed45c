//! The I/O of the keyspace-notification subscription: subscribing, proving it still delivers,
//! and looking at the server's `notify-keyspace-events` (turning them on where allowed).

use std::sync::Arc;

use presence_sweeper_redis::{Error, Node, Store};
use presence_sweeper_rules::keyspace::{
    Availability, Channels, Published, UNSAID, channel_prefix, new_key_channel,
};
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
                    let (config, choices) = look(node, &settings).await;
                    // The server now publishes on other channels than those listened to, or
                    // newly on cheaper ones (an operator changed the flags, or turned on what
                    // was off when both were listened to): subscribe again, walking what went
                    // unheard. A subscription that fell back to the keyspace channels because
                    // the ACL refused the new keys' stays while the server publishes both
                    // (subscribing again would only be refused again), and one that listens to
                    // the server's first choice stays as it is.
                    let first = choices.first().copied();
                    if config == Config::On
                        && first != Some(sub.channels())
                        && (first != Some(sub.preferred()) || !choices.contains(&sub.channels()))
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
/// Says which channels to listen to, in order of preference ([`Published::choices`]): those
/// the server publishes on, or both where it will not say or publishes neither yet ([`UNSAID`]).
async fn look(mut node: Node, settings: &LoopSettings) -> (Config, Vec<Channels>) {
    let unsaid = || UNSAID.to_vec();
    let look = async {
        match keyspace::availability(&mut node).await? {
            Availability::On(published) => Ok((Config::On, published.choices())),
            Availability::Off(flags) if settings.tracking.configure_notifications => {
                let set = keyspace::enable(&mut node, &flags).await?;
                tracing::info!(node = %node.id(), flags = %set, "turned keyspace notifications on (tracking.configure_notifications)");
                let choices = Published::of(&set).map_or_else(unsaid, Published::choices);
                Ok((Config::On, choices))
            }
            Availability::Off(flags) => Ok((Config::Off(flags), unsaid())),
            Availability::Unknown(why) => Ok::<_, Error>((Config::Refused(why), unsaid())),
        }
    };
    match tokio::time::timeout(settings.command_timeout, look).await {
        Ok(Ok(looked)) => looked,
        Ok(Err(e)) => {
            tracing::debug!(node = %node.id(), error = %e, "could not look at notify-keyspace-events");
            (Config::NoAnswer, unsaid())
        }
        Err(_) => (Config::NoAnswer, unsaid()),
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
    let (config, choices) = match look(node.clone(), &settings).await {
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
    // the new keys' where the keyspace's also serve. So each choice is tried with the canary
    // and without, in order, until the ACL allows one.
    let canary = format!("{}{}*", channel_prefix(node.db()), canary::PREFIX);
    let preferred = choices.first().copied().unwrap_or(Channels::Both);
    let tries: Vec<(Vec<String>, Channels)> = choices
        .iter()
        .flat_map(|&listening| {
            let mut these = match listening.keyspace() {
                true => patterns.clone(),
                false => Vec::new(),
            };
            if listening.new_keys() {
                these.push(new_key_channel(node.db()));
            }
            let with_canary = these.iter().cloned().chain([canary.clone()]).collect();
            [(with_canary, listening), (these, listening)]
        })
        .collect();
    // Where all are refused, the warning names the channels to grant: the first choice's, or
    // the sweeps' own where the server will not say which it publishes.
    let mut refused_for: Option<Vec<String>> = None;
    let attempt = async {
        let timeout = settings.command_timeout;
        let mut refused = None;
        for (these, listening) in tries {
            let pubsub = store.subscriber(&node).await?;
            match Subscription::start(pubsub, node.db(), &these, timeout).await {
                Ok(sub) => return Ok(sub.listening_to(listening, preferred)),
                Err(e @ Error::Permission { .. }) => {
                    refused = Some(e);
                    if refused_for.is_none() && listening != Channels::Both {
                        refused_for = Some(these.into_iter().filter(|p| *p != canary).collect());
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(refused.expect("tried"))
    };
    match attempt.await {
        Ok(sub) => {
            let channel = new_key_channel(node.db());
            match (preferred, sub.channels()) {
                (Channels::NewKeys, Channels::Keyspace) => tracing::warn!(
                    node = %node.id(),
                    "the Redis user may not PSUBSCRIBE {channel}: listening to the sweeps' keyspace channels instead, which hear every heartbeat (add &{channel} to its ACL)"
                ),
                // Where the server will not say what it publishes, the keyspace channels may
                // well be what it does: notices arriving tell.
                (Channels::Both, Channels::Keyspace) => tracing::info!(
                    node = %node.id(),
                    "the Redis user may not PSUBSCRIBE {channel}: listening to the sweeps' keyspace channels alone, which a server that publishes new keys alone (En) never uses (add &{channel} to its ACL)"
                ),
                _ => {}
            }
            Outcome::Subscribed(Box::new(sub), config)
        }
        Err(Error::Permission { .. }) => {
            let refused_for = refused_for.unwrap_or_default();
            Outcome::Unavailable {
                why: format!(
                    "the Redis user may not PSUBSCRIBE {} (add each to its ACL as a channel: &{})",
                    refused_for.join(", "),
                    refused_for.join(" &")
                ),
                refused: true,
            }
        }
        Err(e) => Outcome::Failed(e),
    }
}
