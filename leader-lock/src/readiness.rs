//! Whether a replica's work can do its job: what a health endpoint's `/readyz` reports beside
//! the lock.
//!
//! The elector says whether this replica may write; the work beside it (a status writer whose
//! watches must sync first, a proxy that must listen first) says whether it is ready to. Every
//! kind of work publishes one [`Readiness`] on a `tokio::sync::watch` channel, and the health
//! endpoint reads it without knowing what the work is.
//!
//! # Examples
//!
//! ```
//! use leader_lock::readiness::Readiness;
//!
//! let (tx, rx) = tokio::sync::watch::channel(Readiness::default());
//! assert_eq!(rx.borrow().problem(), Some("the work has not started yet"));
//! tx.send_replace(Readiness::Ready);
//! assert_eq!(rx.borrow().problem(), None);
//! ```

/// Whether the work can do its job: the `/readyz` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Not yet, and why.
    Waiting(String),
    /// Ready.
    Ready,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness::Waiting("the work has not started yet".into())
    }
}

// === impl Readiness ===

impl Readiness {
    /// Why the work is not ready; `None` when it is.
    pub fn problem(&self) -> Option<&str> {
        match self {
            Readiness::Waiting(why) => Some(why),
            Readiness::Ready => None,
        }
    }
}
