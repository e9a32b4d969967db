//! A sliding anti-replay window over 64-bit packet numbers, O(1) per packet.
//!
//! The window remembers which of the last [`WINDOW`] packet numbers below the highest one
//! accepted have been seen, in a ring of 64-bit words (the scheme of RFC 6479). Anything
//! older than that is refused as too old, so a packet is accepted at most once **for the whole
//! life of the session**, not just while it is inside the window. Checking and committing are
//! separate so that only packets that authenticated move the window: a forged packet number
//! cannot push genuine packets out.

use crate::Error;

const WORDS: usize = 32;
/// How far below the highest accepted packet number a packet may still be accepted.
/// (One word of the ring is reserved so that advancing never clears a live bit.)
pub const WINDOW: u64 = ((WORDS - 1) * 64) as u64;

/// The replay state of one receiving direction.
#[derive(Clone)]
pub struct ReplayWindow {
    bits: [u64; WORDS],
    /// Highest accepted packet number + 1; 0 while nothing has been accepted.
    top: u64,
}

impl ReplayWindow {
    /// A window that has accepted nothing.
    pub const fn new() -> Self {
        ReplayWindow {
            bits: [0; WORDS],
            top: 0,
        }
    }

    /// Whether `pn` may be accepted: new, and neither seen before nor too old. Changes nothing.
    #[inline]
    pub fn check(&self, pn: u64) -> Result<(), Error> {
        // u64::MAX is never sent (sessions stop before it); refusing it keeps `top` exact.
        if pn == u64::MAX {
            return Err(Error::Replayed { pn });
        }
        if pn >= self.top {
            return Ok(());
        }
        let highest = self.top - 1;
        if highest - pn >= WINDOW {
            return Err(Error::TooOld { pn, highest });
        }
        let (word, bit) = position(pn);
        if self.bits[word] & bit != 0 {
            return Err(Error::Replayed { pn });
        }
        Ok(())
    }

    /// Record `pn` as accepted. Call only after [`check`](Self::check) passed and the packet
    /// authenticated.
    #[inline]
    pub fn commit(&mut self, pn: u64) {
        if pn >= self.top {
            // Clear the words the window slides onto: those after the previous highest's word,
            // up to and including pn's word (at most the whole ring). A fresh window is clear.
            let to = pn / 64;
            if self.top > 0 {
                let from = (self.top - 1) / 64 + 1;
                if to >= from {
                    let n = (to - from).saturating_add(1).min(WORDS as u64);
                    for i in 0..n {
                        self.bits[((from + i) % WORDS as u64) as usize] = 0;
                    }
                }
            }
            self.top = pn.saturating_add(1);
        }
        let (word, bit) = position(pn);
        self.bits[word] |= bit;
    }

    /// The highest packet number accepted so far.
    pub fn highest(&self) -> Option<u64> {
        self.top.checked_sub(1)
    }
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::new()
    }
}

#[inline]
fn position(pn: u64) -> (usize, u64) {
    (((pn / 64) % WORDS as u64) as usize, 1u64 << (pn % 64))
}

impl std::fmt::Debug for ReplayWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayWindow")
            .field("highest", &self.highest())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn accept(w: &mut ReplayWindow, pn: u64) -> Result<(), Error> {
        w.check(pn)?;
        w.commit(pn);
        Ok(())
    }

    /// The original NyxNet window forgot packets once 64 newer ones had arrived, so old packets
    /// could be replayed. This one refuses them for good.
    #[test]
    fn old_packets_stay_refused_after_the_window_slides() {
        let mut w = ReplayWindow::new();
        for pn in 0..10_000 {
            accept(&mut w, pn).unwrap();
        }
        for old in [0, 5, 63, 64, 65, 1000, 9_999 - WINDOW] {
            assert_eq!(
                accept(&mut w, old),
                Err(Error::TooOld {
                    pn: old,
                    highest: 9_999
                })
            );
        }
        for recent in [9_990, 9_999, 9_999 - WINDOW + 1] {
            assert_eq!(accept(&mut w, recent), Err(Error::Replayed { pn: recent }));
        }
        assert_eq!(accept(&mut w, 10_000), Ok(()));
    }

    #[test]
    fn out_of_order_within_the_window_is_accepted_once() {
        let mut w = ReplayWindow::new();
        accept(&mut w, 5000).unwrap();
        for pn in (5000 - WINDOW + 1..5000).rev().step_by(7) {
            assert_eq!(accept(&mut w, pn), Ok(()));
            assert_eq!(accept(&mut w, pn), Err(Error::Replayed { pn }));
        }
        assert_eq!(w.highest(), Some(5000));
    }

    /// Advancing within the highest packet's own word must not clear the word after it, which
    /// still holds packets inside the window (63 is 1921 behind 1984).
    #[test]
    fn advancing_within_a_word_keeps_the_oldest_word() {
        let mut w = ReplayWindow::new();
        accept(&mut w, 63).unwrap();
        accept(&mut w, 64 * 31).unwrap();
        accept(&mut w, 64 * 31 + 1).unwrap();
        assert_eq!(accept(&mut w, 63), Err(Error::Replayed { pn: 63 }));
    }

    #[test]
    fn big_jumps_clear_stale_bits() {
        let mut w = ReplayWindow::new();
        accept(&mut w, 3).unwrap();
        // Jump far ahead: pn 3 + k·2048 maps to the same bit, which must not read as seen.
        accept(&mut w, 3 + 64 * WORDS as u64 * 10).unwrap();
        let same_slot = 3 + 64 * WORDS as u64 * 10 - 64 * WORDS as u64;
        assert!(matches!(
            accept(&mut w, same_slot),
            Err(Error::TooOld { .. })
        ));
        let near = 3 + 64 * WORDS as u64 * 10 - 100;
        assert_eq!(accept(&mut w, near), Ok(()));
        assert_eq!(accept(&mut w, u64::MAX - 1), Ok(()));
        assert!(accept(&mut w, u64::MAX - 1).is_err());
        assert_eq!(
            accept(&mut w, u64::MAX),
            Err(Error::Replayed { pn: u64::MAX })
        );
    }

    proptest! {
        /// Against a model that remembers every packet ever accepted: the window never accepts
        /// a packet twice, and accepts every new packet within `WINDOW` of the highest.
        #[test]
        fn matches_a_model_that_never_forgets(
            steps in proptest::collection::vec((any::<bool>(), 0u64..6000, any::<bool>()), 1..600)
        ) {
            let mut w = ReplayWindow::new();
            let mut seen: HashSet<u64> = HashSet::new();
            let mut highest: Option<u64> = None;
            let mut base = 0u64;
            for (jump, offset, forged) in steps {
                if jump { base += offset; }
                let pn = base.saturating_sub(offset / 2);
                let expect_ok = !seen.contains(&pn)
                    && highest.is_none_or(|h| pn > h || h - pn < WINDOW);
                let got = w.check(pn);
                prop_assert_eq!(got.is_ok(), expect_ok, "pn {} highest {:?}", pn, highest);
                // A packet that fails authentication is checked but never committed.
                if got.is_ok() && !forged {
                    w.commit(pn);
                    seen.insert(pn);
                    highest = Some(highest.map_or(pn, |h| h.max(pn)));
                }
                prop_assert_eq!(w.highest(), highest);
            }
        }
    }
}
