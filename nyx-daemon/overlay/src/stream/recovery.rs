//! Packet bookkeeping of a circuit endpoint: which packets are in flight, which were
//! acknowledged or lost, the round-trip time, and what this side owes the peer in
//! acknowledgements. Stream data is never resent (FEC repairs it); only [`Control`] frames
//! of a lost packet are queued again.

use std::collections::VecDeque;
use std::time::Duration;

use nyx_core::Timestamp;

use super::wire::{ACK_WIDE_BITS, ACK_WORDS, Ack, Control};

/// A packet is declared lost when this many later packets were acknowledged...
const PACKET_THRESHOLD: u32 = 8;
/// ...or when a later packet was acknowledged and it is older than 9/8 of the RTT plus this.
const TIME_THRESHOLD_SLACK: Duration = Duration::from_millis(2);
/// RTT assumed before the first sample.
const INITIAL_RTT: Duration = Duration::from_millis(50);

/// One packet sent and not yet settled.
#[derive(Debug)]
struct Sent {
    at: Timestamp,
    /// Counted against the congestion window (anything but a bare ACK).
    in_flight: bool,
    /// Control frames to queue again if the packet is lost.
    controls: Vec<Control>,
    settled: bool,
}

/// What one acknowledgement or loss scan settled.
#[derive(Debug, Default)]
pub(super) struct Settled {
    /// In-flight packets newly acknowledged.
    pub(super) acked: u32,
    /// In-flight packets newly declared lost.
    pub(super) lost: u32,
    /// Control frames of the acknowledged packets (so FIN and RESET can complete).
    pub(super) acked_controls: Vec<Control>,
    /// Control frames of the lost packets, to send again.
    pub(super) lost_controls: Vec<Control>,
    /// An RTT sample, if the largest acknowledged packet was new.
    pub(super) rtt: Option<Duration>,
}

/// The longest an ACK is held on a long path ([`Rtt::ack_delay`]): RFC 9000's default
/// `max_ack_delay`.
pub(super) const MAX_ACK_DELAY: Duration = Duration::from_millis(25);

/// Round-trip estimates (RFC 6298 / RFC 9002 style).
#[derive(Debug, Clone, Copy)]
pub(super) struct Rtt {
    /// Smoothed RTT.
    pub(super) smoothed: Duration,
    /// Mean deviation.
    pub(super) var: Duration,
    /// Latest sample.
    pub(super) latest: Duration,
    /// Smallest sample seen.
    pub(super) min: Duration,
    has_sample: bool,
    /// Seeded with the circuit's measured round trip ([`Rtt::seed`]).
    seeded: bool,
}

impl Default for Rtt {
    fn default() -> Self {
        Rtt {
            smoothed: INITIAL_RTT,
            var: INITIAL_RTT / 2,
            latest: INITIAL_RTT,
            min: Duration::MAX,
            has_sample: false,
            seeded: false,
        }
    }
}

impl Rtt {
    /// How long after a symbol left the peer's report of it missing means it was lost:
    /// RFC 9002's time threshold (9/8 of the larger of the smoothed and the latest RTT)
    /// plus 2 ms of timer granularity. Before any sample, from the initial RTT.
    pub(super) fn repair_delay(&self) -> Duration {
        self.smoothed.max(self.latest) * 9 / 8 + Duration::from_millis(2)
    }

    /// Before the first sample, assume `rtt` instead of the initial guess.
    pub(super) fn seed(&mut self, rtt: Duration) {
        if !self.has_sample {
            self.smoothed = rtt;
            self.var = rtt / 2;
            self.latest = rtt;
            self.seeded = true;
        }
    }

    /// How long a receiver may hold an ACK on this path: an eighth of the smoothed RTT,
    /// at least `floor` and at most [`MAX_ACK_DELAY`] (`floor` alone while the RTT is only
    /// the initial guess). Both ends apply it: the receiver when it holds ACKs, the sender
    /// when it waits for them ([`super::StreamMux`]'s probe timeout), each with its own
    /// estimate of the same round trip.
    pub(super) fn ack_delay(&self, floor: Duration) -> Duration {
        if !self.has_sample && !self.seeded {
            return floor;
        }
        (self.smoothed / 8).min(MAX_ACK_DELAY).max(floor)
    }

    fn update(&mut self, sample: Duration) {
        self.latest = sample;
        self.min = self.min.min(sample);
        if !self.has_sample {
            self.has_sample = true;
            self.smoothed = sample;
            self.var = sample / 2;
            return;
        }
        let diff = self.smoothed.abs_diff(sample);
        self.var = (self.var * 3 + diff) / 4;
        self.smoothed = (self.smoothed * 7 + sample) / 8;
    }
}

