//! `simulate`'s report: what it measured, as JSON (serde) or as text.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::tracker::Lag;

/// The outcome of a simulation.
#[derive(Debug, Clone, Serialize)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "a report: each flag is a separate fact, printed as such"
)]
pub(crate) struct SimulateReport {
    /// The sweep simulated.
    pub(crate) sweep: String,
    /// Its ttl, in seconds.
    pub(crate) ttl_seconds: f64,
    /// Conversations.
    pub(crate) conversations: u32,
    /// Live users per conversation at start.
    pub(crate) users_per_conversation: u32,
    /// Heartbeat period, in seconds.
    pub(crate) heartbeat_seconds: f64,
    /// How long users vanished, in seconds (less if interrupted).
    pub(crate) duration_seconds: f64,
    /// Time a zombie is given from its last heartbeat, in seconds.
    pub(crate) grace_seconds: f64,
    /// Ctrl-C stopped the run early.
    pub(crate) interrupted: bool,
    /// Times Redis stopped answering during the run (down, paused, failing over).
    pub(crate) redis_outages: u64,
    /// Restarts or failovers seen (the server's `run_id` changed).
    pub(crate) redis_restarts: u64,
    /// Times the event subscription was lost (and taken up again).
    pub(crate) subscription_gaps: u64,
    /// Heartbeat pipelines that failed (Redis away): their users' scores are as last written.
    pub(crate) failed_heartbeat_calls: u64,
    /// The run's keys were deleted at the end.
    pub(crate) keys_deleted: bool,
    /// Member heartbeats written.
    pub(crate) heartbeats: u64,
    /// Script calls that wrote them.
    pub(crate) heartbeat_calls: u64,
    /// Users who vanished without a leave.
    pub(crate) users_vanished: u64,
    /// Events for vanished users.
    pub(crate) evictions: u64,
    /// Event arrival minus (last heartbeat + ttl), on Redis's clock.
    pub(crate) eviction_lag_seconds: Option<Lag>,
    /// Conversations opened during the run (`--new-conversations`).
    pub(crate) new_conversations: u64,
    /// Of the evictions, those of the first user of a new conversation, who left right after
    /// creating its key; and their lag.
    pub(crate) new_key_evictions: u64,
    /// Event arrival minus (last heartbeat + ttl) of those evictions.
    pub(crate) new_key_eviction_lag_seconds: Option<Lag>,
    /// Events for users still heartbeating (they come back at their next heartbeat).
    pub(crate) false_evictions: u64,
    /// Events for users already announced.
    pub(crate) duplicate_events: u64,
    /// Vanished users not announced within the grace.
    pub(crate) missed_zombies: u64,
    /// Vanished users not announced yet but still within the grace (only after an interruption).
    pub(crate) pending_zombies: u64,
    /// Vanished users not announced whose data a Redis restart or failover lost: nothing left
    /// to evict. Not a failure of the sweeper.
    pub(crate) lost_in_restart: u64,
    /// Vanished users evicted (gone from Redis) while the event subscription was down: their
    /// events went out while nobody listened. Not a failure of the sweeper.
    pub(crate) unobserved_evictions: u64,
    /// Vanished users not announced that Redis could not be asked about at the end: no verdict,
    /// and the run is not judged ok.
    pub(crate) unverified_zombies: u64,
    /// Events in this run's conversations for members it never wrote, or unreadable.
    pub(crate) unexpected_events: u64,
    /// Events received in this run's conversations, of any kind.
    pub(crate) events_received: u64,
    /// Zombies were missed and not one event came: most likely no sweeper runs against this
    /// Redis (or it sweeps other keys, or publishes elsewhere).
    pub(crate) no_sweeper_answered: bool,
    /// Typing bursts, with `--typing`.
    pub(crate) typing: Option<TypingReport>,
    /// No false evictions, duplicates, missed or unverified zombies, or unexpected events.
    pub(crate) ok: bool,
}

/// The typing bursts of a simulation.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TypingReport {
    /// The typing sweep.
    pub(crate) sweep: String,
    /// Bursts that ended.
    pub(crate) bursts: u64,
    /// Keystrokes written.
    pub(crate) keystrokes: u64,
    /// Events for ended bursts.
    pub(crate) stops: u64,
    /// Event arrival minus (last keystroke + ttl).
    pub(crate) stop_lag_seconds: Option<Lag>,
    /// Events for typists still typing.
    pub(crate) false_stops: u64,
    /// Events for bursts already announced.
    pub(crate) duplicate_stops: u64,
    /// Ended bursts not announced within the typing sweep's ttl + 2 x schedule.
    pub(crate) missed_stops: u64,
    /// Ended bursts still within it (only after an interruption).
    pub(crate) pending_stops: u64,
    /// Ended bursts whose data a Redis restart or failover lost.
    pub(crate) lost_in_restart: u64,
    /// Ended bursts evicted while the event subscription was down.
    pub(crate) unobserved_stops: u64,
    /// Ended bursts Redis could not be asked about at the end.
    pub(crate) unverified_stops: u64,
}

