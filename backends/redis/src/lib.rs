//! A LeaderLock backend (being built).
