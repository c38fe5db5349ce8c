/// The keys and channels of one lock, all under `{prefix}:{<name>}:`.
///
/// The lock name is the cluster hash tag, so every key of a lock lands in one slot (scripts may
/// only touch keys of one slot). Bytes outside `[A-Za-z0-9._-]` are percent-encoded, so braces,
/// colons or spaces in a name cannot break the tag or collide with another lock's keys.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// The value: who holds the lock, under which term (expires with the lease).
    pub holder: String,
    /// The fencing counter (no TTL; never reset by us).
    pub term: String,
    /// The last holder's lease as the server saw it: holder, term, lease and the server time of
    /// its last renew, or its release (no TTL). It tells a record that vanished while its holder
    /// may still believe it valid from one that expired or was released.
    pub state: String,
    /// Pub/sub channel of acquire and release messages.
    pub events: String,
}

pub(crate) fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Keys {
    pub fn new(prefix: &str, name: &str) -> Self {
        let base = format!("{prefix}:{{{}}}", escape(name));
        Keys {
            holder: format!("{base}:holder"),
            term: format!("{base}:term"),
            state: format!("{base}:state"),
            events: format!("{base}:events"),
        }
    }

    /// The keyspace-notification channel of the holder key in database `db`.
    pub fn keyspace(&self, db: i64) -> String {
        format!("__keyspace@{db}__:{}", self.holder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let k = Keys::new("gateway-leader", "gateway-leader-lock");
        assert_eq!(k.holder, "gateway-leader:{gateway-leader-lock}:holder");
        assert_eq!(k.term, "gateway-leader:{gateway-leader-lock}:term");
        assert_eq!(k.state, "gateway-leader:{gateway-leader-lock}:state");
        assert_eq!(k.events, "gateway-leader:{gateway-leader-lock}:events");
        assert_eq!(
            k.keyspace(0),
            "__keyspace@0__:gateway-leader:{gateway-leader-lock}:holder"
        );
    }

    #[test]
    fn any_name_is_safe() {
        let k = Keys::new("p", "a}b{c: d%");
        assert_eq!(k.holder, "p:{a%7Db%7Bc%3A%20d%25}:holder");
        assert_ne!(Keys::new("p", "a:b").holder, Keys::new("p", "a%3Ab").holder);
        assert_eq!(escape("ümlaut"), "%C3%BCmlaut");
    }
}
