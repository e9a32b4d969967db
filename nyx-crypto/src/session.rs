//! ChaCha20-Poly1305 datagram sessions: explicit packet numbers, direction-separated keys, a
//! replay window, and rekeying that both sides agree on without a round trip.
//!
//! A session starts from the 32-byte secret a handshake produced ([`SessionSecret`]) and the
//! local [`Role`]. Each direction has its own key, so the two sides never use the same
//! (key, nonce) pair. Every datagram carries its key epoch and packet number in clear,
//! authenticated as associated data:
//!
//! ```text
//! 0       1                 9                        9+n         9+n+16
//! | epoch | packet number   | ciphertext (n bytes)   | Poly1305 tag |
//! |  u8   | u64 big-endian  |                        |  16 bytes    |
//! ```
//!
//! The nonce is 4 zero bytes followed by the packet number (unique per direction key, since
//! packet numbers never repeat in a session). Each direction's packet numbers start at a
//! point derived from the secret (a 62-bit number), not at zero: a packet number in clear
//! then says nothing about how long the link has run, and the numbers of two links that
//! carry the same cells are unrelated (an observer cannot line them up). The epoch byte is
//! offset the same way: it carries the low 8 bits of `epoch + offset`, with a per-direction
//! offset derived from the secret, so its value does not tell how many epochs (of 120 s by
//! default) the link has lived; that it steps by one at each rekey stays visible. A sender
//! moves to the next key epoch when its
//! [`RekeyPolicy`] budget (packets, bytes or age) is spent; the next key is derived from the
//! current one with HKDF, so the receiver derives it too when it sees the new epoch number, and
//! old keys are erased (a key taken from memory later does not decrypt earlier epochs). The
//! receiver keeps the previous key for a short grace period for reordered packets.
//!
//! Sealing and opening work in place on the caller's buffer (e.g. a pooled cell) and allocate
//! nothing. The cipher is ChaCha20-Poly1305 (`datagram_aead`): `ring`'s, faster for whole
//! datagrams on most CPUs, or [`crate::aead`]'s (nyx-chacha) where its AVX-512 IFMA backend
//! runs and is the faster; both give the same bytes.
//!
//! ```
//! use nyx_core::Timestamp;
//! use nyx_crypto::session::{Role, RekeyPolicy, Session, SessionSecret, HEADER_LEN, OVERHEAD};
//!
//! let secret = [7u8; 32]; // in real use: the output of a handshake
//! let now = Timestamp::ZERO;
//! let mut alice = Session::new(&SessionSecret::from_bytes(secret), Role::Initiator, RekeyPolicy::default(), now);
//! let mut bob = Session::new(&SessionSecret::from_bytes(secret), Role::Responder, RekeyPolicy::default(), now);
//!
//! let mut buf = [0u8; 64];
//! buf[HEADER_LEN..HEADER_LEN + 5].copy_from_slice(b"hello");
//! let len = alice.seal(now, &mut buf, 5)?;
//! assert_eq!(len, 5 + OVERHEAD);
//! let payload = bob.open(now, &mut buf[..len])?;
//! assert_eq!(&buf[payload], b"hello");
//! # Ok::<(), nyx_crypto::Error>(())
//! ```

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use hkdf::Hkdf;
use nyx_core::Timestamp;
use sha2::Sha256;
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use crate::Error;
use crate::aead::NONCE_LEN;
use crate::replay::ReplayWindow;

/// Bytes before the payload: epoch byte (1) and packet number (8).
pub const HEADER_LEN: usize = 9;
/// Bytes after the payload: the Poly1305 tag.
pub const TAG_LEN: usize = 16;
/// Total bytes a datagram adds to its payload.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

/// How many epochs ahead of its current one a receiver follows a sender. A sender that is idle
/// longer than `max_age` between packets starts a new epoch with each one, so this is how many
/// packets in a row such a low-rate sender may lose before the session cannot resume (the
/// receiver then reports `UnknownEpoch` for everything, and the owner re-handshakes). Must stay
/// below 128 so that "ahead" and "previous" epoch bytes never overlap.
const MAX_EPOCH_SKIP: u32 = 64;

/// Key-schedule labels (domain separation); see docs/protocol.md.
const LABEL_EXTRACT: &[u8] = b"nyx/v1/session";
const LABEL_I2R: &[u8] = b"nyx/v1/session/initiator->responder";
const LABEL_R2I: &[u8] = b"nyx/v1/session/responder->initiator";
const LABEL_REKEY: &[u8] = b"nyx/v1/session/rekey";
const LABEL_PN_START: &[u8] = b"nyx/v1/session/pn-start";

/// Which side of the handshake this session is on; it decides which direction key sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The side that sent the first handshake message.
    Initiator,
    /// The side that answered it.
    Responder,
}

/// The 32-byte secret a handshake agreed on. Zeroized on drop; never printed.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct SessionSecret([u8; 32]);

impl SessionSecret {
    /// Wrap a handshake's output.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        SessionSecret(bytes)
    }

    /// The secret's bytes, for key schedules inside this crate.
    pub(crate) fn expose(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionSecret(<redacted>)")
    }
}

