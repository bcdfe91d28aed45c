//! What the unit tests share: a clock of their own. The rules never read a clock; the tests
//! move one by hand, as tokio's paused clock would move, one per test (each test runs on a
//! thread of its own).

use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    static NOW: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The test's instant now: where its clock was started, moved on by [`advance`].
pub(crate) fn now() -> Instant {
    NOW.with(|now| {
        *now.get().get_or_insert_with(|| {
            #[expect(
                clippy::disallowed_methods,
                reason = "the one real reading a test needs: the base its own clock counts from"
            )]
            Instant::now()
        })
    })
}

/// Moves the test's clock on by `by`.
pub(crate) fn advance(by: Duration) {
    let later = now() + by;
    NOW.with(|now| now.set(Some(later)));
}
