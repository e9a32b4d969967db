//! The client's side of a circuit: wrap forward cells for any of its hops, unwrap backward
//! cells from any of them.

use std::ops::Range;

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::{
    BACKWARD_LAYER_LEN, BACKWARD_PAYLOAD_LEN, CELL_LEN, CMD_DELIVER, CMD_FORWARD,
    FORWARD_LAYER_LEN, FORWARD_PAYLOAD_LEN, FORWARD_PAYLOAD_OFFSET, HEADER_LEN, LayerKeys,
    MAX_HOPS, TAG_RANGE, be64, check_cell, nonce,
};
use crate::Error;
use crate::aead;
use crate::replay::ReplayWindow;
use crate::session::SessionSecret;

/// Filler bytes the client predicts: at most one forward layer per hop before the last.
const FILLER_MAX: usize = FORWARD_LAYER_LEN * (MAX_HOPS - 1);

/// The client's keys and counters for one hop of a circuit.
pub struct ClientHop {
    forward: Zeroizing<[u8; 32]>,
    backward: Zeroizing<[u8; 32]>,
    next_forward: u64,
    window: ReplayWindow,
}

impl ClientHop {
    /// The client's side of a hop keyed by `secret` (what the hop handshake agreed on).
    pub fn new(secret: &SessionSecret) -> Self {
        let keys = LayerKeys::derive(secret);
        ClientHop {
            forward: keys.forward,
            backward: keys.backward,
            next_forward: keys.forward_start,
            window: ReplayWindow::new(),
        }
    }
}

impl std::fmt::Debug for ClientHop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHop")
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// A backward cell the client unwrapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The hop that sent it (0 = the first relay).
    pub hop: usize,
    /// Where the payload is in the cell ([`BACKWARD_PAYLOAD_LEN`] bytes).
    pub payload: Range<usize>,
}

/// The client's view of one circuit: its hops in path order.
pub struct ClientCircuit {
    hops: Vec<ClientHop>,
    /// Keys the random-looking padding of cells for hops before the last possible one.
    pad_key: Zeroizing<[u8; 32]>,
}

impl ClientCircuit {
    /// An empty circuit (hops are added as the circuit is extended). Draws a padding key from
    /// the operating system.
    pub fn new() -> Result<Self, Error> {
        let mut pad_key = Zeroizing::new([0u8; 32]);
        getrandom::fill(pad_key.as_mut_slice()).map_err(|e| Error::Random {
            reason: e.to_string(),
        })?;
        Ok(Self::with_pad_key(pad_key))
    }

    /// [`new`](Self::new) with an explicit padding key, for reproducible test vectors
    /// (feature `test-vectors`).
    #[cfg(any(test, feature = "test-vectors"))]
    pub fn new_with(pad_key: [u8; 32]) -> Self {
        Self::with_pad_key(Zeroizing::new(pad_key))
    }

    fn with_pad_key(pad_key: Zeroizing<[u8; 32]>) -> Self {
        ClientCircuit {
            hops: Vec::with_capacity(MAX_HOPS),
            pad_key,
        }
    }

    /// Append the next hop (after its handshake finished).
    pub fn push(&mut self, hop: ClientHop) -> Result<(), Error> {
        if self.hops.len() == MAX_HOPS {
            return Err(Error::TooManyHops { max: MAX_HOPS });
        }
        self.hops.push(hop);
        Ok(())
    }

    /// How many hops the circuit has.
    pub fn len(&self) -> usize {
        self.hops.len()
    }

    /// Whether the circuit has no hop yet.
    pub fn is_empty(&self) -> bool {
        self.hops.is_empty()
    }

    /// Wrap the [`FORWARD_PAYLOAD_LEN`] bytes at [`FORWARD_PAYLOAD_OFFSET`] of `cell` for hop
    /// `dest` (0 = the first relay), in place: one layer for each hop up to `dest`.
    pub fn wrap(&mut self, dest: usize, cell: &mut [u8]) -> Result<(), Error> {
        check_cell(cell)?;
        if dest >= self.hops.len() {
            return Err(Error::NoSuchHop {
                hop: dest,
                hops: self.hops.len(),
            });
        }
        let hops = &mut self.hops[..=dest];
        if hops.iter().any(|h| h.next_forward == u64::MAX) {
            return Err(Error::SessionExhausted);
        }
        let d = hops.len();
        let mut pns = [0u64; MAX_HOPS];
        for (pn, hop) in pns.iter_mut().zip(hops.iter()) {
            *pn = hop.next_forward;
        }

        // The destination's plaintext starts at layer d's command byte; a hop before the last
        // possible one gets the payload moved up and random-looking padding after it.
        let start = FORWARD_LAYER_LEN * d;
        if d < MAX_HOPS {
            cell.copy_within(
                FORWARD_PAYLOAD_OFFSET..FORWARD_PAYLOAD_OFFSET + FORWARD_PAYLOAD_LEN,
                start,
            );
            let pad = &mut cell[start + FORWARD_PAYLOAD_LEN..];
            pad.fill(0);
            let mut n = nonce(pns[d - 1]);
            n[0] = d as u8; // the pad key serves every hop: keep the nonces apart
            aead::xor_keystream_at(&self.pad_key, &n, 0, pad)?;
        }

        // Fillers: filler[i] is what hops 0..i append while forwarding (i * 25 bytes), the
        // tail of the cell hop i receives, which hop i's tag must cover.
        let mut filler = [[0u8; FILLER_MAX]; MAX_HOPS];
        for i in 1..d {
            let (done, rest) = filler.split_at_mut(i);
            let next = &mut rest[0][..FORWARD_LAYER_LEN * i];
            next[..FORWARD_LAYER_LEN * (i - 1)]
                .copy_from_slice(&done[i - 1][..FORWARD_LAYER_LEN * (i - 1)]);
            // Hop i-1 decrypts its ciphertext and 25 appended zeros with one keystream; the
            // last 25 * i bytes of that are at positions CELL_LEN + 1 - 25 i .. CELL_LEN + 1.
            let at = (CELL_LEN + 1 - FORWARD_LAYER_LEN * i) as u64;
            aead::xor_keystream_at(&hops[i - 1].forward, &nonce(pns[i - 1]), at, next)?;
        }

        // Layers from the destination outwards; layer i sits at offset 25 i.
        for i in (0..d).rev() {
            let off = FORWARD_LAYER_LEN * i;
            cell[off..off + 8].copy_from_slice(&pns[i].to_be_bytes());
            cell[off + HEADER_LEN] = if i + 1 == d { CMD_DELIVER } else { CMD_FORWARD };
            // The tag covers the ciphertext and the filler hop i will find after it, in the
            // pass that encrypts.
            let (head, body) = cell[off..].split_at_mut(HEADER_LEN);
            let tail = &filler[i][..FORWARD_LAYER_LEN * i];
            let tag =
                aead::seal_with_suffix(&hops[i].forward, &nonce(pns[i]), &head[..8], body, tail)?;
            head[TAG_RANGE].copy_from_slice(&tag);
        }

        for hop in hops.iter_mut() {
            hop.next_forward += 1;
        }
        Ok(())
    }

