//! One stream's state: its FEC sender and receiver, both flow-control windows, and how far
//! each direction is from its end.

use std::time::Duration;

use nyx_core::Timestamp;
use nyx_fec::{FecConfig, Receiver, Sender};

use super::{INITIAL_STREAM_WINDOW, ResetReason};

/// Symbols of unflushed data that justify closing a block early while older blocks are
/// still unacknowledged (bulk data: a block big enough for FEC to work well).
const EARLY_CLOSE_SYMBOLS: usize = 64;

pub(super) struct Stream {
    pub(super) tx: Sender,
    pub(super) rx: Receiver,
    symbol_size: usize,
    /// Client: OPENED arrived. Exit: accepted.
    pub(super) opened: bool,
    /// Bytes accepted from the writer.
    pub(super) written: u64,
    /// The peer's flow-control limit on `written`.
    pub(super) peer_max: u64,
    /// FIN queued with this final length.
    pub(super) fin: Option<u64>,
    /// DONE (everything of the peer's read) was queued / acknowledged.
    pub(super) done_queued: bool,
    pub(super) done_acked: bool,
    /// The peer's DONE arrived: everything written was read.
    pub(super) peer_done: bool,
    /// Bytes handed to the reader.
    pub(super) consumed: u64,
    /// The limit this side advertised.
    pub(super) advertised: u64,
    pub(super) window: u64,
    /// How far `window` may grow, and when this side last advertised a new limit.
    max_window: u64,
    last_update: Option<Timestamp>,
    /// The peer's final length, once its FIN arrived.
    pub(super) peer_fin: Option<u64>,
    pub(super) reset: Option<ResetReason>,
    /// The application let go of the stream.
    pub(super) released: bool,
    /// A read found nothing: report [`super::StreamEvent::Readable`] when that changes.
    pub(super) read_armed: bool,
    /// A write was refused: report [`super::StreamEvent::Writable`] when that changes.
    pub(super) write_armed: bool,
}

impl Stream {
    /// A stream whose sender codes with `tx` and whose receiver with `rx` (the two
    /// directions' symbol sizes differ).
    pub(super) fn new(
        tx: &FecConfig,
        rx: &FecConfig,
        (window, max_window): (u64, u64),
        now: Timestamp,
    ) -> Result<Self, nyx_fec::Error> {
        Ok(Stream {
            tx: Sender::new(tx.clone(), now)?,
            rx: Receiver::new(rx.clone())?,
            symbol_size: usize::from(tx.symbol_size),
            opened: false,
            written: 0,
            peer_max: INITIAL_STREAM_WINDOW,
            fin: None,
            done_queued: false,
            done_acked: false,
            peer_done: false,
            consumed: 0,
            advertised: INITIAL_STREAM_WINDOW,
            window,
            max_window,
            last_update: None,
            peer_fin: None,
            reset: None,
            released: false,
            read_armed: false,
            write_armed: false,
        })
    }

    /// Bytes the writer may hand over now (flow control and the FEC window).
    pub(super) fn send_capacity(&self) -> u64 {
        if self.fin.is_some() || self.reset.is_some() || !self.tx.can_write() {
            return 0;
        }
        self.peer_max.saturating_sub(self.written)
    }

    /// Close the open block if it should leave now: nothing of it can wait for company
    /// (no older block is unacknowledged) or it is already big enough to code well, unless
    /// the sender coalesces into full blocks.
    pub(super) fn maybe_close_block(&mut self, now: Timestamp) -> Result<(), nyx_fec::Error> {
        let open = self.tx.unflushed();
        if open == 0 || self.tx.coalescing() {
            return Ok(());
        }
        if self.tx.blocks_in_flight() == 0 || open >= EARLY_CLOSE_SYMBOLS * self.symbol_size {
            self.tx.flush(now)?;
        }
        Ok(())
    }

    /// The new limit to advertise after a read at `now`, when the reader freed a quarter
    /// of the window. Updates less than a round trip (`srtt`) apart double the window, up
    /// to its maximum: the reader keeps up and the window is what limits. (Updates at half
    /// a window left the sender idle for the other half at long round trips: under Shadow
    /// at 300 ms an 8 MiB window still ran out of credit at 7 MB/s.)
    pub(super) fn window_update(&mut self, now: Timestamp, srtt: Duration) -> Option<u64> {
        if self.reset.is_some() || self.peer_fin.is_some() {
            return None;
        }
        if self.consumed + self.window - self.advertised < self.window / 4 {
            return None;
        }
        if self
            .last_update
            .is_some_and(|at| now < at.saturating_add(srtt))
        {
            self.window = (self.window * 2).min(self.max_window);
        }
        self.last_update = Some(now);
        let limit = self.consumed + self.window;
        self.advertised = limit;
        Some(limit)
    }

    /// Whether the peer sent more than it was allowed or beyond its end, or makes this side
    /// hold more for undelivered blocks than a sender within its window can: twice what it
    /// may still send (a block's symbols count up to 2K + 32) plus `slack` (the 32 extra
    /// symbols and a padded last symbol of every block in flight).
    pub(super) fn overran(&self, slack: u64) -> bool {
        let delivered = self.consumed + self.rx.readable() as u64;
        let may_send = self.advertised.saturating_sub(self.consumed);
        delivered > self.advertised
            || self.peer_fin.is_some_and(|f| delivered > f)
            || self.rx.held_bytes() as u64 > 2 * may_send + slack
    }

