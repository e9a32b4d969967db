//! Streams over circuits (sans-IO): many reliable byte streams multiplexed on one circuit,
//! each direction protected by nyx-fec, the circuit's cells paced by a delay-based
//! congestion window, each stream bounded by its own flow-control window.
//!
//! One [`StreamMux`] sits at each end of a circuit: the client's ([`Role::Client`], which
//! opens streams) and the exit's ([`Role::Exit`], which connects them to TCP targets). The
//! mux turns circuit DATA payloads into stream bytes and back; it opens no socket and reads
//! no clock. The async layer (nyx-node) moves its packets over a circuit and its bytes
//! to applications and TCP connections.
//!
//! Layers, per packet (docs/protocol.md, "Streams"):
//!
//! * [`wire`]: a packet number and frames (ACK, SYMBOL, FEEDBACK, OPEN, OPENED, FIN, RESET,
//!   MAX_DATA, PING).
//! * recovery: acknowledgements, RTT, loss detection; lost control frames are resent, lost
//!   stream data is repaired by FEC instead.
//! * [`cc`]: the circuit's congestion window.
//! * per stream: an `nyx_fec::Sender` / `Receiver` pair and flow control.

pub mod cc;
mod mux;
mod pacer;
mod recovery;
mod state;
#[cfg(test)]
mod tests;
pub mod wire;

use std::fmt;
use std::time::Duration;

use nyx_fec::FecConfig;

use crate::circuit::{MAX_BACKWARD_BODY, MAX_FORWARD_BODY};

pub use cc::CcConfig;
pub use mux::{DEAD_AFTER, FecJob, FecJobDone, LIVENESS_PROBE, MuxStats, ReadOutcome, StreamMux};
pub use state::StreamSnapshot;

/// Stream data bytes per FEC symbol of the client's direction (forward): with the packet
/// number, the SYMBOL frame's header, the symbol packet's header and room for an ACK, one
/// symbol fills a forward cell's payload (1 032 bytes).
pub const FORWARD_SYMBOL_SIZE: u16 = symbol_filling(MAX_FORWARD_BODY);
/// Stream data bytes per FEC symbol of the exit's direction (backward), which carries
/// downloads: a backward cell has fewer onion layers to pay for (1 064 bytes).
pub const BACKWARD_SYMBOL_SIZE: u16 = symbol_filling(MAX_BACKWARD_BODY);

/// The largest symbol that fits a packet of `body` bytes with its headers and an ACK,
/// rounded down to whole 8-byte words.
const fn symbol_filling(body: usize) -> u16 {
    let room = body
        - wire::PACKET_HEADER_LEN
        - wire::CARRIER_HEADER_LEN
        - nyx_fec::packet::SYMBOL_HEADER_LEN
        - wire::ACK_LEN;
    (room / 8 * 8) as u16
}

const _: () = assert!(FORWARD_SYMBOL_SIZE == 1032 && BACKWARD_SYMBOL_SIZE == 1064);

/// The symbol size of what `role` sends; what it receives uses the other role's.
pub const fn symbol_size(role: Role) -> u16 {
    match role {
        Role::Client => FORWARD_SYMBOL_SIZE,
        Role::Exit => BACKWARD_SYMBOL_SIZE,
    }
}
/// The flow-control window every stream starts with, before the receiver raises it.
pub const INITIAL_STREAM_WINDOW: u64 = 256 * 1024;

/// A stream on one circuit (never 0; opened by the client, increasing, never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u32);

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream {}", self.0)
    }
}

/// Which end of the circuit a mux is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The circuit's owner: opens streams; its packets travel forward.
    Client,
    /// The circuit's last hop: accepts streams; its packets travel backward.
    Exit,
}

impl Role {
    /// The other end of the circuit.
    pub const fn peer(self) -> Role {
        match self {
            Role::Client => Role::Exit,
            Role::Exit => Role::Client,
        }
    }
}

/// Why a stream was abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResetReason {
    /// The target refused the connection.
    Refused,
    /// The target did not answer in time (or the stream stalled).
    Timeout,
    /// The exit's policy does not allow the target.
    Policy,
    /// The target could not be resolved or reached.
    Unreachable,
    /// A peer broke the stream protocol.
    Protocol,
    /// The application closed the stream before the end.
    Cancelled,
    /// A limit was reached (streams per circuit, memory).
    ResourceLimit,
    /// The circuit carrying the stream ended (local only, never sent).
    CircuitLost,
    /// A code this version does not know.
    Other(u8),
}

