//! One authenticated QUIC link ([`QuicLink`]) and the task that drives it: cells and control
//! messages share the link's DATAGRAM frames, told apart by the control mark (see
//! [`super::control`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use nyx_core::time::CoarseClock;
use nyx_core::{NodeId, Timestamp};
use tokio::sync::{Notify, mpsc};
use tokio::time::{Instant, Sleep};

use super::control::{QuicControl, is_control};
use crate::Error;
use crate::link::{Inbound, Message};

/// Per-link counters, for an embedder that watches its links (and for tests). The daemon's
/// metrics show no counter per link, so as not to expose which peers a node talks to
/// (docs/telemetry.md).
#[derive(Debug, Default)]
pub struct LinkCounters {
    /// Cells sent.
    pub cells_out: AtomicU64,
    /// Cells received.
    pub cells_in: AtomicU64,
    /// Cell bytes sent.
    pub bytes_out: AtomicU64,
    /// Cell bytes received.
    pub bytes_in: AtomicU64,
    /// Cells refused because they exceeded the path's datagram size.
    pub dropped_too_large: AtomicU64,
    /// Cells refused because they began with the control mark (circuit id 0).
    pub refused_control_mark: AtomicU64,
    /// Control datagrams from the peer that did not decode, or completed a message framed
    /// beyond the limit, dropped.
    pub control_malformed: AtomicU64,
}

/// One authenticated QUIC link to a peer node.
///
/// Cells ([`send_cell`](Self::send_cell)) and control messages
/// ([`send_control`](Self::send_control)) both leave as DATAGRAM frames; everything that
/// arrives is taken by the one task that drives the link ([`crate::link::drive_quic_link`]),
/// which also acknowledges and resends control chunks: an undriven link sends but never
/// resends, and its peer's control messages wait in quinn's datagram buffer.
#[derive(Debug)]
pub struct QuicLink {
    conn: quinn::Connection,
    peer: NodeId,
    counters: Arc<LinkCounters>,
    dialled_by_us: bool,
    /// The control channel, shared by the senders and the driver.
    control: std::sync::Mutex<QuicControl>,
    /// Wakes the driver when a send set a new resend deadline.
    control_sent: Notify,
    /// Whether a task drives the link already.
    driven: AtomicBool,
    /// When its handshake began (this node sent or admitted the first packet) and ended,
    /// on the endpoint's clock.
    started: Timestamp,
    up: Timestamp,
    /// When a datagram (cell or control) last arrived, in nanoseconds of `clock`; QUIC's
    /// own keep-alives do not count.
    last_heard: AtomicU64,
    clock: CoarseClock,
}

impl QuicLink {
    pub(super) fn new(
        conn: quinn::Connection,
        peer: NodeId,
        dialled_by_us: bool,
        started: Timestamp,
        control: QuicControl,
        clock: CoarseClock,
    ) -> Self {
        let up = clock.tick();
        QuicLink {
            conn,
            peer,
            counters: Arc::new(LinkCounters::default()),
            dialled_by_us,
            control: std::sync::Mutex::new(control),
            control_sent: Notify::new(),
            driven: AtomicBool::new(false),
            started,
            up,
            last_heard: AtomicU64::new(up.as_nanos()),
            clock,
        }
    }

    /// When the link's handshake began here: this node sent its first packet (dialled) or
    /// admitted the dialler's (accepted); on the endpoint's clock, like
    /// [`up_at`](Self::up_at) and [`last_heard`](Self::last_heard).
    pub fn handshake_started(&self) -> Timestamp {
        self.started
    }

    /// When the link's handshake completed here.
    pub fn up_at(&self) -> Timestamp {
        self.up
    }

    /// When a cell or control datagram last arrived on the link (when it came up, if none
    /// has), on the endpoint's clock.
    pub fn last_heard(&self) -> Timestamp {
        Timestamp::from_nanos(self.last_heard.load(Ordering::Relaxed))
    }

    /// The peer's verified identity.
    pub fn peer(&self) -> NodeId {
        self.peer
    }

    /// Whether this node dialled the link (false: the peer did).
    pub fn dialled_by_us(&self) -> bool {
        self.dialled_by_us
    }

    /// The link's counters.
    pub fn counters(&self) -> &Arc<LinkCounters> {
        &self.counters
    }

    /// The largest cell the path carries now (it changes with path-MTU discovery).
    pub fn max_cell(&self) -> Option<usize> {
        self.conn.max_datagram_size()
    }

    /// The current round-trip estimate.
    pub fn rtt(&self) -> Duration {
        self.conn.rtt()
    }

