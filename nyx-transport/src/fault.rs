//! A seeded fault-injection shim for tests of links and everything above them: drops,
//! delays, reorders and duplicates datagrams (the kernel's netem is not available here).
//!
//! [`FaultShim`] is the sans-IO core: push datagrams in with the time they arrived, pop them
//! out when they are due. [`FaultySocket`] applies it to what a UDP socket receives, so any
//! transport reading through it sees a lossy, reordering network between real sockets;
//! [`crate::udp::UdpTransport::set_faults`] puts it on the UDP transport's receive
//! path, and [`FaultyQuicSocket`] is the QUIC endpoint's equivalent.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use nyx_core::Timestamp;
use nyx_core::time::CoarseClock;
use tokio::net::UdpSocket;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// What the shim does to datagrams. All rates are probabilities per datagram.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Probability a datagram is dropped. Default 0.
    pub loss: f64,
    /// Probability a datagram is delivered twice. Default 0.
    pub duplicate: f64,
    /// Probability a datagram is held back by up to `reorder_window` extra, so later ones
    /// overtake it. Default 0.
    pub reorder: f64,
    /// How far a reordered datagram may be held back. Default 20 ms.
    pub reorder_window: Duration,
    /// Delay added to every datagram. Default 0.
    pub delay: Duration,
    /// Seed of the random choices: the same seed and inputs give the same faults.
    pub seed: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_window: Duration::from_millis(20),
            delay: Duration::ZERO,
            seed: 1,
        }
    }
}

impl FaultConfig {
    /// Whether a shim with this configuration would change anything: some loss,
    /// duplication, reordering or delay. The seed and the reorder window alone change
    /// nothing, so a caller that varies only the seed (one per node) need not pay for a
    /// shim that passes every datagram through.
    pub fn injects_faults(&self) -> bool {
        self.loss > 0.0 || self.duplicate > 0.0 || self.reorder > 0.0 || !self.delay.is_zero()
    }
}

/// What the shim did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Datagrams pushed in.
    pub seen: u64,
    /// Dropped.
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Held back to be overtaken.
    pub reordered: u64,
}

/// A [`FaultStats`] shared between the task that owns a shim and the test reading it (the
/// shim of [`crate::udp::UdpTransport::set_faults`] lives inside the running
/// transport). Cheap to clone; every clone reads the same counters.
#[derive(Debug, Clone, Default)]
pub struct FaultCounters {
    stats: Arc<std::sync::Mutex<FaultStats>>,
}

impl FaultCounters {
    /// What the shim did so far.
    pub fn get(&self) -> FaultStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    /// Publish the shim's latest counters.
    pub(crate) fn set(&self, stats: FaultStats) {
        if let Ok(mut s) = self.stats.lock() {
            *s = stats;
        }
    }
}

/// The sans-IO shim: a seeded decision per datagram and a queue ordered by release time.
#[derive(Debug)]
pub struct FaultShim<T> {
    config: FaultConfig,
    rng: u64,
    order: u64,
    queue: BinaryHeap<Reverse<Queued<T>>>,
    stats: FaultStats,
}

#[derive(Debug)]
struct Queued<T> {
    due: Timestamp,
    order: u64,
    item: T,
}

impl<T> PartialEq for Queued<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.order) == (other.due, other.order)
    }
}
impl<T> Eq for Queued<T> {}
impl<T> PartialOrd for Queued<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Queued<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.order).cmp(&(other.due, other.order))
    }
}

impl<T: Clone> FaultShim<T> {
    /// A shim with `config`.
    pub fn new(config: FaultConfig) -> Self {
        FaultShim {
            rng: config.seed,
            config,
            order: 0,
            queue: BinaryHeap::new(),
            stats: FaultStats::default(),
        }
    }

