//! systemd's notification protocol (`Type=notify`): readiness, status, reload, stop and watchdog.
//!
//! Everything is a no-op without `NOTIFY_SOCKET`, so the same binary runs in a container.

use std::sync::Mutex;
use std::time::Duration;

use sd_notify::NotifyState;
use std::time::Instant;

/// Talks to the service manager, if there is one.
#[derive(Debug)]
pub struct Notifier {
    enabled: bool,
    watchdog: Option<Duration>,
    last_ping: Mutex<Option<Instant>>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET` and `WATCHDOG_USEC` from the environment.
    pub fn from_env() -> Self {
        Self {
            enabled: std::env::var_os("NOTIFY_SOCKET").is_some(),
            watchdog: sd_notify::watchdog_enabled(),
            last_ping: Mutex::new(None),
        }
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Self {
        Self {
            enabled: false,
            watchdog: None,
            last_ping: Mutex::new(None),
        }
    }

    fn send(&self, states: &[NotifyState<'_>]) {
        if self.enabled
            && let Err(e) = sd_notify::notify(states)
        {
            tracing::debug!(error = %e, "sd_notify failed");
        }
    }

    /// `READY=1` with a status line.
    pub fn ready(&self, status: &str) {
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// A status line (`systemctl status` shows it).
    pub fn status(&self, status: &str) {
        self.send(&[NotifyState::Status(status)]);
    }

    /// Asks the service manager to wait `extra` longer for readiness: start-up is making
    /// progress (it is waiting for Redis), it is not hung.
    pub fn extend_start_timeout(&self, extra: Duration) {
        let usec = u32::try_from(extra.as_micros()).unwrap_or(u32::MAX);
        self.send(&[NotifyState::ExtendTimeoutUsec(usec)]);
    }

    /// `RELOADING=1`; follow with [`Notifier::ready`] when done.
    pub fn reloading(&self) {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => self.send(&[NotifyState::Reloading, now]),
            Err(_) => self.send(&[NotifyState::Reloading]),
        }
    }

    /// `STOPPING=1`.
    pub fn stopping(&self) {
        self.send(&[NotifyState::Stopping, NotifyState::Status("draining")]);
    }

    /// The watchdog period systemd asked for (`WATCHDOG_USEC`), if any.
    pub fn watchdog_period(&self) -> Option<Duration> {
        self.watchdog
    }

    /// `WATCHDOG=1`, at most twice per watchdog period. Callers decide that the daemon made
    /// progress; this only rate-limits.
    pub fn watchdog(&self) {
        let Some(period) = self.watchdog else {
            return;
        };
        let now = crate::time::now();
        {
            let mut last = self.last_ping.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| now.duration_since(t) < period / 2) {
                return;
            }
            *last = Some(now);
        }
        self.send(&[NotifyState::Watchdog]);
    }
}
