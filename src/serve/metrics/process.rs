//! The standard `process_*` metrics, with a CPU counter that is precise.
//!
//! The `prometheus` crate's process collector keeps `process_cpu_seconds_total` as an integer
//! (whole seconds of `utime + stime`), so a daemon that uses a few percent of a core shows 0,
//! then 1 after many minutes, and `rate()` over it is noise. Everything else it exports is right,
//! so this collector passes its families through and replaces that one with the process's CPU
//! time from `getrusage`, in microseconds.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Opts};

const CPU: &str = "process_cpu_seconds_total";

/// The process collector of the `prometheus` crate, with a fractional CPU counter.
pub(crate) struct ProcessCollector {
    inner: prometheus::process_collector::ProcessCollector,
    cpu: Counter,
}

impl ProcessCollector {
    /// The collector of this process.
    pub(crate) fn for_self() -> Self {
        Self {
            inner: prometheus::process_collector::ProcessCollector::for_self(),
            cpu: Counter::with_opts(Opts::new(
                CPU,
                "Total user and system CPU time spent in seconds.",
            ))
            .expect("valid metric"),
        }
    }
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        let mut descs: Vec<&Desc> = self
            .inner
            .desc()
            .into_iter()
            .filter(|d| d.fq_name != CPU)
            .collect();
        descs.extend(self.cpu.desc());
        descs
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families = self.inner.collect();
        families.retain(|f| f.name() != CPU);
        if let Some(total) = cpu_seconds() {
            // A counter only goes up; the process's CPU time does too.
            let past = self.cpu.get();
            if total > past {
                self.cpu.inc_by(total - past);
            }
        }
        families.extend(self.cpu.collect());
        families
    }
}

/// User plus system CPU time of this process, in seconds.
#[expect(
    unsafe_code,
    reason = "getrusage is the one call the crate makes outside Rust; procfs would read it only in ticks of 10 ms"
)]
fn cpu_seconds() -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` only writes the struct it is given, which is valid and large enough.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: it returned 0, so it filled the struct (and zeroed is a valid `rusage` anyway).
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(usage.ru_utime) + secs(usage.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_fractional_and_the_other_families_stay() {
        // Burn a little CPU, so that the counter is not 0.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(x, 1);
        let c = ProcessCollector::for_self();
        let families = c.collect();
        let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
        assert_eq!(names.iter().filter(|n| **n == CPU).count(), 1);
        assert!(
            names.contains(&"process_resident_memory_bytes"),
            "{names:?}"
        );
        let cpu = c.cpu.get();
        assert!(cpu > 0.0 && cpu.fract() != 0.0, "{cpu}");
        assert_eq!(c.desc().iter().filter(|d| d.fq_name == CPU).count(), 1);
    }
}
