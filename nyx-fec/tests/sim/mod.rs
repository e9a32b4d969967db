//! A deterministic channel model and a driver that runs a nyx-fec stream over it: seeded
//! loss (independent or Gilbert-Elliott bursts, with a schedule of changes), delay with
//! jitter (which reorders), and duplication, in both directions. Simulated time only.

#![allow(dead_code, clippy::unwrap_used)]

/// A packet on the wire: (arrival, order, to the receiver?, bytes), earliest first.
type InFlight = Reverse<(Duration, u64, bool, Vec<u8>)>;

use std::cmp::Reverse;
pub(crate) mod svg;

use std::collections::BinaryHeap;
use std::time::Duration;

use nyx_core::Timestamp;
use nyx_fec::{FecConfig, Receiver, Sender, SenderStats};

/// splitmix64: small, seeded, good enough for a channel model.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// How packets are lost.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Loss {
    /// Each packet lost with probability p.
    Iid(f64),
    /// Gilbert-Elliott: average loss rate p in bursts of mean length `burst` (all packets
    /// in the bad state are lost, none in the good state).
    Bursty { p: f64, burst: f64 },
    /// Packets go in batches of `run`, and each batch is lost whole with probability p: a
    /// firewall that drops a GSO send (nft on the output hook) as one packet.
    Batches { p: f64, run: u32 },
}

/// One direction of the channel.
pub(crate) struct Channel {
    rng: Rng,
    /// (from time, loss model): the model in force changes at these times.
    pub(crate) schedule: Vec<(Duration, Loss)>,
    bad: bool,
    /// Packets sent so far (for batch boundaries).
    sent: u64,
    pub(crate) delay: Duration,
    pub(crate) jitter: Duration,
    pub(crate) duplicate: f64,
}

impl Channel {
    pub(crate) fn new(seed: u64, loss: Loss) -> Self {
        Channel {
            rng: Rng::new(seed),
            schedule: vec![(Duration::ZERO, loss)],
            bad: false,
            sent: 0,
            delay: Duration::from_millis(30),
            jitter: Duration::ZERO,
            duplicate: 0.0,
        }
    }

    fn loss_at(&self, t: Duration) -> Loss {
        self.schedule
            .iter()
            .rev()
            .find(|(from, _)| *from <= t)
            .map_or(Loss::Iid(0.0), |(_, l)| *l)
    }

    /// Arrival times of the copies of one packet sent at `t` (empty if lost).
    pub(crate) fn send(&mut self, t: Duration) -> Vec<Duration> {
        let lost = match self.loss_at(t) {
            Loss::Iid(p) => self.rng.unit() < p,
            Loss::Bursty { p, burst } => {
                // Leave the bad state with probability 1/burst; enter it so that the
                // stationary fraction of bad packets is p.
                let leave = 1.0 / burst;
                let enter = if p >= 1.0 { 1.0 } else { p * leave / (1.0 - p) };
                let u = self.rng.unit();
                self.bad = if self.bad { u >= leave } else { u < enter };
                self.bad
            }
            Loss::Batches { p, run } => {
                if self.sent.is_multiple_of(u64::from(run.max(1))) {
                    self.bad = self.rng.unit() < p;
                }
                self.bad
            }
        };
        self.sent += 1;
        if lost {
            return Vec::new();
        }
        let mut arrivals = vec![self.arrival(t)];
        if self.rng.unit() < self.duplicate {
            arrivals.push(self.arrival(t));
        }
        arrivals
    }

    fn arrival(&mut self, t: Duration) -> Duration {
        let j = self.jitter.as_nanos() as f64 * self.rng.unit();
        t + self.delay + Duration::from_nanos(j as u64)
    }
}

/// A run's outcome.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) delivered: Vec<u8>,
    pub(crate) sender: SenderStats,
    pub(crate) elapsed: Duration,
    /// (time, estimated loss, up-front redundancy of the block closed then) per block.
    pub(crate) per_block: Vec<(Duration, f64, f64)>,
    /// The controller's trim at the end.
    pub(crate) trim: f64,
    /// Bytes delivered to the reader, per 100 ms of simulated time.
    pub(crate) goodput: Vec<u64>,
}

