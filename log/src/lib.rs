//! The JSON log lines of `gateway-leader run` that machines read, and a typed reading of them.

mod event;

pub use event::*;
