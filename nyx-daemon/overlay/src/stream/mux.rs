//! [`StreamMux`]: one end of a circuit's streams.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use nyx_core::Timestamp;

use super::cc::Vegas;
use super::pacer::Pacer;
use super::recovery::{AckState, SentPackets};
use super::state::{Stream, StreamSnapshot};
use super::wire::{self, Control, MAX_TARGET_LEN};
use super::{ResetReason, Role, StreamConfig, StreamEvent, StreamId, symbol_size};
use crate::Error;
use crate::circuit::{MAX_BACKWARD_BODY, MAX_FORWARD_BODY};

mod echo;
mod input;
mod jobs;
mod output;
mod stats;
mod timers;

pub use jobs::{FecJob, FecJobDone};
use stats::FecTotals;
pub use stats::MuxStats;

/// With streams open and nothing heard from the peer for this long, ask it for an ACK (a
/// PING; again at this interval while the silence lasts).
pub const LIVENESS_PROBE: Duration = Duration::from_secs(5);
/// With streams open and nothing heard from the peer for this long, the circuit is dead
/// ([`StreamMux::is_dead`]).
pub const DEAD_AFTER: Duration = Duration::from_secs(60);

/// What a read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// This many bytes were copied.
    Data(usize),
    /// Nothing yet ([`StreamEvent::Readable`] follows when there is).
    Blocked,
    /// The peer finished: everything was read.
    Finished,
}

/// One end of the streams of a circuit. Sans-IO: feed it the circuit's DATA payloads with
/// [`handle_packet`](Self::handle_packet), send what
/// [`poll_transmit`](Self::poll_transmit) writes, call
/// [`handle_timeout`](Self::handle_timeout) at [`poll_timeout`](Self::poll_timeout), and
/// react to [`poll_event`](Self::poll_event).
pub struct StreamMux {
    role: Role,
    config: StreamConfig,
    rx_fec: nyx_fec::FecConfig,
    max_packet: usize,
    streams: BTreeMap<StreamId, Stream>,
    /// Client: the next id to open. Exit: one above the highest id seen.
    next_id: u32,
    rr: u32,
    controls: VecDeque<Control>,
    /// Second copies of OPEN and OPENED, sent a little after the first.
    echoes: echo::Echoes,
    acks: AckState,
    sent: SentPackets,
    cc: Vegas,
    pacer: Pacer,
    /// The last poll held a symbol back for pacing: wake when the pacer allows one.
    paced: bool,
    /// The time of the latest input (a packet, a poll or a timeout): reads, which take no
    /// time of their own, are placed at it.
    now: Timestamp,
    ping: bool,
    pto_count: u32,
    /// When the latest packet from the peer arrived, and when this end last asked for proof
    /// of life (the circuit's liveness check).
    last_heard: Timestamp,
    last_probe: Timestamp,
    events: VecDeque<StreamEvent>,
    stats: MuxStats,
    /// FEC counters of streams already gone.
    done_fec: FecTotals,
    /// Reused list of stream ids (per-packet passes over the streams allocate nothing).
    scratch: Vec<StreamId>,
    /// The largest receive window a stream of this circuit grew to: where the next one
    /// starts (the streams of a circuit share its path).
    learned_window: u64,
    /// The loss rate and the dispersion of losses a stream of this circuit measured last:
    /// where the next one's FEC starts.
    learned_loss: Option<(f64, f64)>,
    /// Streams' receivers hand their decodes out as jobs ([`StreamMux::offload_decodes`]).
    offload_decodes: bool,
}

impl StreamMux {
    /// The mux of one end of a circuit, starting at `now`.
    pub fn new(role: Role, mut config: StreamConfig, now: Timestamp) -> Result<Self, Error> {
        // `config.fec` codes what this end sends; `rx_fec` what it receives: the two
        // directions' cells carry different symbol sizes.
        config.fec.symbol_size = symbol_size(role);
        let mut rx_fec = config.fec.clone();
        rx_fec.symbol_size = symbol_size(role.peer());
        if let Some((field, reason)) = config.problem() {
            return Err(Error::StreamConfig { field, reason });
        }
        let max_packet = match role {
            Role::Client => MAX_FORWARD_BODY,
            Role::Exit => MAX_BACKWARD_BODY,
        };
        let learned_window = config.stream_window;
        Ok(StreamMux {
            role,
            cc: Vegas::new(config.cc.clone(), now),
            pacer: Pacer::new(now),
            paced: false,
            now,
            config,
            rx_fec,
            max_packet,
            streams: BTreeMap::new(),
            next_id: 1,
            rr: 0,
            controls: VecDeque::new(),
            echoes: echo::Echoes::default(),
            acks: AckState::default(),
            sent: SentPackets::default(),
            ping: false,
            pto_count: 0,
            last_heard: now,
            last_probe: now,
            events: VecDeque::new(),
            stats: MuxStats::default(),
            done_fec: FecTotals::default(),
            scratch: Vec::new(),
            learned_window,
            learned_loss: None,
            offload_decodes: false,
        })
    }