    /// Remove the layers of a backward cell in place and find which hop sent it. A cell no
    /// hop authenticates is [`Error::AuthenticationFailed`], a repeated one
    /// [`Error::Replayed`]; either way the buffer is left partly decrypted and must be dropped.
    ///
    /// Nearly every backward cell comes from the last hop (the exit's data), so that hop is
    /// tried first: the layers before it are stripped and its tag checked while its payload
    /// is decrypted, in one pass. If that tag fails, the strips are undone and the hops are
    /// tried in path order, each tag checked before its layer is stripped.
    pub fn unwrap(&mut self, cell: &mut [u8]) -> Result<Delivered, Error> {
        check_cell(cell)?;
        let Some(last) = self.hops.len().checked_sub(1) else {
            return Err(Error::AuthenticationFailed);
        };
        if let Some(delivered) = self.unwrap_from_last(last, cell)? {
            return Ok(delivered);
        }
        let mut off = 0;
        for (i, hop) in self.hops[..last].iter_mut().enumerate() {
            let c = be64(&cell[off..off + 8]);
            let payload = off + HEADER_LEN..off + HEADER_LEN + BACKWARD_PAYLOAD_LEN;
            let (mut stream, mut mac) = aead::start(&hop.backward, &nonce(c));
            mac.update_padded(&cell[off..off + 8]);
            mac.absorb_padded(&cell[payload.clone()]);
            let tag = aead::finish(mac, 8, BACKWARD_PAYLOAD_LEN);
            let tag_at = off + TAG_RANGE.start..off + TAG_RANGE.end;
            if bool::from(tag.ct_eq(&cell[tag_at])) {
                hop.window.check(c)?;
                hop.window.commit(c);
                stream.apply_keystream(&mut cell[payload.clone()])?;
                return Ok(Delivered { hop: i, payload });
            }
            // Not from hop i: strip its relay layer and look one hop further.
            stream.apply_keystream(&mut cell[off + BACKWARD_LAYER_LEN..])?;
            off += BACKWARD_LAYER_LEN;
        }
        // The last hop's tag already failed on these bytes.
        Err(Error::AuthenticationFailed)
    }

    /// Strip the layers of hops `..last` and open the cell as hop `last`'s. `None` (with
    /// the cell as it came) if hop `last`'s tag does not verify.
    fn unwrap_from_last(
        &mut self,
        last: usize,
        cell: &mut [u8],
    ) -> Result<Option<Delivered>, Error> {
        let mut counters = [0u64; MAX_HOPS];
        for (i, hop) in self.hops[..last].iter().enumerate() {
            let off = BACKWARD_LAYER_LEN * i;
            counters[i] = be64(&cell[off..off + 8]);
            let layer = &mut cell[off + BACKWARD_LAYER_LEN..];
            aead::xor_keystream_at(&hop.backward, &nonce(counters[i]), 0, layer)?;
        }
        let off = BACKWARD_LAYER_LEN * last;
        let c = be64(&cell[off..off + 8]);
        let (head, body) = cell[off..].split_at_mut(HEADER_LEN);
        let payload = &mut body[..BACKWARD_PAYLOAD_LEN];
        let hop = &mut self.hops[last];
        match aead::open_in_place(
            &hop.backward,
            &nonce(c),
            &head[..8],
            payload,
            &head[TAG_RANGE],
        ) {
            Ok(()) => {
                hop.window.check(c)?;
                hop.window.commit(c);
                let at = off + HEADER_LEN;
                Ok(Some(Delivered {
                    hop: last,
                    payload: at..at + BACKWARD_PAYLOAD_LEN,
                }))
            }
            Err(Error::AuthenticationFailed) => {
                // The failed open left its bytes as they were; undo the strips, innermost
                // first (each is its own inverse).
                for i in (0..last).rev() {
                    let off = BACKWARD_LAYER_LEN * i;
                    let layer = &mut cell[off + BACKWARD_LAYER_LEN..];
                    aead::xor_keystream_at(&self.hops[i].backward, &nonce(counters[i]), 0, layer)?;
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

impl std::fmt::Debug for ClientCircuit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCircuit")
            .field("hops", &self.hops)
            .finish_non_exhaustive()
    }
}
