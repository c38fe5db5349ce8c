//! The conformance suite every backend runs against its real server.
//!
//! A backend implements [`Harness`] and calls [`conformance_suite!`](crate::conformance_suite)
//! in an integration test; each case becomes its own `#[tokio::test]`. A program that runs the
//! cases itself (all at once, say) takes them from [`cases`]. The [`SplitBrainChecker`] watches
//! every contender of a case and fails it on any overlap of two leaderships or any term that
//! does not increase as it must.

use futures::future::BoxFuture;

mod cases;
mod checker;
mod faulty;
mod harness;
mod wait;

pub use cases::*;
pub use checker::{Interval, SplitBrainChecker};
pub use faulty::{Fault, Faulty};
pub use harness::{patience, Harness, HarnessError, Protect, Tamper};
pub use wait::{wait_any_leader, wait_following, wait_leader, wait_state};

/// One case of the suite: its name and how to run it on a harness. A case fails by panicking,
/// as a test does.
pub struct Case<H: ?Sized> {
    /// The case's name, as its function and its `#[tokio::test]` are named.
    pub name: &'static str,
    /// Runs the case on `h`.
    pub run: for<'a> fn(&'a H) -> BoxFuture<'a, ()>,
}

/// Every case of the suite, in the order [`conformance_suite!`](crate::conformance_suite)
/// generates their tests: the same list, so a new case cannot be left out of either.
///
/// # Examples
///
/// ```no_run
/// # async fn run<H: leader_lock::conformance::Harness + 'static>(harness: std::sync::Arc<H>) {
/// for case in leader_lock::conformance::cases::<H>() {
///     let h = harness.clone();
///     let run = case.run;
///     tokio::spawn(async move { run(&h).await });
/// }
/// # }
/// ```
pub fn cases<H: Harness + ?Sized>() -> Vec<Case<H>> {
    crate::conformance_suite! { @each list [] }
}

/// Generates one `#[tokio::test]` per conformance case for a harness.
///
/// `$make` is an async function (or closure) returning a value that implements [`Harness`].
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite! { @each tests [$make] }
    };
    // The one list of the suite's cases; the tests above and `conformance::cases` both expand it.
    (@each $then:ident [$($arg:tt)*]) => {
        $crate::conformance_suite! { @$then [$($arg)*]
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
        }
    };
    (@tests [$make:expr] $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let h = ($make)().await;
                $crate::conformance::$case(&h).await;
            }
        )*
    };
    (@list [] $($case:ident),*) => {
        vec![$(
            $crate::conformance::Case {
                name: stringify!($case),
                run: |h| Box::pin($crate::conformance::$case(h)),
            }
        ),*]
    };
}
