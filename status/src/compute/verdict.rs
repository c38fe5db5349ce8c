//! A condition's outcome before it is stamped with a generation, shared by every kind's pass.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::desired::condition;

/// A condition's status, reason and message, before it is stamped with a generation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Verdict {
    /// The condition's status.
    pub ok: bool,
    /// The condition's reason.
    pub reason: &'static str,
    /// The condition's message.
    pub message: String,
}

impl Verdict {
    /// A True verdict.
    pub(crate) fn yes(reason: &'static str, message: impl Into<String>) -> Self {
        Verdict {
            ok: true,
            reason,
            message: message.into(),
        }
    }

    /// A False verdict.
    pub(crate) fn no(reason: &'static str, message: impl Into<String>) -> Self {
        Verdict {
            ok: false,
            reason,
            message: message.into(),
        }
    }

    /// The condition of `type_` this verdict describes.
    pub(crate) fn condition(&self, type_: &str, generation: i64) -> Condition {
        condition(type_, self.ok, self.reason, &*self.message, generation)
    }
}