impl SimulateReport {
    /// Whether the sweeper misbehaved: the process then exits 1.
    pub(crate) fn failed(&self) -> bool {
        !self.ok
    }
}

impl fmt::Display for SimulateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_outcome(f)?;
        self.write_trouble(f)?;
        if let Some(t) = &self.typing {
            t.write(f)?;
        }
        if !self.keys_deleted {
            writeln!(
                f,
                "  the run's keys could not be deleted; they expire on their own"
            )?;
        }
        writeln!(
            f,
            "  result               {}",
            if self.ok { "ok" } else { "FAILED" }
        )
    }
}

impl SimulateReport {
    /// What the sweeper did with the users that vanished.
    fn write_outcome(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulate {} (ttl {}): {} conversations x {} users, heartbeat {}, {:.1} s + grace {}{}",
            self.sweep,
            secs(self.ttl_seconds),
            self.conversations,
            self.users_per_conversation,
            secs(self.heartbeat_seconds),
            self.duration_seconds,
            secs(self.grace_seconds),
            if self.interrupted {
                " (interrupted)"
            } else {
                ""
            }
        )?;
        writeln!(
            f,
            "  heartbeats sent      {:>10}  ({} script calls)",
            self.heartbeats, self.heartbeat_calls
        )?;
        writeln!(f, "  users vanished       {:>10}", self.users_vanished)?;
        writeln!(f, "  evictions observed   {:>10}", self.evictions)?;
        writeln!(
            f,
            "  eviction lag         {}",
            lag_text(self.eviction_lag_seconds)
        )?;
        if self.new_conversations > 0 {
            writeln!(
                f,
                "  new conversations    {:>10}  (first users gone at once: {} evicted, lag {})",
                self.new_conversations,
                self.new_key_evictions,
                lag_text(self.new_key_eviction_lag_seconds)
            )?;
        }
        writeln!(f, "  false evictions      {:>10}", self.false_evictions)?;
        writeln!(f, "  duplicate events     {:>10}", self.duplicate_events)?;
        writeln!(f, "  missed zombies       {:>10}", self.missed_zombies)?;
        if self.no_sweeper_answered {
            writeln!(
                f,
                "  no sweeper answered: not one event came on sweep {:?}'s channel; is a sweeper running against this Redis with the same [sweeps.{}] settings?",
                self.sweep, self.sweep
            )?;
        }
        if self.pending_zombies > 0 {
            writeln!(f, "  zombies not yet due  {:>10}", self.pending_zombies)?;
        }
        Ok(())
    }

    /// What went wrong around the sweeper, so that its verdicts can be read fairly.
    fn write_trouble(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.redis_outages + self.redis_restarts + self.subscription_gaps > 0 {
            writeln!(
                f,
                "  redis outages        {:>10}  (restarts or failovers {}, subscription gaps {}, failed heartbeat calls {})",
                self.redis_outages,
                self.redis_restarts,
                self.subscription_gaps,
                self.failed_heartbeat_calls
            )?;
            writeln!(
                f,
                "  lost in a restart    {:>10}  (vanished users whose data Redis lost: nothing to evict)",
                self.lost_in_restart
            )?;
            writeln!(
                f,
                "  evicted unobserved   {:>10}  (gone while the subscription was down)",
                self.unobserved_evictions
            )?;
        }
        if self.unverified_zombies > 0 {
            writeln!(
                f,
                "  unverified zombies   {:>10}  (Redis did not answer at the end)",
                self.unverified_zombies
            )?;
        }
        writeln!(f, "  unexpected events    {:>10}", self.unexpected_events)
    }
}

impl TypingReport {
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self;
        {
            writeln!(
                f,
                "  typing ({}): bursts {}, keystrokes {}, stops {}, lag {}, false stops {}, duplicates {}, missed {}{}",
                t.sweep,
                t.bursts,
                t.keystrokes,
                t.stops,
                lag_text(t.stop_lag_seconds),
                t.false_stops,
                t.duplicate_stops,
                t.missed_stops,
                if t.pending_stops > 0 {
                    format!(", not yet due {}", t.pending_stops)
                } else {
                    String::new()
                }
            )?;
            if t.lost_in_restart + t.unobserved_stops + t.unverified_stops > 0 {
                writeln!(
                    f,
                    "    typing stops lost in a restart {}, unobserved {}, unverified {}",
                    t.lost_in_restart, t.unobserved_stops, t.unverified_stops
                )?;
            }
        }
        Ok(())
    }
}

fn secs(s: f64) -> String {
    humantime::format_duration(Duration::from_secs_f64(s)).to_string()
}

fn lag_text(lag: Option<Lag>) -> String {
    match lag {
        Some(l) => format!("p50 {:.3} s  p99 {:.3} s  max {:.3} s", l.p50, l.p99, l.max),
        None => "-".into(),
    }
}