/// How many circuits a client tries for one stream before it gives up, when each exit
/// fails in a way another exit might not ([`ResetReason::retry_elsewhere`]). Tor's limit on
/// resolve failures per stream is the same.
pub const MAX_OPEN_ATTEMPTS: usize = 3;

impl ResetReason {
    /// Whether a stream the exit did not open for this reason is worth opening again on
    /// another circuit (Tor's rule for a stream ended before it connected):
    ///
    /// * yes for what belongs to the exit or the circuit: a connect or resolve that timed
    ///   out or failed there ([`Timeout`](Self::Timeout), [`Unreachable`](Self::Unreachable)),
    ///   an exit that is full ([`ResourceLimit`](Self::ResourceLimit)), an exit whose
    ///   policy turned out stricter than its descriptor ([`Policy`](Self::Policy)), a
    ///   circuit that ended ([`CircuitLost`](Self::CircuitLost));
    /// * no for what the target said ([`Refused`](Self::Refused): every exit would hear the
    ///   same), a broken protocol, a cancel, or a code this version does not know.
    pub fn retry_elsewhere(self) -> bool {
        matches!(
            self,
            ResetReason::Timeout
                | ResetReason::Unreachable
                | ResetReason::ResourceLimit
                | ResetReason::Policy
                | ResetReason::CircuitLost
        )
    }

    /// The wire code.
    pub fn code(self) -> u8 {
        match self {
            ResetReason::Refused => 1,
            ResetReason::Timeout => 2,
            ResetReason::Policy => 3,
            ResetReason::Unreachable => 4,
            ResetReason::Protocol => 5,
            ResetReason::Cancelled => 6,
            ResetReason::ResourceLimit => 7,
            ResetReason::CircuitLost => 8,
            ResetReason::Other(c) => c,
        }
    }

    /// The reason for a wire code.
    pub fn from_code(code: u8) -> Self {
        match code {
            1 => ResetReason::Refused,
            2 => ResetReason::Timeout,
            3 => ResetReason::Policy,
            4 => ResetReason::Unreachable,
            5 => ResetReason::Protocol,
            6 => ResetReason::Cancelled,
            7 => ResetReason::ResourceLimit,
            8 => ResetReason::CircuitLost,
            c => ResetReason::Other(c),
        }
    }
}

impl fmt::Display for ResetReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResetReason::Refused => f.write_str("connection refused by the target"),
            ResetReason::Timeout => f.write_str("timed out"),
            ResetReason::Policy => f.write_str("the exit's policy does not allow the target"),
            ResetReason::Unreachable => f.write_str("target unreachable or not resolvable"),
            ResetReason::Protocol => f.write_str("stream protocol violation"),
            ResetReason::Cancelled => f.write_str("closed by the other side"),
            ResetReason::ResourceLimit => f.write_str("a resource limit was reached"),
            ResetReason::CircuitLost => f.write_str("the circuit ended"),
            ResetReason::Other(c) => write!(f, "reason code {c}"),
        }
    }
}