/// When a sender moves to the next key epoch, and how long a receiver keeps the previous key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RekeyPolicy {
    /// Packets sealed under one key. Default: 2²⁴.
    pub max_packets: u64,
    /// Payload bytes sealed under one key. Default: 16 GiB.
    pub max_bytes: u64,
    /// Age of a key. Default: 120 s.
    pub max_age: Duration,
    /// How long a receiver still accepts the previous epoch after moving on. Default: 5 s.
    pub previous_key_grace: Duration,
}

impl Default for RekeyPolicy {
    fn default() -> Self {
        RekeyPolicy {
            max_packets: 1 << 24,
            max_bytes: 16 << 30,
            max_age: Duration::from_secs(120),
            previous_key_grace: Duration::from_secs(5),
        }
    }
}

/// One direction's key in one epoch.
struct EpochKey {
    raw: Zeroizing<[u8; 32]>,
    epoch: u32,
}

impl EpochKey {
    fn new(raw: [u8; 32], epoch: u32) -> Self {
        EpochKey {
            raw: Zeroizing::new(raw),
            epoch,
        }
    }

    /// The key of the following epoch: HKDF-Expand(current key, "…/rekey").
    fn next(&self) -> EpochKey {
        let mut raw = [0u8; 32];
        expand(self.raw.as_slice(), LABEL_REKEY, &mut raw);
        let key = EpochKey::new(raw, self.epoch.wrapping_add(1));
        raw.zeroize();
        key
    }
}

fn expand(prk: &[u8], info: &[u8], out: &mut [u8; 32]) {
    // A 32-byte PRK is always long enough and 32 bytes of output always fit: HKDF cannot fail.
    if let Ok(hk) = Hkdf::<Sha256>::from_prk(prk) {
        let _ = hk.expand(info, out);
    }
}

fn nonce(pn: u64) -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    n[4..].copy_from_slice(&pn.to_be_bytes());
    n
}

/// A datagram session between two parties. See the [module docs](self).
pub struct Session {
    policy: RekeyPolicy,
    /// Added (mod 256) to the send epoch to make the epoch byte on the wire.
    send_offset: u8,
    /// Subtracted (mod 256) from a received epoch byte to get the sender's epoch.
    recv_offset: u8,
    send: EpochKey,
    send_started: Timestamp,
    send_packets: u64,
    send_bytes: u64,
    next_pn: u64,
    recv: EpochKey,
    /// The previous receive key and when it stops being accepted.
    recv_previous: Option<(EpochKey, Timestamp)>,
    /// Keys of the epochs after `recv`, derived on demand (at most `MAX_EPOCH_SKIP`).
    recv_ahead: Vec<EpochKey>,
    window: ReplayWindow,
}