    /// Send one cell as a QUIC datagram (unreliable, unordered). Refused if it is larger
    /// than the path carries, or if it begins with four zero bytes (circuit id 0, the mark
    /// of the link's control datagrams).
    pub fn send_cell(&self, cell: Bytes) -> Result<(), Error> {
        if is_control(&cell) {
            self.counters
                .refused_control_mark
                .fetch_add(1, Ordering::Relaxed);
            return Err(Error::ZeroCircuit);
        }
        let max = self.conn.max_datagram_size().unwrap_or(0);
        if cell.len() > max {
            self.counters
                .dropped_too_large
                .fetch_add(1, Ordering::Relaxed);
            return Err(Error::CellTooLarge {
                len: cell.len(),
                max,
            });
        }
        let len = cell.len() as u64;
        self.conn.send_datagram(cell).map_err(datagram_error)?;
        self.counters.cells_out.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_out.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Send a control message: reliable and ordered while the link is driven, at most
    /// [`MAX_CONTROL_LEN`](super::MAX_CONTROL_LEN) bytes, in chunks that leave as datagrams
    /// of `pad_to` bytes now. Refused whole when the chunks unacknowledged would pass
    /// [`MAX_CONTROL_IN_FLIGHT`](super::MAX_CONTROL_IN_FLIGHT) (the peer is not
    /// acknowledging: backpressure), or when the path carries no datagram of `pad_to` bytes.
    pub fn send_control(&self, msg: &[u8]) -> Result<(), Error> {
        let mut control = self.control.lock().map_err(|_| poisoned())?;
        let max = self.conn.max_datagram_size().unwrap_or(0);
        if control.pad_to() > max {
            return Err(Error::CellTooLarge {
                len: control.pad_to(),
                max,
            });
        }
        control.send(msg, self.clock.tick())?;
        let sent = self.transmit(&mut control);
        drop(control);
        self.control_sent.notify_one();
        sent
    }

    /// The underlying quinn connection (for baselines and diagnostics).
    pub fn raw_connection(&self) -> &quinn::Connection {
        &self.conn
    }

    /// Whether the link is closed (by either side, an error or the idle timeout).
    pub fn is_closed(&self) -> bool {
        self.conn.close_reason().is_some()
    }

    /// Close the link with a reason the peer sees.
    pub fn close(&self, reason: &str) {
        self.conn.close(0u32.into(), reason.as_bytes());
    }

    /// Move the link's incoming cells and control messages to `to` and resend its
    /// unacknowledged control chunks, until it closes or `to` is dropped; returns at once if
    /// another task drives it.
    pub(crate) async fn drive(&self, to: mpsc::Sender<Inbound>) {
        if self.driven.swap(true, Ordering::AcqRel) {
            return;
        }
        let peer = self.peer;
        // The timer and the wake-up live across iterations: a cell costs neither a timer
        // registration nor a waiter.
        let timer = tokio::time::sleep(Duration::ZERO);
        let sent = self.control_sent.notified();
        tokio::pin!(timer, sent);
        let mut armed = false;
        loop {
            // Each branch is cancel-safe: quinn's `read_datagram` takes a datagram only when
            // it completes.
            let datagram = tokio::select! {
                datagram = self.conn.read_datagram() => match datagram {
                    Ok(datagram) => datagram,
                    Err(_) => return,
                },
                () = &mut sent => {
                    sent.set(self.control_sent.notified());
                    armed = self.arm(timer.as_mut());
                    continue;
                }
                () = &mut timer, if armed => {
                    self.resend();
                    armed = self.arm(timer.as_mut());
                    continue;
                }
            };
            // Read, not ticked: the shared clock's atomic stays out of the per-cell path.
            let heard = self.clock.timestamp_of(std::time::Instant::now());
            self.last_heard.store(heard.as_nanos(), Ordering::Relaxed);
            if !is_control(&datagram) {
                self.counters.cells_in.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .bytes_in
                    .fetch_add(datagram.len() as u64, Ordering::Relaxed);
                let message = Message::Cell(datagram);
                if to.send(Inbound { peer, message }).await.is_err() {
                    return;
                }
                continue;
            }
            let messages = self.on_control(&datagram);
            armed = self.arm(timer.as_mut());
            for msg in messages {
                let message = Message::Control(msg);
                if to.send(Inbound { peer, message }).await.is_err() {
                    return;
                }
            }
        }
    }

    /// A control datagram from the peer: the messages it completes (its acknowledgement is
    /// sent; a malformed one is counted and dropped).
    fn on_control(&self, datagram: &[u8]) -> Vec<Vec<u8>> {
        let Ok(mut control) = self.control.lock() else {
            return Vec::new();
        };
        let delivered = control.handle_datagram(datagram);
        // If the link is gone, the next read ends the driver.
        let _ = self.transmit(&mut control);
        delivered.unwrap_or_else(|_| {
            self.counters
                .control_malformed
                .fetch_add(1, Ordering::Relaxed);
            Vec::new()
        })
    }

    /// Set `timer` to the control channel's next resend deadline; false if none is due.
    fn arm(&self, timer: Pin<&mut Sleep>) -> bool {
        let rtt = self.conn.rtt();
        let next = self.control.lock().ok().and_then(|c| c.poll_timeout(rtt));
        match next {
            Some(at) => {
                timer.reset(Instant::from_std(self.clock.instant_of(at)));
                true
            }
            None => false,
        }
    }

    /// Resend the control chunks that are due.
    fn resend(&self) {
        let rtt = self.conn.rtt();
        if let Ok(mut control) = self.control.lock() {
            control.handle_timeout(self.clock.tick(), rtt);
            let _ = self.transmit(&mut control);
        }
    }

    /// Send every datagram the control channel has queued; the first error, if any (the
    /// chunks stay unacknowledged and are resent).
    fn transmit(&self, control: &mut QuicControl) -> Result<(), Error> {
        let mut result = Ok(());
        while let Some(datagram) = control.poll_transmit() {
            if let Err(e) = self.conn.send_datagram(datagram) {
                result = result.and(Err(datagram_error(e)));
            }
        }
        result
    }
}

fn datagram_error(e: quinn::SendDatagramError) -> Error {
    Error::Link {
        reason: e.to_string(),
    }
}

fn poisoned() -> Error {
    Error::Link {
        reason: "control channel lock poisoned".to_string(),
    }
}