/// How the streams of a circuit behave.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamConfig {
    /// FEC of each stream direction (`symbol_size` is forced to [`FORWARD_SYMBOL_SIZE`] or
    /// [`BACKWARD_SYMBOL_SIZE`] by direction). Default:
    /// blocks of up to 2 048 symbols (about 2 MiB; a receiver refuses larger ones), 64 blocks in
    /// flight (a bulk sender sizes its blocks to keep about 16 out, see
    /// `nyx_fec::Sender::coalescing`), 2 ms flush delay, 10 ms feedback interval, 20 ms
    /// repair holdoff, the rest as [`FecConfig::default`]. What a receiver holds for
    /// undelivered blocks is bounded by the flow-control window, not by these: a peer that
    /// makes it hold more than twice what it may still send (plus 33 symbols a block) is
    /// reset. Large blocks are what makes bursts of loss cheap: a block that sees many
    /// bursts varies less in what it loses than one that sees a few.
    pub fec: FecConfig,
    /// Bytes a stream's receiver buffers ahead of its reader at first (default 2 MiB). A
    /// circuit's later streams start with the window an earlier one grew to, up to
    /// `max_stream_window`, which is the bound on what one stream buffers.
    pub stream_window: u64,
    /// The most a stream's window grows to (default 8 MiB). A receiver whose reader frees
    /// a quarter of the window in less than a round trip doubles it, up to this: the window,
    /// not the reader, was what held the stream back (at a 120 ms round trip 2 MiB allow
    /// about 8 MB/s at best). A slow reader never grows it.
    pub max_stream_window: u64,
    /// Streams open at once on one circuit; more are refused (default 256).
    pub max_streams: usize,
    /// An ACK is sent after this many packets that ask for one (default 32, the most a
    /// short ACK's 64-packet bitmap allows with one ACK lost; an ACK-only packet carries
    /// the wide form, 512 packets back)...
    ///
    /// Every ACK is a whole cell, and relays forward it on the same host links as the
    /// data going the other way: at one ACK per 8 packets, an eighth of a relay's uplink
    /// carried ACKs. Under Shadow (20 ms links, 100 Mbit/s hosts) 32 gave 5% more goodput
    /// per download; on loopback at 2-5% loss per link about 30% more (docs/benchmarks.md).
    pub ack_every: u32,
    /// ...or when the oldest waited this long (default 2 ms) or, once the path's RTT is
    /// known, an eighth of it if that is longer, up to 25 ms. On a long path the packets
    /// then count out the ACKs: under Shadow at 50 ms links, 2 ms came every 20 packets, and
    /// ACK cells took 5% of the relays' uplinks from the data (docs/benchmarks.md). The
    /// sender's probe timeout allows for the same delay.
    pub max_ack_delay: Duration,
    /// The circuit's congestion control.
    pub cc: CcConfig,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            fec: FecConfig {
                symbol_size: FORWARD_SYMBOL_SIZE,
                max_block_symbols: 2048,
                max_blocks_in_flight: 64,
                flush_delay: Duration::from_millis(2),
                feedback_interval: Duration::from_millis(10),
                repair_holdoff: Duration::from_millis(20),
                ..FecConfig::default()
            },
            stream_window: 2 * 1024 * 1024,
            max_stream_window: 8 * 1024 * 1024,
            max_streams: 256,
            ack_every: 32,
            max_ack_delay: Duration::from_millis(2),
            cc: CcConfig::default(),
        }
    }
}

impl StreamConfig {
    /// The first field that cannot work, as (field, reason).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let mut fec = self.fec.clone();
        fec.symbol_size = BACKWARD_SYMBOL_SIZE;
        if let Err(e) = fec.validate() {
            return Some(("fec", e.to_string()));
        }
        if self.stream_window < INITIAL_STREAM_WINDOW {
            return Some((
                "stream_window",
                format!("must be at least {INITIAL_STREAM_WINDOW}"),
            ));
        }
        if self.max_stream_window < self.stream_window {
            return Some(("max_stream_window", "must be at least stream_window".into()));
        }
        if self.max_streams == 0 {
            return Some(("max_streams", "must be at least 1".into()));
        }
        if self.ack_every == 0 || self.ack_every > 32 {
            return Some(("ack_every", "must be within 1..=32".into()));
        }
        if self.max_ack_delay.is_zero() {
            return Some(("max_ack_delay", "must be positive".into()));
        }
        if let Some((field, reason)) = self.cc.problem() {
            return Some((field, reason.into()));
        }
        None
    }
}

/// The target of a stream that asks the circuit's last hop itself for directory
/// information (Tor's BEGIN_DIR) instead of a connection onward. It cannot be mistaken for a
/// `host:port` target: it has no port.
pub const DIRECTORY_TARGET: &str = "@directory";

/// Something that happened to a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// (Exit) a client asks for a stream to `target`: connect, then
    /// [`StreamMux::accept`] or [`StreamMux::reset`].
    Incoming {
        /// The stream.
        stream: StreamId,
        /// "host:port" as the client sent it.
        target: String,
    },
    /// (Client) the exit connected the stream.
    Opened(StreamId),
    /// Bytes (or the end) became readable after a read found nothing.
    Readable(StreamId),
    /// Room to write appeared after a write was refused.
    Writable(StreamId),
    /// The stream was reset (by the peer, or locally by a protocol error).
    Reset {
        /// The stream.
        stream: StreamId,
        /// Why.
        reason: ResetReason,
    },
}
