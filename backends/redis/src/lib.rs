//! A [`LeaderLock`](leader_lock::LeaderLock) on Redis.
//!
//! Acquire, renew and release are Lua scripts, so each step is atomic on the server. The lock
//! value expires with the lease (server-side TTL); a fencing counter beside it is bumped on every
//! acquisition; followers learn of releases by pub/sub and wake when the TTL runs out.
//! `docs/redis.md` describes the guarantees, the key layout and the value format.

mod config;
mod keys;
mod lock;
mod scripts;
mod value;

pub use config::{RedisConfig, DEFAULT_KEY_PREFIX};
pub use lock::RedisLock;
