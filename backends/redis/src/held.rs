//! The holders this client campaigns as, and the term each of them leads under.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use leader_lock::Term;

/// Who campaigns through this client and what each holds, as far as this process knows. Its
/// own lock, never held across a request; shared with the watch, which tells an acquire of
/// ours whose reply was lost by it.
#[derive(Debug, Default)]
pub(crate) struct Holds(Mutex<Campaigns>);

#[derive(Debug, Default)]
struct Campaigns {
    /// The term each holder of this process last led under: a renew expects exactly it.
    held: HashMap<String, Term>,
    /// Every holder this process campaigned as.
    candidates: HashSet<String>,
}

impl Holds {
    fn lock(&self) -> MutexGuard<'_, Campaigns> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that `me` campaigns through this client.
    pub fn candidate(&self, me: &str) {
        let mut c = self.lock();
        if !c.candidates.contains(me) {
            c.candidates.insert(me.to_string());
        }
    }

    /// The term `me` leads under, as far as this process knows.
    pub fn held(&self, me: &str) -> Option<Term> {
        self.lock().held.get(me).copied()
    }

    /// Notes that `me` leads under `term`.
    pub fn won(&self, me: &str, term: Term) {
        self.lock().held.insert(me.to_string(), term);
    }

    /// Forgets that `me` leads; returns the term it held.
    pub fn drop_held(&self, me: &str) -> Option<Term> {
        self.lock().held.remove(me)
    }

    /// True when `holder` is one of our candidates that does not know it holds `term`: an
    /// acquire whose reply was lost (timed out, connection dropped) was applied after all.
    pub fn unaware_holder(&self, holder: &str, term: Term) -> bool {
        let c = self.lock();
        c.candidates.contains(holder) && c.held.get(holder) != Some(&term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_is_unaware_of_a_term_it_did_not_win() {
        let h = Holds::default();
        h.won("me", Term(9));
        assert_eq!(h.held("me"), Some(Term(9)));
        h.candidate("me");
        assert!(!h.unaware_holder("me", Term(9)));
        assert!(h.unaware_holder("me", Term(10)));
        assert!(!h.unaware_holder("other", Term(10)));
        assert_eq!(h.drop_held("me"), Some(Term(9)));
        assert!(h.unaware_holder("me", Term(9)));
    }
}