impl Session {
    /// A session keyed from a handshake's secret; `now` starts the first epoch's age.
    pub fn new(secret: &SessionSecret, role: Role, policy: RekeyPolicy, now: Timestamp) -> Self {
        let (mut prk, _) = Hkdf::<Sha256>::extract(Some(LABEL_EXTRACT), &secret.0);
        let mut i2r = [0u8; 32];
        let mut r2i = [0u8; 32];
        expand(prk.as_slice(), LABEL_I2R, &mut i2r);
        expand(prk.as_slice(), LABEL_R2I, &mut r2i);
        let mut starts = [0u8; 32];
        expand(prk.as_slice(), LABEL_PN_START, &mut starts);
        let start = |b: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            u64::from_be_bytes(w) >> 2
        };
        let (i2r_start, r2i_start) = (start(&starts[..8]), start(&starts[8..16]));
        let (i2r_offset, r2i_offset) = (starts[16], starts[17]);
        let (send, recv, first_pn, send_offset, recv_offset) = match role {
            Role::Initiator => (i2r, r2i, i2r_start, i2r_offset, r2i_offset),
            Role::Responder => (r2i, i2r, r2i_start, r2i_offset, i2r_offset),
        };
        let session = Session {
            policy,
            send_offset,
            recv_offset,
            send: EpochKey::new(send, 0),
            send_started: now,
            send_packets: 0,
            send_bytes: 0,
            next_pn: first_pn,
            recv: EpochKey::new(recv, 0),
            recv_previous: None,
            recv_ahead: Vec::new(),
            window: ReplayWindow::new(),
        };
        prk.as_mut_slice().zeroize();
        starts.zeroize();
        i2r.zeroize();
        r2i.zeroize();
        session
    }

    /// Seal the `len` payload bytes at `buf[HEADER_LEN..HEADER_LEN + len]` in place: writes the
    /// header before them and the tag after them, and returns the datagram's length
    /// (`len + OVERHEAD`).
    pub fn seal(&mut self, now: Timestamp, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        let total = len.saturating_add(OVERHEAD);
        if buf.len() < total {
            return Err(Error::BufferTooSmall {
                needed: total,
                capacity: buf.len(),
            });
        }
        if self.next_pn == u64::MAX {
            return Err(Error::SessionExhausted);
        }
        self.expire_previous(now);
        self.maybe_rekey(now);
        let pn = self.next_pn;
        let (header, rest) = buf.split_at_mut(HEADER_LEN);
        header[0] = (self.send.epoch as u8).wrapping_add(self.send_offset);
        header[1..].copy_from_slice(&pn.to_be_bytes());
        let (payload, rest) = rest.split_at_mut(len);
        let tag = datagram_aead::seal(&self.send.raw, nonce(pn), header, payload)?;
        rest[..TAG_LEN].copy_from_slice(&tag);
        self.next_pn += 1;
        self.send_packets += 1;
        self.send_bytes = self.send_bytes.saturating_add(len as u64);
        Ok(total)
    }

    /// Authenticate and decrypt the datagram in `buf` in place; returns where the payload is.
    /// A packet is accepted at most once; packets that fail change no state of the session,
    /// but one that fails authentication leaves its payload bytes zeroed (no unauthenticated
    /// plaintext stays behind): to try another session, restore the datagram first.
    pub fn open(&mut self, now: Timestamp, buf: &mut [u8]) -> Result<Range<usize>, Error> {
        if buf.len() < OVERHEAD {
            return Err(Error::Truncated {
                len: buf.len(),
                min: OVERHEAD,
            });
        }
        // The low 8 bits of the sender's epoch (the byte on the wire is offset).
        let epoch_byte = buf[0].wrapping_sub(self.recv_offset);
        let mut pn_bytes = [0u8; 8];
        pn_bytes.copy_from_slice(&buf[1..HEADER_LEN]);
        let pn = u64::from_be_bytes(pn_bytes);
        self.window.check(pn)?;

        self.expire_previous(now);
        let payload_end = buf.len() - TAG_LEN;
        let (header_and_payload, tag) = buf.split_at_mut(payload_end);
        let (header, payload) = header_and_payload.split_at_mut(HEADER_LEN);

        let current = self.recv.epoch;
        if epoch_byte == current as u8 {
            open_with(&self.recv, pn, header, payload, tag)?;
        } else if let Some((prev, _)) = &self.recv_previous
            && epoch_byte == prev.epoch as u8
        {
            open_with(prev, pn, header, payload, tag)?;
        } else {
            // A later epoch: derive forward (at most MAX_EPOCH_SKIP steps, each derived once
            // and kept, so forged packets naming far epochs cannot make us derive repeatedly).
            let ahead = u32::from(epoch_byte.wrapping_sub(current as u8));
            if ahead == 0 || ahead > MAX_EPOCH_SKIP {
                return Err(Error::UnknownEpoch { epoch: epoch_byte });
            }
            let ahead = ahead as usize;
            while self.recv_ahead.len() < ahead {
                let next = self.recv_ahead.last().unwrap_or(&self.recv).next();
                self.recv_ahead.push(next);
            }
            open_with(&self.recv_ahead[ahead - 1], pn, header, payload, tag)?;
            let later = self.recv_ahead.split_off(ahead);
            let mut reached = std::mem::replace(&mut self.recv_ahead, later);
            let Some(candidate) = reached.pop() else {
                return Err(Error::UnknownEpoch { epoch: epoch_byte });
            };
            drop(reached); // the skipped epochs' keys, erased
            let old = std::mem::replace(&mut self.recv, candidate);
            let grace = now.saturating_add(self.policy.previous_key_grace);
            self.recv_previous = Some((old, grace));
        }
        self.window.commit(pn);
        Ok(HEADER_LEN..payload_end)
    }

    /// The sender's current key epoch (for tests and metrics).
    pub fn send_epoch(&self) -> u32 {
        self.send.epoch
    }

    /// The receiver's current key epoch (for tests and metrics).
    pub fn recv_epoch(&self) -> u32 {
        self.recv.epoch
    }

    /// Erase the previous receive key once its grace period is over (called by every seal and
    /// open, so an active session erases it on time).
    fn expire_previous(&mut self, now: Timestamp) {
        if let Some((_, until)) = &self.recv_previous
            && now >= *until
        {
            self.recv_previous = None; // dropping zeroizes it
        }
    }

    fn maybe_rekey(&mut self, now: Timestamp) {
        let p = &self.policy;
        let spent = self.send_packets >= p.max_packets
            || self.send_bytes >= p.max_bytes
            || now.saturating_duration_since(self.send_started) >= p.max_age;
        if spent {
            self.send = self.send.next();
            self.send_started = now;
            self.send_packets = 0;
            self.send_bytes = 0;
        }
    }
}

fn open_with(
    key: &EpochKey,
    pn: u64,
    header: &[u8],
    payload: &mut [u8],
    tag: &[u8],
) -> Result<(), Error> {
    datagram_aead::open(&key.raw, nonce(pn), header, payload, tag)
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("send_epoch", &self.send.epoch)
            .field("recv_epoch", &self.recv.epoch)
            .field("next_pn", &self.next_pn)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

mod datagram_aead;
#[cfg(test)]
mod tests;
