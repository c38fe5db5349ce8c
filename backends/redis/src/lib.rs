//! A [`LeaderLock`](leader_lock::backend::LeaderLock) on Redis.
//!
//! Acquire, renew and release are Lua scripts, so each step is atomic on the server. The lock
//! value expires with the lease (server-side TTL); a fencing counter beside it is bumped on every
//! acquisition; a state key keeps the last holder's lease beyond the value's TTL, so that a value
//! deleted or evicted under a live holder is not taken as free. Every acquire, renew and release
//! is published, so followers hear every change on pub/sub and send nothing while they wait.
//! `docs/redis.md` describes the guarantees, the key layout and the value format.

mod config;
mod connection;
mod error;
mod held;
mod inspect;
mod keys;
mod knowledge;
mod lock;
mod reply;
mod scripts;
mod value;
mod watch;

pub use config::{RedisConfig, SentinelConfig, DEFAULT_KEY_PREFIX};
pub use lock::RedisLock;