/// The sending side's record of packets.
#[derive(Debug, Default)]
pub(super) struct SentPackets {
    /// Packet number of `packets[0]`.
    base: u32,
    packets: VecDeque<Sent>,
    next_pn: u32,
    largest_acked: Option<u32>,
    in_flight: u32,
    last_in_flight_sent: Option<Timestamp>,
    rtt: Rtt,
}

impl SentPackets {
    /// The number the next packet gets, if any remain.
    pub(super) fn next_pn(&self) -> Option<u32> {
        (self.next_pn < u32::MAX).then_some(self.next_pn)
    }

    /// Record packet [`next_pn`](Self::next_pn) as sent at `now`.
    pub(super) fn on_sent(&mut self, now: Timestamp, in_flight: bool, controls: Vec<Control>) {
        if self.packets.is_empty() {
            self.base = self.next_pn;
        }
        self.packets.push_back(Sent {
            at: now,
            in_flight,
            controls,
            settled: false,
        });
        self.next_pn += 1;
        if in_flight {
            self.in_flight += 1;
            self.last_in_flight_sent = Some(now);
        }
    }

    /// The largest packet number the peer acknowledged.
    pub(super) fn largest_acked(&self) -> Option<u32> {
        self.largest_acked
    }

    /// Packets counted against the window now.
    pub(super) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The RTT estimates.
    pub(super) fn rtt(&self) -> &Rtt {
        &self.rtt
    }

    /// Take `rtt` as the estimate until the first sample ([`Rtt::seed`]).
    pub(super) fn seed_rtt(&mut self, rtt: Duration) {
        self.rtt.seed(rtt);
    }

    /// When an in-flight packet was last sent.
    pub(super) fn last_in_flight_sent(&self) -> Option<Timestamp> {
        self.last_in_flight_sent
    }

    /// Apply an acknowledgement, then declare lost what it shows to be lost. An ACK for a
    /// packet never sent is ignored (returns `None`).
    pub(super) fn on_ack(&mut self, ack: &Ack, now: Timestamp) -> Option<Settled> {
        if ack.largest >= self.next_pn {
            return None;
        }
        let mut out = Settled::default();
        let lowest = ack.largest.saturating_sub(ACK_WIDE_BITS).max(self.base);
        for pn in lowest..=ack.largest {
            if !ack.covers(pn) {
                continue;
            }
            let Some(sent) = self.get_mut(pn) else {
                continue;
            };
            if sent.settled {
                continue;
            }
            sent.settled = true;
            let (in_flight, at) = (sent.in_flight, sent.at);
            let controls = std::mem::take(&mut sent.controls);
            if in_flight {
                self.in_flight -= 1;
                out.acked += 1;
            }
            out.acked_controls.extend(controls);
            if pn == ack.largest && self.largest_acked.is_none_or(|l| pn > l) {
                // The peer's reported hold time is taken out, but never below the
                // smallest RTT seen (a peer cannot talk the estimate below physics).
                let raw = now.saturating_duration_since(at);
                let floor = if self.rtt.has_sample {
                    self.rtt.min.min(raw)
                } else {
                    Duration::from_micros(1).min(raw)
                };
                let sample = raw.saturating_sub(ack.delay).max(floor);
                self.rtt.update(sample);
                out.rtt = Some(sample);
            }
        }
        if self.largest_acked.is_none_or(|l| ack.largest > l) {
            self.largest_acked = Some(ack.largest);
        }
        self.detect_lost(now, &mut out);
        self.trim();
        Some(out)
    }

    /// Declare lost, at `now`, what the time threshold allows (the loss timer fired).
    pub(super) fn on_loss_timer(&mut self, now: Timestamp) -> Settled {
        let mut out = Settled::default();
        self.detect_lost(now, &mut out);
        self.trim();
        out
    }

    /// When the oldest unsettled packet below the largest acknowledged one becomes lost by
    /// the time threshold.
    pub(super) fn loss_deadline(&self) -> Option<Timestamp> {
        let largest = self.largest_acked?;
        let delay = self.loss_delay();
        self.packets
            .iter()
            .enumerate()
            .take_while(|(i, _)| self.base.wrapping_add(*i as u32) < largest)
            .find(|(_, s)| !s.settled)
            .map(|(_, s)| s.at.saturating_add(delay))
    }

    /// Forget everything in flight (the circuit is gone); returns the count.
    pub(super) fn abandon(&mut self) -> u32 {
        let n = self.in_flight;
        self.packets.clear();
        self.in_flight = 0;
        n
    }

    fn loss_delay(&self) -> Duration {
        self.rtt.smoothed.max(self.rtt.latest).mul_f64(1.125) + TIME_THRESHOLD_SLACK
    }

