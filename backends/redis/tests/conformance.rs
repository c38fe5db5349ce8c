//! The backend-independent conformance suite against a real redis-server.

mod common;

async fn redis() -> common::Redis {
    common::Redis::start().await
}

leader_lock::conformance_suite!(redis);