    /// The largest packet this end sends (a circuit DATA payload in its direction).
    pub fn max_packet(&self) -> usize {
        self.max_packet
    }

    /// (Client) open a stream to `target` ("host:port", resolved by the exit).
    pub fn open(&mut self, target: &str, now: Timestamp) -> Result<StreamId, Error> {
        if self.role != Role::Client {
            return Err(Error::StreamState {
                reason: "only a circuit's client opens streams",
            });
        }
        if target.is_empty() || target.len() > MAX_TARGET_LEN {
            return Err(Error::BadTarget {
                target: target.to_string(),
                reason: "must be 1 to 255 bytes of host:port",
            });
        }
        if self.streams.len() >= self.config.max_streams {
            return Err(Error::TooManyStreams {
                max: self.config.max_streams,
            });
        }
        if self.next_id == u32::MAX {
            return Err(Error::TooManyStreams {
                max: u32::MAX as usize,
            });
        }
        let id = StreamId(self.next_id);
        self.next_id += 1;
        let mut stream = Stream::new(&self.config.fec, &self.rx_fec, self.windows(), now)?;
        self.seed(&mut stream);
        self.streams.insert(id, stream);
        self.controls.push_back(Control::Open {
            stream: id,
            target: target.to_string(),
        });
        self.advertise_window(id);
        self.stats.streams_opened += 1;
        Ok(id)
    }

    /// (Exit) the stream's target is connected: tell the client.
    pub fn accept(&mut self, id: StreamId) -> Result<(), Error> {
        let stream = self.live_mut(id)?;
        if stream.opened {
            return Ok(());
        }
        stream.opened = true;
        self.controls.push_back(Control::Opened { stream: id });
        self.advertise_window(id);
        self.stats.streams_opened += 1;
        Ok(())
    }

    /// Hand up to `data.len()` bytes to the stream; returns how many were taken (0: the
    /// windows are full, [`StreamEvent::Writable`] follows).
    pub fn write(&mut self, id: StreamId, data: &[u8], now: Timestamp) -> Result<usize, Error> {
        let stream = self.live_mut(id)?;
        if stream.fin.is_some() {
            return Err(Error::StreamFinished);
        }
        let cap = usize::try_from(stream.send_capacity()).unwrap_or(usize::MAX);
        let n = if cap == 0 {
            0
        } else {
            stream.tx.write(&data[..data.len().min(cap)], now)?
        };
        stream.written += n as u64;
        if n < data.len() {
            stream.write_armed = true;
        }
        Ok(n)
    }

    /// Send what was written without waiting for more (interactive data): at once, or
    /// while the stream's earlier data fills the path, as soon as it can leave with a
    /// block of useful size ([`nyx_fec::Sender::push`]).
    pub fn flush(&mut self, id: StreamId, now: Timestamp) -> Result<(), Error> {
        self.live_mut(id)?.tx.push(now)?;
        Ok(())
    }

    /// No more writes: the peer reads to the end, then sees the stream finished.
    pub fn finish(&mut self, id: StreamId, now: Timestamp) -> Result<(), Error> {
        let stream = self.live_mut(id)?;
        if stream.fin.is_some() {
            return Ok(());
        }
        stream.tx.finish(now)?;
        stream.fin = Some(stream.written);
        let offset = stream.written;
        self.controls.push_back(Control::Fin { stream: id, offset });
        Ok(())
    }

    /// A new stream's window and how far it may grow. A stream starts with the window an
    /// earlier stream of the circuit grew to: at a 300 ms round trip growing from 2 MiB to
    /// 8 MiB takes most of a 10 MiB download, and every download on the circuit paid it
    /// again.
    fn windows(&self) -> (u64, u64) {
        (self.learned_window, self.config.max_stream_window)
    }

    /// A new stream's FEC plans for the loss an earlier stream of the circuit measured, not
    /// for the cautious prior: at a 300 ms round trip a stream's first round trip of blocks
    /// leaves before any report, and every download on a loss-free circuit sent the
    /// prior's repair with them. It also knows the circuit's round trip from the start, so
    /// that its probe for a response whose every packet was lost comes a round trip after
    /// it, not after the sender's fixed default (`FecConfig::probe_timeout`); the round
    /// trip is updated with every new sample (`settle`). Its receiver hands decodes out as
    /// jobs if the driver asked for that ([`StreamMux::offload_decodes`]).
    fn seed(&self, stream: &mut Stream) {
        if let Some((loss, dispersion)) = self.learned_loss {
            stream.tx.seed_loss(loss, dispersion);
        }
        stream.tx.set_rtt(self.sent.rtt().repair_delay());
        if self.offload_decodes {
            stream.rx.offload_decodes();
        }
    }