    /// The reader has everything up to the peer's end.
    pub(super) fn recv_done(&self) -> bool {
        self.peer_fin == Some(self.consumed)
    }

    /// Nothing more will happen on this stream and its owner let go: reset, or both sides
    /// read everything and know the other did.
    pub(super) fn finished(&self) -> bool {
        self.released && (self.reset.is_some() || (self.done_acked && self.peer_done))
    }
}

/// Where one stream stands, for debug reports: counts and flags only, never data.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct StreamSnapshot {
    /// The stream.
    pub id: super::StreamId,
    /// Client: OPENED arrived. Exit: accepted.
    pub opened: bool,
    /// Bytes accepted from the writer.
    pub written: u64,
    /// The peer's flow-control limit on `written`.
    pub peer_max: u64,
    /// The final length this end sent, once finished.
    pub fin: Option<u64>,
    /// FEC blocks sent and not yet acknowledged.
    pub blocks_in_flight: usize,
    /// Bytes written but not yet in a closed block.
    pub unflushed: usize,
    /// Bytes handed to the reader.
    pub consumed: u64,
    /// Bytes the reader can have now.
    pub readable: usize,
    /// FEC blocks complete so far (every source symbol arrived, or decoded).
    pub blocks_decoded: u64,
    /// The limit this end advertised.
    pub advertised: u64,
    /// The peer's final length, once its FIN arrived.
    pub peer_fin: Option<u64>,
    /// DONE queued and acknowledged; the peer's DONE arrived.
    pub done: (bool, bool, bool),
    /// Why it was reset, if it was.
    pub reset: Option<ResetReason>,
    /// The application let go of it.
    pub released: bool,
    /// A reader (writer) waits for readiness.
    pub armed: (bool, bool),
    /// The loss rate this end's FEC plans its up-front repair for, the mean run of losses
    /// its peer reported, the dispersion of losses it plans for, and the controller's trim
    /// on the loss rate (1 = the model as is).
    pub fec_plan: (f64, f64, f64, f64),
    /// What this end's FEC sent: up-front repair symbols, repair symbols asked for, and
    /// blocks that needed a second round.
    pub fec_repair: (u64, u64, u64),
}

impl Stream {
    pub(super) fn snapshot(&self, id: super::StreamId) -> StreamSnapshot {
        StreamSnapshot {
            id,
            opened: self.opened,
            written: self.written,
            peer_max: self.peer_max,
            fin: self.fin,
            blocks_in_flight: self.tx.blocks_in_flight(),
            unflushed: self.tx.unflushed(),
            consumed: self.consumed,
            readable: self.rx.readable(),
            blocks_decoded: self.rx.stats().blocks,
            advertised: self.advertised,
            peer_fin: self.peer_fin,
            done: (self.done_queued, self.done_acked, self.peer_done),
            reset: self.reset,
            released: self.released,
            armed: (self.read_armed, self.write_armed),
            fec_plan: {
                let (burst, dispersion) = self.tx.loss_shape();
                (
                    self.tx.estimated_loss(),
                    burst,
                    dispersion,
                    self.tx.redundancy_trim(),
                )
            },
            fec_repair: {
                let t = self.tx.stats();
                (t.upfront_repair, t.requested_repair, t.second_round_blocks)
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::StreamConfig;

    const MIB: u64 = 1024 * 1024;
    const RTT: Duration = Duration::from_millis(100);

    fn stream() -> Stream {
        let fec = StreamConfig::default().fec;
        Stream::new(&fec, &fec, (MIB, 4 * MIB), Timestamp::ZERO).unwrap()
    }

    #[test]
    fn a_reader_that_keeps_up_grows_the_window_to_its_maximum() {
        let mut s = stream();
        let mut at = Timestamp::ZERO;
        let mut windows = Vec::new();
        for _ in 0..5 {
            // Half a window read, 50 ms after the last update: well within two round trips.
            s.consumed += s.window / 2;
            at = at.saturating_add(Duration::from_millis(50));
            let limit = s.window_update(at, RTT).unwrap();
            assert_eq!(limit, s.consumed + s.window);
            windows.push(s.window / MIB);
        }
        assert_eq!(windows, [1, 2, 4, 4, 4]);
    }

    #[test]
    fn a_slow_reader_keeps_the_window() {
        let mut s = stream();
        let mut at = Timestamp::ZERO;
        for _ in 0..5 {
            s.consumed += s.window / 2;
            at = at.saturating_add(Duration::from_secs(1));
            s.window_update(at, RTT).unwrap();
        }
        assert_eq!(s.window, MIB);
        // Less than a quarter of a window freed: no update at all; a quarter: one.
        s.consumed += 1;
        assert_eq!(s.window_update(at, RTT), None);
        s.consumed += s.window / 4 - 1;
        let later = at.saturating_add(Duration::from_secs(1));
        assert_eq!(s.window_update(later, RTT), Some(s.consumed + MIB));
    }
}
