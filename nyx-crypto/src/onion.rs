//! Onion cell layers for circuits of up to [`MAX_HOPS`] relays: fixed-size cells, one layer
//! per hop, removed (forward) or added (backward) in place.
//!
//! **Forward** (client to relays). The client wraps a payload for one of its hops. Every
//! relay on the way sees a cell of exactly [`CELL_LEN`] bytes:
//!
//! ```text
//! 0    8                24     25
//! | pn | tag (16)       | cmd  | rest ...                         |   CELL_LEN bytes
//!        └ Poly1305 over pn and everything after byte 24 (ChaCha20-Poly1305, nonce = pn)
//! ```
//!
//! The relay checks `pn` against its replay window, authenticates the whole cell, decrypts in
//! place and reads `cmd`: *deliver* (the payload is for it) or *forward*. To forward it drops
//! its 25 header bytes, shifts the cell left and appends 25 bytes of its own keystream, so the
//! next hop again sees `CELL_LEN` bytes that start with that hop's `pn` and tag. The client
//! predicted those appended bytes (the "filler", as in Sphinx) and covered them with the next
//! hop's tag, so each hop's tag covers every byte the hop receives: a cell modified anywhere is
//! refused by the next hop that removes a layer. A relay cannot tell how many hops follow or
//! precede it: sizes are the same at every position, and a delivering hop finds exactly
//! [`FORWARD_PAYLOAD_LEN`] payload bytes followed by bytes it cannot tell from random.
//!
//! **Backward** (relays to client). The hop with something to say (usually the exit) seals
//! [`BACKWARD_PAYLOAD_LEN`] bytes with ChaCha20-Poly1305 under a fresh counter `c`; every
//! relay towards the client prepends its own fresh counter and encrypts the rest with its
//! keystream (dropping the cell's last 8 bytes, slack the origin left for this). The client
//! removes layers one by one and, at each, checks whether that hop's tag verifies: the first
//! that does is the origin (the last hop, the usual origin, is tried first). Relays do not authenticate backward cells (the link layer already
//! does between neighbours); the client does, end to end, and rejects replays per origin.
//!
//! Counters start at a random point derived from the hop's key and count up by one per cell,
//! so the same cell carries unrelated bits at every hop. docs/protocol.md has the byte layouts,
//! the filler algebra and the argument for each property.

mod client;
#[cfg(test)]
mod tests;

use std::ops::Range;

use hkdf::Hkdf;
use sha2::Sha256;
use zeroize::Zeroizing;

pub use client::{ClientCircuit, ClientHop, Delivered};

use crate::Error;
use crate::aead::{self, NONCE_LEN};
use crate::replay::ReplayWindow;
use crate::session::SessionSecret;

/// Bytes in every onion cell, at every hop and in both directions. Sized so that a cell plus
/// a link's framing fits one QUIC DATAGRAM frame at QUIC's minimum path MTU (about 1160 bytes
/// of datagram payload at 1200 bytes of MTU).
pub const CELL_LEN: usize = 1152;
/// The most relays a circuit can have (the filler and slack are sized for it).
pub const MAX_HOPS: usize = 3;
/// Bytes of a forward layer: packet number (8), tag (16), command (1).
pub const FORWARD_LAYER_LEN: usize = 25;
/// Bytes a relay's backward layer adds: its counter.
pub const BACKWARD_LAYER_LEN: usize = 8;
/// Payload bytes a forward cell delivers, whichever hop it is for.
pub const FORWARD_PAYLOAD_LEN: usize = CELL_LEN - FORWARD_LAYER_LEN * MAX_HOPS;
/// Where the client writes a forward payload before [`ClientCircuit::wrap`].
pub const FORWARD_PAYLOAD_OFFSET: usize = FORWARD_LAYER_LEN * MAX_HOPS;
/// Where a delivering relay finds the payload after [`RelayHop::peel`].
pub const DELIVERED_OFFSET: usize = FORWARD_LAYER_LEN;
/// Payload bytes a backward cell carries.
pub const BACKWARD_PAYLOAD_LEN: usize = CELL_LEN - HEADER_LEN - BACKWARD_LAYER_LEN * (MAX_HOPS - 1);
/// Where the originating relay writes a backward payload before [`RelayHop::seal_backward`].
pub const BACKWARD_PAYLOAD_OFFSET: usize = HEADER_LEN;

/// Counter (8) and tag (16).
const HEADER_LEN: usize = 24;
const TAG_RANGE: Range<usize> = 8..HEADER_LEN;
const CMD_FORWARD: u8 = 0;
const CMD_DELIVER: u8 = 1;

const LABEL_EXTRACT: &[u8] = b"nyx/v1/onion";
const LABEL_FORWARD: &[u8] = b"nyx/v1/onion/forward";
const LABEL_BACKWARD: &[u8] = b"nyx/v1/onion/backward";
const LABEL_COUNTERS: &[u8] = b"nyx/v1/onion/counters";

/// What a relay does with a forward cell it peeled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeled {
    /// Send the cell (now the next hop's) to the next hop on the circuit.
    Forward,
    /// The cell is for this relay: the payload is `cell[range]`
    /// ([`DELIVERED_OFFSET`]`..+`[`FORWARD_PAYLOAD_LEN`]).
    Deliver(Range<usize>),
}