    /// Copy readable bytes into `buf`.
    pub fn read(&mut self, id: StreamId, buf: &mut [u8]) -> Result<ReadOutcome, Error> {
        let stream = self.streams.get_mut(&id).ok_or(Error::NoSuchStream)?;
        if let Some(reason) = stream.reset {
            return Err(Error::StreamReset { reason });
        }
        if stream.recv_done() {
            if !stream.done_queued {
                stream.done_queued = true;
                self.controls.push_back(Control::Done { stream: id });
            }
            return Ok(ReadOutcome::Finished);
        }
        let n = stream.rx.read(buf);
        if n == 0 {
            stream.read_armed = true;
            return Ok(ReadOutcome::Blocked);
        }
        stream.consumed += n as u64;
        if let Some(max) = stream.window_update(self.now, self.sent.rtt().smoothed) {
            self.learned_window = self.learned_window.max(stream.window);
            self.controls
                .push_back(Control::MaxData { stream: id, max });
        }
        Ok(ReadOutcome::Data(n))
    }

    /// Abandon the stream in both directions, telling the peer why.
    pub fn reset(&mut self, id: StreamId, reason: ResetReason) -> Result<(), Error> {
        let stream = self.streams.get_mut(&id).ok_or(Error::NoSuchStream)?;
        if stream.reset.is_none() {
            tracing::debug!(role = ?self.role, stream = id.0, ?reason, "stream reset here");
            stream.reset = Some(reason);
            self.controls
                .push_back(Control::Reset { stream: id, reason });
            self.stats.streams_reset += 1;
        }
        self.collect(id);
        Ok(())
    }

    /// The application let go of the stream: it is forgotten once finished. A stream whose
    /// incoming data was not read to the end is reset ([`ResetReason::Cancelled`]); one
    /// whose outgoing side was not finished is finished first.
    pub fn release(&mut self, id: StreamId, now: Timestamp) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        stream.released = true;
        if stream.reset.is_none() && !stream.recv_done() {
            let _ = self.reset(id, ResetReason::Cancelled);
            return;
        }
        if stream.reset.is_none() && !stream.done_queued {
            // Read to its end without a read that saw the end: the peer still needs DONE
            // to let go of its side.
            stream.done_queued = true;
            self.controls.push_back(Control::Done { stream: id });
        }
        let _ = self.finish(id, now);
        self.collect(id);
    }

    /// The circuit is gone: every stream is reset with [`ResetReason::CircuitLost`].
    pub fn abandon(&mut self) {
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        for id in ids {
            if let Some(s) = self.streams.get_mut(&id)
                && s.reset.is_none()
            {
                s.reset = Some(ResetReason::CircuitLost);
                self.events.push_back(StreamEvent::Reset {
                    stream: id,
                    reason: ResetReason::CircuitLost,
                });
            }
            self.collect(id);
        }
        self.controls.clear();
        self.sent.abandon();
    }

    /// Whether control frames wait to be sent (a read may have opened the window).
    pub fn has_queued_controls(&self) -> bool {
        !self.controls.is_empty()
    }

    /// Streams held now.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Where each stream stands (for debug reports: counts and flags, never data).
    pub fn stream_snapshots(&self) -> impl Iterator<Item = StreamSnapshot> + '_ {
        self.streams.iter().map(|(id, s)| s.snapshot(*id))
    }

    #[cfg(test)]
    pub(crate) fn debug_streams(&self) -> String {
        self.streams
            .iter()
            .map(|(id, s)| {
                format!(
                    "{id}: fin {:?} done {}/{} peer_done {} idle {} recv_done {} released {} reset {:?} tx {:?} rx {:?}\n",
                    s.fin, s.done_queued, s.done_acked, s.peer_done, s.tx.is_idle(), s.recv_done(), s.released, s.reset, s.tx, s.rx.stats()
                )
            })
            .collect()
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<StreamEvent> {
        self.events.pop_front()
    }

    /// Whether an ACK must leave before more packets are handled. The short ACK a full
    /// data packet carries reports the packets up to 64 below its largest; packets that
    /// arrive after the last ACK beyond that width would never be reported, and the peer
    /// would declare them lost (on loopback, batches of 128 packets made it declare 18% of
    /// a loss-free transfer lost).
    /// A driver that handles packets in batches calls [`poll_transmit`](Self::poll_transmit)
    /// as soon as this is true.
    pub fn ack_urgent(&self) -> bool {
        self.acks.unreported() >= wire::ACK_BITMAP_BITS / 2
    }

    fn live_mut(&mut self, id: StreamId) -> Result<&mut Stream, Error> {
        let stream = self.streams.get_mut(&id).ok_or(Error::NoSuchStream)?;
        if let Some(reason) = stream.reset {
            return Err(Error::StreamReset { reason });
        }
        Ok(stream)
    }
}

impl std::fmt::Debug for StreamMux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamMux")
            .field("role", &self.role)
            .field("streams", &self.streams.len())
            .field("window", &self.cc.window())
            .finish_non_exhaustive()
    }
}
