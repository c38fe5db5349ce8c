//! The names of the lock's keys in etcd: the lock key, its release marker, and the prefix under
//! which candidates register.

/// The release marker's key: the lock key and this suffix. Neither key prefixes nor lock names
/// may contain `#`, so it is never another lock's key.
const MARKER_SUFFIX: &str = "#released";

/// The prefix of the candidates' registrations under the lock key (`#` again keeps it apart
/// from other locks' keys).
const CANDIDATES_SUFFIX: &str = "#candidates/";

/// The lock's key names; fixed at connect, so no lock.
pub(crate) struct Keys {
    /// The lock key, `<prefix><name>`.
    pub(crate) key: Vec<u8>,
    /// The release marker, `<key>#released`: the term last released gracefully.
    pub(crate) marker: Vec<u8>,
    /// The prefix of the candidates' registrations, `<key>#candidates/`.
    pub(crate) candidates: Vec<u8>,
    /// The lock key as text, for messages.
    pub(crate) text: String,
}

impl Keys {
    /// The keys of lock `name` under `prefix`.
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let text = format!("{prefix}{name}");
        Keys {
            key: text.clone().into_bytes(),
            marker: format!("{text}{MARKER_SUFFIX}").into_bytes(),
            candidates: format!("{text}{CANDIDATES_SUFFIX}").into_bytes(),
            text,
        }
    }

    /// The key of `holder`'s candidacy.
    pub(crate) fn candidacy(&self, holder: &str) -> Vec<u8> {
        let mut key = self.candidates.clone();
        key.extend_from_slice(holder.as_bytes());
        key
    }

    /// The end of the range a watch covers: the lock key and the registrations, which sort
    /// right after it (the byte after `/` ends the candidates' prefix).
    pub(crate) fn watch_end(&self) -> Vec<u8> {
        let mut end = self.candidates.clone();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        end
    }
}