/// One hop's keys and counters, derived from the hop handshake's secret.
struct LayerKeys {
    forward: Zeroizing<[u8; 32]>,
    backward: Zeroizing<[u8; 32]>,
    forward_start: u64,
    backward_start: u64,
}

impl LayerKeys {
    fn derive(secret: &SessionSecret) -> Self {
        let (_, hk) = Hkdf::<Sha256>::extract(Some(LABEL_EXTRACT), secret.expose());
        let mut forward = Zeroizing::new([0u8; 32]);
        let mut backward = Zeroizing::new([0u8; 32]);
        let mut counters = [0u8; 16];
        // Outputs of at most 32 bytes always fit HKDF-SHA-256's limit.
        let _ = hk.expand(LABEL_FORWARD, forward.as_mut_slice());
        let _ = hk.expand(LABEL_BACKWARD, backward.as_mut_slice());
        let _ = hk.expand(LABEL_COUNTERS, &mut counters);
        LayerKeys {
            forward,
            backward,
            // 62 bits: counters cannot run into u64::MAX in any circuit's lifetime.
            forward_start: be64(&counters[..8]) >> 2,
            backward_start: be64(&counters[8..]) >> 2,
        }
    }
}

/// A relay's state for one circuit: it peels forward cells and adds backward layers.
pub struct RelayHop {
    forward: Zeroizing<[u8; 32]>,
    backward: Zeroizing<[u8; 32]>,
    window: ReplayWindow,
    next_backward: u64,
}

impl RelayHop {
    /// The relay's side of a hop keyed by `secret` (what the hop handshake agreed on).
    pub fn new(secret: &SessionSecret) -> Self {
        let keys = LayerKeys::derive(secret);
        RelayHop {
            forward: keys.forward,
            backward: keys.backward,
            window: ReplayWindow::new(),
            next_backward: keys.backward_start,
        }
    }

    /// Remove this relay's layer from a forward cell in place. On [`Peeled::Forward`] the
    /// buffer holds the cell for the next hop. A cell that fails (replayed, modified, not
    /// ours) changes no state and must be dropped.
    pub fn peel(&mut self, cell: &mut [u8]) -> Result<Peeled, Error> {
        check_cell(cell)?;
        let pn = be64(&cell[..8]);
        self.window.check(pn)?;
        let (head, body) = cell.split_at_mut(HEADER_LEN);
        // The keystream continues past the ciphertext: the filler the client predicted.
        let mut filler = [0u8; FORWARD_LAYER_LEN];
        aead::open_with_tail(
            &self.forward,
            &nonce(pn),
            &head[..8],
            body,
            &head[TAG_RANGE],
            &mut filler,
        )?;
        self.window.commit(pn);
        match body[0] {
            CMD_FORWARD => {
                cell.copy_within(FORWARD_LAYER_LEN.., 0);
                cell[CELL_LEN - FORWARD_LAYER_LEN..].copy_from_slice(&filler);
                Ok(Peeled::Forward)
            }
            CMD_DELIVER => Ok(Peeled::Deliver(
                DELIVERED_OFFSET..DELIVERED_OFFSET + FORWARD_PAYLOAD_LEN,
            )),
            command => Err(Error::UnknownCellCommand { command }),
        }
    }

    /// Add this relay's layer to a backward cell from the next hop, in place.
    pub fn wrap_backward(&mut self, cell: &mut [u8]) -> Result<(), Error> {
        check_cell(cell)?;
        let c = self.take_backward()?;
        cell.copy_within(..CELL_LEN - BACKWARD_LAYER_LEN, BACKWARD_LAYER_LEN);
        cell[..8].copy_from_slice(&c.to_be_bytes());
        // From block 1, as the client's check-then-strip expects.
        aead::xor_keystream_at(
            &self.backward,
            &nonce(c),
            0,
            &mut cell[BACKWARD_LAYER_LEN..],
        )?;
        Ok(())
    }

    /// Originate a backward cell: seal the [`BACKWARD_PAYLOAD_LEN`] bytes at
    /// [`BACKWARD_PAYLOAD_OFFSET`] for the client, in place.
    pub fn seal_backward(&mut self, cell: &mut [u8]) -> Result<(), Error> {
        check_cell(cell)?;
        let c = self.take_backward()?;
        cell[..8].copy_from_slice(&c.to_be_bytes());
        let (head, body) = cell.split_at_mut(HEADER_LEN);
        let (payload, slack) = body.split_at_mut(BACKWARD_PAYLOAD_LEN);
        // The slack that relays towards the client drop: zeros, encrypted by the keystream
        // that follows the payload's.
        slack.fill(0);
        let tag = aead::seal_with_tail(&self.backward, &nonce(c), &head[..8], payload, slack)?;
        head[TAG_RANGE].copy_from_slice(&tag);
        Ok(())
    }

    fn take_backward(&mut self) -> Result<u64, Error> {
        if self.next_backward == u64::MAX {
            return Err(Error::SessionExhausted);
        }
        let c = self.next_backward;
        self.next_backward += 1;
        Ok(c)
    }
}

impl std::fmt::Debug for RelayHop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayHop")
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

fn check_cell(cell: &[u8]) -> Result<(), Error> {
    if cell.len() != CELL_LEN {
        return Err(Error::BadLength {
            what: "onion cell",
            expected: CELL_LEN,
            got: cell.len(),
        });
    }
    Ok(())
}

fn nonce(counter: u64) -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    n
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}
