//! Elector behaviour beyond the conformance suite, on the in-memory lock and scripted locks.
//!
//! Timer logic runs under tokio's paused clock (`start_paused`): the in-memory lock measures
//! with `tokio::time::Instant`, so these tests assert exact instants and take no real time.

// `serial()`'s guard is held across awaits on purpose: it keeps the whole test, which runs on a
// current-thread runtime of its own, from overlapping another; nothing else takes it.
#![allow(clippy::await_holding_lock)]

mod candidacy;
mod leadership;
mod shutdown;
mod support;
mod wakeups;