    fn detect_lost(&mut self, now: Timestamp, out: &mut Settled) {
        let Some(largest) = self.largest_acked else {
            return;
        };
        let delay = self.loss_delay();
        for (i, sent) in self.packets.iter_mut().enumerate() {
            let pn = self.base.wrapping_add(i as u32);
            if pn >= largest {
                break;
            }
            if sent.settled {
                continue;
            }
            let by_count = largest - pn >= PACKET_THRESHOLD;
            let by_time = now >= sent.at.saturating_add(delay);
            if by_count || by_time {
                sent.settled = true;
                if sent.in_flight {
                    self.in_flight -= 1;
                    out.lost += 1;
                }
                out.lost_controls.append(&mut sent.controls);
            }
        }
    }

    fn get_mut(&mut self, pn: u32) -> Option<&mut Sent> {
        let i = pn.checked_sub(self.base)?;
        self.packets.get_mut(i as usize)
    }

    fn trim(&mut self) {
        while self.packets.front().is_some_and(|s| s.settled) {
            self.packets.pop_front();
            self.base = self.base.wrapping_add(1);
        }
    }
}

/// The receiving side's acknowledgement state.
#[derive(Debug, Default)]
pub(super) struct AckState {
    largest: Option<u32>,
    largest_at: Timestamp,
    /// Packets below the largest, as an [`Ack`] reports them (wide: a short ACK sends the
    /// first word).
    bitmap: [u64; ACK_WORDS],
    /// Ack-eliciting packets received since the last ACK sent.
    pending: u32,
    /// When the first of them arrived.
    pending_since: Option<Timestamp>,
}

impl AckState {
    /// Record packet `pn`; returns false for a duplicate (its frames are still safe to
    /// process: every frame is idempotent).
    pub(super) fn on_packet(&mut self, pn: u32, ack_eliciting: bool, now: Timestamp) -> bool {
        let fresh = match self.largest {
            None => {
                self.largest = Some(pn);
                self.largest_at = now;
                true
            }
            Some(l) if pn > l => {
                shift_in(&mut self.bitmap, pn - l);
                self.largest = Some(pn);
                self.largest_at = now;
                true
            }
            Some(l) if pn == l => false,
            Some(l) => {
                let d = l - pn;
                if d > ACK_WIDE_BITS {
                    true // too old to tell; count it as new
                } else {
                    let i = (d - 1) as usize;
                    let bit = 1u64 << (i % 64);
                    let fresh = self.bitmap[i / 64] & bit == 0;
                    self.bitmap[i / 64] |= bit;
                    fresh
                }
            }
        };
        if ack_eliciting && fresh {
            self.pending += 1;
            self.pending_since.get_or_insert(now);
        }
        fresh
    }

    /// Whether an ACK must go out now: `every` ack-eliciting packets arrived, or the oldest
    /// waited `max_delay`.
    pub(super) fn due(&self, now: Timestamp, every: u32, max_delay: Duration) -> bool {
        self.pending >= every || self.deadline(max_delay).is_some_and(|t| now >= t)
    }

    /// Ack-eliciting packets received since the last ACK was taken.
    pub(super) fn unreported(&self) -> u32 {
        self.pending
    }

    /// Whether anything is unacknowledged (an ACK can ride along in any packet).
    pub(super) fn has_pending(&self) -> bool {
        self.pending > 0
    }

    /// Whether any packet was received (there is an ACK to repeat).
    pub(super) fn has_received(&self) -> bool {
        self.largest.is_some()
    }

    /// When an ACK becomes due by delay.
    pub(super) fn deadline(&self, max_delay: Duration) -> Option<Timestamp> {
        self.pending_since.map(|t| t.saturating_add(max_delay))
    }

    /// The ACK to send at `now` (resets the pending count), if anything was received.
    pub(super) fn take(&mut self, now: Timestamp) -> Option<Ack> {
        let largest = self.largest?;
        self.pending = 0;
        self.pending_since = None;
        Some(Ack {
            largest,
            delay: now.saturating_duration_since(self.largest_at),
            bitmap: self.bitmap,
        })
    }
}

/// The largest received moved up by `shift`: every bit `i` becomes bit `i + shift` (bits
/// beyond the bitmap are forgotten), and the old largest becomes bit `shift - 1`.
fn shift_in(bitmap: &mut [u64; ACK_WORDS], shift: u32) {
    let (words, bits) = ((shift / 64) as usize, shift % 64);
    for j in (0..ACK_WORDS).rev() {
        bitmap[j] = match j.checked_sub(words) {
            None => 0,
            Some(from) => {
                let carry = match from.checked_sub(1) {
                    Some(below) if bits > 0 => bitmap[below] >> (64 - bits),
                    _ => 0,
                };
                bitmap[from] << bits | carry
            }
        };
    }
    let old = (shift - 1) as usize;
    if old < 64 * ACK_WORDS {
        bitmap[old / 64] |= 1 << (old % 64);
    }
}

#[cfg(test)]
mod tests;
