//! The acquire script's reply (`scripts.rs`, "Acquire or renew"), read once into what it says.

use std::time::Duration;

use leader_lock::backend::LockError;
use leader_lock::Term;
use redis::Value;

use crate::value::{bytes, int};

/// What the acquire script answered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// `{1, term}`: we lead under this term.
    Leader(Term),
    /// `{2, value, pttl}`: the key holds another's record (or a foreign value), with this TTL.
    Taken { raw: Vec<u8>, pttl: i64 },
    /// `{3}`: we held the lock, but its key is gone: step down.
    Gone,
    /// `{4, wait_ms}`: the server restarted less than a lease ago.
    Restarted(Duration),
    /// `{5, wait_ms}`: the record vanished without a release; its holder may still believe it
    /// is valid for this long.
    Vanished(Duration),
    /// `{6}`: gone without a trace on the server, and the client asked: it counts a lease.
    Traceless,
}

impl AcquireReply {
    /// Reads a reply; anything the script does not answer is malformed.
    pub(crate) fn parse(reply: &[Value]) -> Result<Self, LockError> {
        let malformed = || {
            LockError::malformed(format!(
                "unexpected reply from the acquire script: {reply:?}"
            ))
        };
        let unsigned = |i: usize| {
            reply
                .get(i)
                .and_then(int)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(malformed)
        };
        Ok(match reply.first().and_then(int) {
            Some(1) => AcquireReply::Leader(Term(unsigned(1)?)),
            Some(2) => AcquireReply::Taken {
                raw: reply.get(1).and_then(bytes).ok_or_else(malformed)?.to_vec(),
                pttl: reply.get(2).and_then(int).ok_or_else(malformed)?,
            },
            Some(3) => AcquireReply::Gone,
            Some(4) => AcquireReply::Restarted(Duration::from_millis(unsigned(1)?)),
            Some(5) => AcquireReply::Vanished(Duration::from_millis(unsigned(1)?)),
            Some(6) => AcquireReply::Traceless,
            _ => return Err(malformed()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_of_the_script_is_read_and_nothing_else() {
        let int = Value::Int;
        let parse = |v: Vec<Value>| AcquireReply::parse(&v);
        assert_eq!(
            parse(vec![int(1), int(7)]).ok(),
            Some(AcquireReply::Leader(Term(7)))
        );
        assert_eq!(
            parse(vec![int(2), Value::BulkString(b"x".to_vec()), int(-1)]).ok(),
            Some(AcquireReply::Taken {
                raw: b"x".to_vec(),
                pttl: -1
            })
        );
        assert_eq!(parse(vec![int(3)]).ok(), Some(AcquireReply::Gone));
        assert_eq!(
            parse(vec![int(5), int(250)]).ok(),
            Some(AcquireReply::Vanished(Duration::from_millis(250)))
        );
        for bad in [
            vec![],
            vec![int(1)],
            vec![int(1), int(-3)],
            vec![int(2), int(5)],
            vec![int(4), int(-1)],
            vec![int(7)],
        ] {
            assert!(
                matches!(parse(bad.clone()), Err(LockError::Malformed { .. })),
                "{bad:?}"
            );
        }
    }
}
