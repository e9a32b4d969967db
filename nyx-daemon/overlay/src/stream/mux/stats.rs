//! What a mux counts: [`MuxStats`], and the FEC counters of its streams summed.

use std::time::Duration;

use super::StreamMux;

/// Counters of a mux (the circuit end), for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct MuxStats {
    /// Packets sent (all kinds).
    pub packets_sent: u64,
    /// Of those, bare acknowledgements.
    pub ack_only_sent: u64,
    /// Packets received and parsed.
    pub packets_received: u64,
    /// Packets received twice (onion replay protection normally stops these first).
    pub duplicates: u64,
    /// Packets that did not parse, or broke the protocol (dropped whole).
    pub malformed: u64,
    /// In-flight packets declared lost.
    pub lost: u64,
    /// Control frames sent again after a loss.
    pub controls_resent: u64,
    /// Second copies of OPEN and OPENED sent (one per stream normally).
    pub echoes_sent: u64,
    /// Probe timeouts (nothing acknowledged for a while).
    pub probe_timeouts: u64,
    /// Streams opened (client) or accepted (exit).
    pub streams_opened: u64,
    /// Streams reset, by either side.
    pub streams_reset: u64,
    /// FEC symbol packets sent, over all streams (source, repair, probes).
    pub fec_packets: u64,
    /// Source symbols those carried data for: `fec_packets / fec_source_symbols` is the
    /// FEC overhead (1.0 = none).
    pub fec_source_symbols: u64,
    /// FEC blocks those made up: `fec_source_symbols / fec_blocks` is the mean block size
    /// in symbols (a bulk sender's blocks follow what it has in flight).
    pub fec_blocks: u64,
    /// Repair symbols sent in answer to requests (second rounds).
    pub fec_requested_repair: u64,
    /// RaptorQ encoders built on the packet path, when a block's repair was due.
    pub fec_encoders_inline: u64,
    /// RaptorQ encoders built ahead by a [`FecJob`](super::FecJob) and used.
    pub fec_encoders_prepared: u64,
    /// The congestion window now, in cells.
    pub window: u32,
    /// Cells in flight now.
    pub in_flight: u32,
    /// Congestion cuts so far.
    pub congestion_events: u64,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// Smallest RTT seen (`Duration::MAX` before the first sample).
    pub min_rtt: Duration,
    /// FEC blocks sent and not yet acknowledged now, over all streams (a stream holds at
    /// most `max_blocks_in_flight`: when every sending stream is there, the FEC window and
    /// not the congestion window limits).
    pub blocks_in_flight: u32,
    /// Stream bytes the peer's flow control still lets this end send now, over the streams
    /// that have not finished sending (near zero: the reader's window limits).
    pub send_credit: u64,
}

impl MuxStats {
    /// Add another mux's counters (the window, RTTs and in-flight count: the larger).
    pub fn accumulate(&mut self, o: &MuxStats) {
        self.packets_sent += o.packets_sent;
        self.ack_only_sent += o.ack_only_sent;
        self.packets_received += o.packets_received;
        self.duplicates += o.duplicates;
        self.malformed += o.malformed;
        self.lost += o.lost;
        self.controls_resent += o.controls_resent;
        self.echoes_sent += o.echoes_sent;
        self.probe_timeouts += o.probe_timeouts;
        self.streams_opened += o.streams_opened;
        self.streams_reset += o.streams_reset;
        self.fec_packets += o.fec_packets;
        self.fec_source_symbols += o.fec_source_symbols;
        self.fec_blocks += o.fec_blocks;
        self.fec_requested_repair += o.fec_requested_repair;
        self.fec_encoders_inline += o.fec_encoders_inline;
        self.fec_encoders_prepared += o.fec_encoders_prepared;
        self.congestion_events += o.congestion_events;
        self.window = self.window.max(o.window);
        self.in_flight = self.in_flight.max(o.in_flight);
        self.blocks_in_flight += o.blocks_in_flight;
        self.send_credit += o.send_credit;
        self.srtt = self.srtt.max(o.srtt);
        self.min_rtt = if self.min_rtt.is_zero() {
            o.min_rtt
        } else {
            self.min_rtt.min(o.min_rtt)
        };
    }

    /// FEC symbol packets sent per source symbol (1.0 = no overhead; 0 before any data).
    pub fn fec_overhead(&self) -> f64 {
        if self.fec_source_symbols == 0 {
            return 0.0;
        }
        self.fec_packets as f64 / self.fec_source_symbols as f64
    }
}

impl StreamMux {
    /// Counters.
    pub fn stats(&self) -> MuxStats {
        let mut s = self.stats;
        let mut fec = self.done_fec;
        for stream in self.streams.values() {
            fec.add(&stream.tx.stats());
            s.blocks_in_flight += stream.tx.blocks_in_flight() as u32;
            if stream.fin.is_none() {
                s.send_credit += stream.peer_max.saturating_sub(stream.written);
            }
        }
        s.fec_packets = fec.packets;
        s.fec_source_symbols = fec.source_symbols;
        s.fec_blocks = fec.blocks;
        s.fec_requested_repair = fec.requested_repair;
        s.fec_encoders_inline = fec.encoders_inline;
        s.fec_encoders_prepared = fec.encoders_prepared;
        s.window = self.cc.window();
        s.in_flight = self.sent.in_flight();
        s.congestion_events = self.cc.congestion_events();
        let rtt = self.sent.rtt();
        s.srtt = rtt.smoothed;
        s.min_rtt = rtt.min;
        s
    }
}

/// FEC counters summed over streams.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FecTotals {
    packets: u64,
    source_symbols: u64,
    blocks: u64,
    requested_repair: u64,
    encoders_inline: u64,
    encoders_prepared: u64,
}

impl FecTotals {
    pub(super) fn add(&mut self, t: &nyx_fec::SenderStats) {
        self.packets += t.packets;
        self.source_symbols += t.source_symbols;
        self.blocks += t.blocks;
        self.requested_repair += t.requested_repair;
        self.encoders_inline += t.encoders_inline;
        self.encoders_prepared += t.encoders_prepared;
    }
}
