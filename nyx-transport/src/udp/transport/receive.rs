//! The receive side of [`UdpTransport`]: one `recvmmsg` (GRO batches) into the task's
//! buffers, then the datagrams to the engine a chunk at a time, and the pause after a
//! failed receive.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;

use nyx_core::Timestamp;
use quinn_udp::RecvMeta;
use tokio::time::Instant;

use super::{RECV_BATCH, RECV_BUF, UdpTransport};

/// Received datagrams handed to the engine before what they produced is passed on (events
/// to the node, the cells it forwards in return sent): a relay forwards the start of a large
/// receive while it works through the rest, instead of holding the whole receive back until
/// its last datagram is opened.
const RECV_CHUNK: usize = 16;
/// First pause of receiving after a failed receive; it doubles per consecutive failure.
const RECV_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);
/// Longest pause of receiving after failed receives.
const MAX_RECV_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// A position in the datagrams of one receive: the GRO batch, the byte offset in it, and
/// that batch's sender and whether one of its datagrams so far authenticated.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cursor {
    batches: usize,
    batch: usize,
    offset: usize,
    from: Option<SocketAddr>,
    authenticated: bool,
}

impl UdpTransport {
    /// Receive what is ready (up to [`RECV_BATCH`] GRO batches) and hand its first
    /// [`RECV_CHUNK`] datagrams to the engine ([`hand_over`](Self::hand_over) the rest).
    pub(super) fn receive(&mut self, storage: &mut [u8], meta: &mut [RecvMeta; RECV_BATCH]) {
        let now = self.now();
        // On the stack: no allocation per receive.
        let mut chunks = storage.chunks_mut(RECV_BUF);
        let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
            std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or(&mut [])));
        let n = match self.socket.try_recv(&mut slices, meta) {
            Ok(n) => {
                self.consecutive_errors = 0;
                n
            }
            // Spurious readiness: nothing to read.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => {
                self.receive_failed(&e);
                return;
            }
        };
        self.received = (n > 0).then_some(Cursor {
            batches: n,
            batch: 0,
            offset: 0,
            from: None,
            authenticated: false,
        });
        self.hand_over(storage, meta, now);
    }

    /// Hand the engine up to [`RECV_CHUNK`] more datagrams of the last receive (GRO
    /// batches split by stride).
    pub(super) fn hand_over(
        &mut self,
        storage: &[u8],
        meta: &[RecvMeta; RECV_BATCH],
        now: Timestamp,
    ) {
        let mut handed = 0;
        while let Some(mut at) = self.received.take() {
            let start = at.batch * RECV_BUF;
            let (Some(m), Some(slice)) = (meta.get(at.batch), storage.get(start..start + RECV_BUF))
            else {
                break;
            };
            let stride = m.stride.max(1);
            let datagrams = &slice[..m.len.min(slice.len())];
            // One source, one destination and one size for the whole GRO batch: its address
            // bookkeeping is done once, not per datagram.
            let from = match at.from {
                Some(from) => from,
                None => {
                    let first = &datagrams[..stride.min(datagrams.len())];
                    let engine = &self.engine;
                    self.addressing
                        .received(m.addr, m.dst_ip, first, |a| engine.knows(a))
                }
            };
            at.from = Some(from);
            while at.offset < datagrams.len() && handed < RECV_CHUNK {
                let datagram = &datagrams[at.offset..(at.offset + stride).min(datagrams.len())];
                at.offset += stride;
                handed += 1;
                match &mut self.faults {
                    None => at.authenticated |= self.engine.handle_datagram(from, datagram, now),
                    Some(faults) => faults.shim.push(now, (from, m.dst_ip, datagram.to_vec())),
                }
            }
            if at.offset < datagrams.len() {
                // The chunk is full in the middle of this batch.
                self.received = Some(at);
                break;
            }
            if at.authenticated {
                self.addressing.authenticated(from, m.dst_ip);
            }
            if at.batch + 1 < at.batches {
                self.received = Some(Cursor {
                    batch: at.batch + 1,
                    offset: 0,
                    from: None,
                    authenticated: false,
                    ..at
                });
                if handed >= RECV_CHUNK {
                    break;
                }
            }
        }
        if let Some(faults) = &self.faults {
            faults.counters.set(faults.shim.stats());
        }
        self.release_held(now);
    }

    /// A receive failed with `e` (not "nothing to read"): count and report it, and read the
    /// socket again only after a pause that doubles while the failures go on, so an error
    /// that persists costs a wake-up per second, not a busy loop.
    fn receive_failed(&mut self, e: &io::Error) {
        self.receive_errors += 1;
        self.consecutive_errors = self.consecutive_errors.saturating_add(1);
        let pause = RECV_ERROR_PAUSE
            .saturating_mul(1 << self.consecutive_errors.min(11).saturating_sub(1))
            .min(MAX_RECV_ERROR_PAUSE);
        // The first of a run, then one in 64: reported, not flooding the log.
        if self.consecutive_errors == 1 || self.receive_errors.is_multiple_of(64) {
            tracing::warn!(
                error = %e,
                failures = self.receive_errors,
                pause_ms = pause.as_millis() as u64,
                "receiving from the UDP socket failed"
            );
        }
        self.receive_paused_until = Some(Instant::now() + pause);
    }

    /// Tests: hand the engine every datagram the fault shim releases by `now`.
    pub(super) fn release_held(&mut self, now: Timestamp) {
        let Some(faults) = &mut self.faults else {
            return;
        };
        while let Some((from, local, datagram)) = faults.shim.pop_due(now) {
            if self.engine.handle_datagram(from, &datagram, now) {
                self.addressing.authenticated(from, local);
            }
        }
    }
}