    /// A datagram arrived at `now`: drop it, or queue it (and maybe a copy) for release.
    pub fn push(&mut self, now: Timestamp, item: T) {
        self.stats.seen += 1;
        if self.unit() < self.config.loss {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.unit() < self.config.duplicate {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut due = now.saturating_add(self.config.delay);
            if self.unit() < self.config.reorder {
                self.stats.reordered += 1;
                let extra = self.config.reorder_window.mul_f64(self.unit());
                due = due.saturating_add(extra);
            }
            self.order += 1;
            self.queue.push(Reverse(Queued {
                due,
                order: self.order,
                item: item.clone(),
            }));
        }
    }

    /// The next datagram due at or before `now`.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<T> {
        if self.queue.peek().is_some_and(|Reverse(q)| q.due <= now) {
            self.queue.pop().map(|Reverse(q)| q.item)
        } else {
            None
        }
    }

    /// When the next queued datagram is due.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.queue.peek().map(|Reverse(q)| q.due)
    }

    /// What the shim did so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// A uniform number in [0, 1) (splitmix64).
    fn unit(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A UDP socket whose received datagrams go through a [`FaultShim`]. Sending is unchanged
/// (faults are injected once, on the receiving side).
#[derive(Debug)]
pub struct FaultySocket {
    socket: UdpSocket,
    shim: Mutex<FaultShim<(Vec<u8>, SocketAddr)>>,
    /// The shim's time line.
    clock: CoarseClock,
}

impl FaultySocket {
    /// Wrap `socket`.
    pub fn new(socket: UdpSocket, config: FaultConfig) -> Self {
        FaultySocket {
            socket,
            shim: Mutex::new(FaultShim::new(config)),
            clock: CoarseClock::new(),
        }
    }

    /// The wrapped socket's local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Send as the plain socket would.
    pub async fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        self.socket.send_to(buf, to).await
    }

    /// Receive the next datagram the shim releases. Datagrams larger than `buf` are truncated,
    /// as with a plain socket.
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let mut scratch = vec![0u8; 65_536];
        loop {
            let mut shim = self.shim.lock().await;
            let now = self.now();
            if let Some((data, from)) = shim.pop_due(now) {
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                return Ok((n, from));
            }
            let wake = shim
                .next_due()
                .map(|due| Instant::from_std(self.clock.instant_of(due)));
            drop(shim);
            let received = match wake {
                Some(at) => tokio::select! {
                    r = self.socket.recv_from(&mut scratch) => Some(r?),
                    () = tokio::time::sleep_until(at) => None,
                },
                None => Some(self.socket.recv_from(&mut scratch).await?),
            };
            if let Some((n, from)) = received {
                let now = self.now();
                self.shim
                    .lock()
                    .await
                    .push(now, (scratch[..n].to_vec(), from));
            }
        }
    }

    /// What the shim did so far.
    pub async fn stats(&self) -> FaultStats {
        self.shim.lock().await.stats()
    }

    fn now(&self) -> Timestamp {
        self.clock.tick()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(config: FaultConfig, n: u32) -> (Vec<u32>, FaultStats) {
        let mut shim = FaultShim::new(config);
        let mut out = Vec::new();
        for i in 0..n {
            let now = Timestamp::from_nanos(u64::from(i) * 100_000);
            shim.push(now, i);
            while let Some(x) = shim.pop_due(now) {
                out.push(x);
            }
        }
        while let Some(due) = shim.next_due() {
            while let Some(x) = shim.pop_due(due) {
                out.push(x);
            }
        }
        (out, shim.stats())
    }

    #[test]
    fn rates_match_the_configuration() {
        let config = FaultConfig {
            loss: 0.10,
            duplicate: 0.05,
            reorder: 0.10,
            ..FaultConfig::default()
        };
        let (out, stats) = run(config, 100_000);
        let rate = |x: u64| x as f64 / 100_000.0;
        assert!((rate(stats.dropped) - 0.10).abs() < 0.005, "{stats:?}");
        assert!(
            (rate(stats.duplicated) / 0.9 - 0.05).abs() < 0.005,
            "{stats:?}"
        );
        assert_eq!(
            out.len() as u64,
            stats.seen - stats.dropped + stats.duplicated
        );
        let inversions = out.windows(2).filter(|w| w[1] < w[0]).count();
        assert!(inversions > 1000, "reordering visible: {inversions}");
    }

    #[test]
    fn only_a_configuration_that_changes_datagrams_injects_faults() {
        // Another seed or reorder window alone: the shim passes everything through in
        // order, so leaving it out changes nothing.
        let quiet = FaultConfig {
            seed: 7,
            reorder_window: Duration::from_millis(5),
            ..FaultConfig::default()
        };
        assert!(!quiet.injects_faults());
        let (out, stats) = run(quiet, 1000);
        assert_eq!(out, (0..1000).collect::<Vec<_>>());
        assert_eq!(stats.seen, 1000);
        let base = FaultConfig::default();
        for faulty in [
            FaultConfig {
                loss: 0.01,
                ..base.clone()
            },
            FaultConfig {
                duplicate: 0.01,
                ..base.clone()
            },
            FaultConfig {
                reorder: 0.01,
                ..base.clone()
            },
            FaultConfig {
                delay: Duration::from_micros(1),
                ..base.clone()
            },
        ] {
            assert!(faulty.injects_faults(), "{faulty:?}");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_faults() {
        let config = FaultConfig {
            loss: 0.2,
            reorder: 0.2,
            duplicate: 0.1,
            ..FaultConfig::default()
        };
        assert_eq!(run(config.clone(), 5000), run(config.clone(), 5000));
        let other = FaultConfig {
            seed: 2,
            ..config.clone()
        };
        assert_ne!(run(config, 5000).0, run(other, 5000).0);
    }

    #[test]
    fn a_clean_shim_is_transparent() {
        let (out, stats) = run(FaultConfig::default(), 1000);
        assert_eq!(out, (0..1000).collect::<Vec<_>>());
        assert_eq!(stats.dropped + stats.duplicated + stats.reordered, 0);
    }

    #[test]
    fn delay_holds_datagrams_until_due() {
        let mut shim = FaultShim::new(FaultConfig {
            delay: Duration::from_millis(30),
            ..FaultConfig::default()
        });
        shim.push(Timestamp::ZERO, 7u8);
        assert_eq!(shim.pop_due(Timestamp::from_millis(29)), None);
        assert_eq!(shim.next_due(), Some(Timestamp::from_millis(30)));
        assert_eq!(shim.pop_due(Timestamp::from_millis(30)), Some(7));
    }
}

/// A record of every datagram some sockets send, for tests that inspect the wire (all
/// datagrams of one size, no identifier in clear). Cheap to clone; share one between nodes.
#[derive(Debug, Clone, Default)]
pub struct WireTap {
    seen: Arc<std::sync::Mutex<TapLog>>,
}

#[derive(Debug, Default)]
struct TapLog {
    /// Sends recorded so far (system calls, a GSO batch being one).
    sends: u64,
    datagrams: Vec<TappedDatagram>,
}

/// One datagram a tapped socket sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TappedDatagram {
    /// Sender's address.
    pub from: SocketAddr,
    /// Destination.
    pub to: SocketAddr,
    /// The bytes on the wire.
    pub bytes: Vec<u8>,
    /// Which send carried it, counting every send the tap recorded from 0: the datagrams
    /// of one GSO batch share it.
    pub send: u64,
}

impl WireTap {
    /// An empty tap.
    pub fn new() -> Self {
        WireTap::default()
    }

    /// Record what one send carried: `contents` split into `segment_size` datagrams when
    /// it is a GSO batch.
    pub fn record(
        &self,
        from: SocketAddr,
        to: SocketAddr,
        contents: &[u8],
        segment_size: Option<usize>,
    ) {
        let size = segment_size.unwrap_or(contents.len()).max(1);
        if let Ok(mut log) = self.seen.lock() {
            let send = log.sends;
            log.sends += 1;
            for chunk in contents.chunks(size) {
                log.datagrams.push(TappedDatagram {
                    from,
                    to,
                    bytes: chunk.to_vec(),
                    send,
                });
            }
        }
    }

    /// Everything recorded so far, emptying the record (the send count goes on).
    pub fn take(&self) -> Vec<TappedDatagram> {
        self.seen
            .lock()
            .map(|mut log| std::mem::take(&mut log.datagrams))
            .unwrap_or_default()
    }
}

/// The shim for quinn: a socket that drops, duplicates and reorders (by swapping with the
/// next datagram sent) what quinn transmits, with a seeded RNG. Used by tests through
/// [`crate::quic::QuicEndpoint::bind_with_faults`]; quinn's own loss recovery and the link
/// above must cope.
#[derive(Debug)]
pub struct FaultyQuicSocket {
    inner: Arc<dyn quinn::AsyncUdpSocket>,
    config: FaultConfig,
    state: std::sync::Mutex<QuicFaultState>,
    tap: std::sync::OnceLock<(SocketAddr, WireTap)>,
}

#[derive(Debug)]
struct QuicFaultState {
    rng: u64,
    held: Option<(SocketAddr, Option<IpAddr>, Vec<u8>)>,
    stats: FaultStats,
}

impl FaultyQuicSocket {
    /// Wrap quinn's socket `inner`.
    pub fn new(inner: Arc<dyn quinn::AsyncUdpSocket>, config: FaultConfig) -> Self {
        FaultyQuicSocket {
            inner,
            state: std::sync::Mutex::new(QuicFaultState {
                rng: config.seed,
                held: None,
                stats: FaultStats::default(),
            }),
            config,
            tap: std::sync::OnceLock::new(),
        }
    }

    /// Record every datagram this socket sends into `tap` (set once).
    pub fn set_tap(&self, tap: WireTap) {
        if let Ok(addr) = self.inner.local_addr() {
            let _ = self.tap.set((addr, tap));
        }
    }

    /// What the shim did so far.
    pub fn stats(&self) -> FaultStats {
        self.state.lock().map(|s| s.stats).unwrap_or_default()
    }

    /// Send one datagram, from `src_ip` when quinn chose it (a socket bound to an
    /// unspecified address answers from the address the peer sent to).
    fn send_one(&self, to: SocketAddr, src_ip: Option<IpAddr>, contents: &[u8]) -> io::Result<()> {
        if let Some((from, tap)) = self.tap.get() {
            tap.record(*from, to, contents, None);
        }
        self.inner.try_send(&quinn::udp::Transmit {
            destination: to,
            ecn: None,
            contents,
            segment_size: None,
            src_ip,
        })
    }
}

impl quinn::AsyncUdpSocket for FaultyQuicSocket {
    fn create_io_poller(self: Arc<Self>) -> std::pin::Pin<Box<dyn quinn::UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit<'_>) -> io::Result<()> {
        let Ok(mut state) = self.state.lock() else {
            return self.inner.try_send(transmit);
        };
        state.stats.seen += 1;
        let mut unit = || {
            state.rng = state.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state.rng;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        let (lose, dup, hold) = (unit(), unit(), unit());
        if lose < self.config.loss {
            state.stats.dropped += 1;
            return Ok(()); // as if the network lost it
        }
        if hold < self.config.reorder && state.held.is_none() {
            state.stats.reordered += 1;
            state.held = Some((
                transmit.destination,
                transmit.src_ip,
                transmit.contents.to_vec(),
            ));
            return Ok(());
        }
        let held = state.held.take();
        let duplicate = dup < self.config.duplicate;
        if duplicate {
            state.stats.duplicated += 1;
        }
        drop(state);
        let (to, src_ip) = (transmit.destination, transmit.src_ip);
        self.send_one(to, src_ip, transmit.contents)?;
        if duplicate {
            let _ = self.send_one(to, src_ip, transmit.contents);
        }
        // The held datagram goes after this one: the two arrive swapped.
        if let Some((to, src_ip, contents)) = held {
            let _ = self.send_one(to, src_ip, &contents);
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut std::task::Context<'_>,
        bufs: &mut [std::io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> std::task::Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// One datagram per transmit, so faults apply per datagram.
    fn max_transmit_segments(&self) -> usize {
        1
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}