impl Outcome {
    pub(crate) fn overhead(&self) -> f64 {
        self.sender.packets as f64 / self.sender.source_symbols as f64
    }
    pub(crate) fn second_round(&self) -> f64 {
        self.sender.second_round_blocks as f64 / self.sender.blocks as f64
    }
}

/// Send `data` through `forward` with feedback over `backward`; one packet every `tick`.
pub(crate) fn run(
    config: &FecConfig,
    data: &[u8],
    mut forward: Channel,
    mut backward: Channel,
    tick: Duration,
    limit: Duration,
) -> Outcome {
    let t0 = Timestamp::ZERO;
    let at = |d: Duration| t0.saturating_add(d);
    let mut tx = Sender::new(config.clone(), t0).unwrap();
    let mut rx = Receiver::new(config.clone()).unwrap();
    // (arrival, order, to_receiver, bytes)
    let mut wire: BinaryHeap<InFlight> = BinaryHeap::new();
    let mut order = 0u64;
    let mut written = 0usize;
    let mut delivered = Vec::with_capacity(data.len());
    let mut packet =
        vec![0u8; nyx_fec::packet::SYMBOL_HEADER_LEN + usize::from(config.symbol_size)];
    let mut fb = [0u8; nyx_fec::packet::MAX_FEEDBACK_LEN];
    let mut read_buf = vec![0u8; 1 << 16];
    let mut per_block = Vec::new();
    let mut goodput = Vec::new();
    let mut t = Duration::ZERO;
    while t < limit {
        let now = at(t);
        // The application writes as much as the window takes, then flushes the tail.
        if written < data.len() {
            written += tx.write(&data[written..], now).unwrap();
            if written == data.len() {
                tx.flush(now).unwrap();
            }
        }
        let before = tx.stats();
        if tx.poll_timeout().is_some_and(|d| d <= now) {
            tx.handle_timeout(now).unwrap();
        }
        let sent = tx.poll_transmit(now, &mut packet).unwrap();
        let after = tx.stats();
        if after.decided_blocks > before.decided_blocks {
            let r = (after.upfront_repair - before.upfront_repair) as f64
                / f64::from(config.max_block_symbols);
            per_block.push((t, tx.estimated_loss(), r));
        }
        if let Some(n) = sent {
            for arrival in forward.send(t) {
                order += 1;
                wire.push(Reverse((arrival, order, true, packet[..n].to_vec())));
            }
        }
        while wire.peek().is_some_and(|Reverse((a, ..))| *a <= t) {
            let Some(Reverse((_, _, to_rx, bytes))) = wire.pop() else {
                break;
            };
            if to_rx {
                rx.handle_packet(&bytes, now).unwrap();
            } else {
                tx.handle_feedback(&bytes, now).unwrap();
            }
        }
        if let Some(n) = rx.poll_feedback(now, &mut fb).unwrap() {
            for arrival in backward.send(t) {
                order += 1;
                wire.push(Reverse((arrival, order, false, fb[..n].to_vec())));
            }
        }
        loop {
            let n = rx.read(&mut read_buf);
            if n == 0 {
                break;
            }
            delivered.extend_from_slice(&read_buf[..n]);
            let slot = (t.as_millis() / 100) as usize;
            if goodput.len() <= slot {
                goodput.resize(slot + 1, 0);
            }
            goodput[slot] += n as u64;
        }
        if delivered.len() == data.len() && tx.is_idle() {
            break;
        }
        t += tick;
    }
    Outcome {
        delivered,
        sender: tx.stats(),
        elapsed: t,
        per_block,
        goodput,
        trim: tx.redundancy_trim(),
    }
}

/// Deterministic pseudo-random stream contents.
pub(crate) fn stream(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}
