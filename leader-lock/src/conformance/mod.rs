//! The conformance suite every backend runs against its real server.
//!
//! A backend implements [`Harness`] and calls [`conformance_suite!`](crate::conformance_suite)
//! in an integration test; each case becomes its own `#[tokio::test]`. The
//! [`SplitBrainChecker`] watches every contender of a case and fails it on any overlap of two
//! leaderships or any term that does not increase as it must.

mod cases;
mod checker;
mod faulty;
mod harness;
mod wait;

pub use cases::{
    crash_taken_after_expiry, graceful_release_is_prompt, mutual_exclusion,
    partitioned_holder_stops, paused_holder_stops, renew_keeps_holder,
    same_identity_never_both_lead, tampered_records, vanished_record_ends_leadership,
    vanished_record_is_not_free,
};
pub use checker::{Interval, SplitBrainChecker};
pub use faulty::{Fault, Faulty};
pub use harness::{patience, Harness, HarnessError, Protect, Tamper};
pub use wait::{wait_any_leader, wait_following, wait_leader, wait_state};

/// Generates one `#[tokio::test]` per conformance case for a harness.
///
/// `$make` is an async function (or closure) returning a value that implements [`Harness`].
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            mutual_exclusion,
            renew_keeps_holder,
            graceful_release_is_prompt,
            crash_taken_after_expiry,
            paused_holder_stops,
            partitioned_holder_stops,
            tampered_records,
            same_identity_never_both_lead,
            vanished_record_is_not_free,
            vanished_record_ends_leadership
        );
    };
    (@cases $make:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let h = ($make)().await;
                $crate::conformance::$case(&h).await;
            }
        )*
    };
}
