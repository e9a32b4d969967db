//! The UDP transport's driver: one task owns the socket and the [`UdpEngine`], moves
//! datagrams with the fewest system calls the kernel allows (quinn-udp: GSO for runs of
//! equal-size datagrams to one peer, GRO and `recvmmsg` on receive; one datagram per call
//! where the system refuses those, see [`crate::socket`]), and talks to the rest of the node
//! through channels. A large receive reaches the node a chunk at a time, with what the node
//! sends in return going out between chunks, so a relay's forwarding latency does not grow
//! with the size of the burst it received. The caller (nyx-node) spawns [`UdpTransport::run`].

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use nyx_core::buf::PooledBuf;
use nyx_core::time::CoarseClock;
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridPublicKey;
use nyx_crypto::link::LinkKey;
use quinn_udp::{RecvMeta, Transmit};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::addressing::Addressing;
use crate::Error;
use crate::fault::{FaultConfig, FaultCounters, FaultShim};
use crate::socket::{DatagramSocket, SocketMode, SocketStats, io_error};
use crate::udp::{LinkStats, UdpConfig, UdpEngine, UdpEvent, UdpStats};
use receive::Cursor;

mod receive;

/// Datagrams received per system call at most.
const RECV_BATCH: usize = 32;
/// Commands taken from the queue per wake-up at most (one GSO batch is up to 64 segments).
const COMMAND_BATCH: usize = 64;
/// Largest GSO batch in bytes (a UDP send carries at most 65 507 bytes of payload).
const MAX_GSO_BYTES: usize = 65_000;
/// Room per receive buffer: 64 KiB holds a GRO batch.
const RECV_BUF: usize = 64 * 1024;

/// What the rest of the node asks the UDP transport to do.
#[derive(Debug)]
pub enum UdpCommand {
    /// Dial a peer (its link key from the directory).
    Connect {
        /// The peer.
        peer: NodeId,
        /// Its link key.
        key: Box<HybridPublicKey>,
        /// Its address.
        addr: SocketAddr,
    },
    /// Send a cell on the link to `addr`.
    Cell {
        /// The peer's address.
        addr: SocketAddr,
        /// The cell.
        cell: Bytes,
    },
    /// Send a control message (reliable, ordered) on the link to `addr`.
    Control {
        /// The peer's address.
        addr: SocketAddr,
        /// The message.
        msg: Vec<u8>,
    },
    /// Close the link to `peer` at `addr` ([`UdpEngine::close`](super::UdpEngine::close)).
    Close {
        /// The peer.
        peer: NodeId,
        /// Its address.
        addr: SocketAddr,
    },
    /// Report the transport's and every link's counters.
    Stats(tokio::sync::oneshot::Sender<UdpSnapshot>),
    /// Answer HELLOs for these link keys from now on ([`UdpEngine::set_link_keys`]).
    SetLinkKeys(Vec<LinkKey>),
}

/// The UDP transport's counters at one moment: transport-wide and per link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpSnapshot {
    /// Transport-wide counters.
    pub transport: UdpStats,
    /// Each link: its address, peer and counters (for an embedder that watches its links;
    /// the daemon's metrics show nothing per link, docs/telemetry.md).
    pub links: Vec<(SocketAddr, NodeId, LinkStats)>,
    /// The socket's own counters.
    pub socket: SocketStats,
}

/// A UDP socket and its protocol engine.
#[derive(Debug)]
pub struct UdpTransport {
    socket: DatagramSocket,
    engine: UdpEngine,
    /// The engine's time line.
    clock: CoarseClock,
    /// Reused buffer for GSO batches.
    batch: Vec<u8>,
    /// Reused list of the datagrams of one GSO run.
    run: Vec<PooledBuf>,
    /// Tests: a record of every datagram sent.
    tap: Option<(SocketAddr, crate::fault::WireTap)>,
    /// Tests: faults applied to every datagram received.
    faults: Option<ReceiveFaults>,
    /// How the socket's addresses map to the engine's (see [`Addressing`]).
    addressing: Addressing,
    /// Receives that failed with an error other than "nothing to read".
    receive_errors: u64,
    /// Failed receives since the last good one.
    consecutive_errors: u32,
    /// After a failed receive the socket is not read again before this (no busy loop on
    /// an error that persists).
    receive_paused_until: Option<Instant>,
    /// Where handing the last receive's datagrams to the engine stopped (more than
    /// `receive::RECV_CHUNK` came in one receive).
    received: Option<Cursor>,
}

/// The fault shim on the receive path and the counters it publishes.
#[derive(Debug)]
struct ReceiveFaults {
    shim: FaultShim<(SocketAddr, Option<IpAddr>, Vec<u8>)>,
    counters: FaultCounters,
}

impl UdpTransport {
    /// Bind `addr` (needs a tokio runtime) as a relay: `identity` with its link keys
    /// ([`UdpEngine::new`]), the socket in `config.socket` mode.
    pub fn bind(
        addr: SocketAddr,
        identity: Arc<IdentityKey>,
        link_keys: Vec<LinkKey>,
        config: UdpConfig,
    ) -> Result<Self, Error> {
        let (max_peers, mode) = (config.max_peers, config.socket);
        let engine = UdpEngine::new(config, identity, link_keys, Timestamp::ZERO)?;
        Self::bind_engine(addr, engine, max_peers, mode)
    }

    /// Bind `addr` (needs a tokio runtime) as a client-only node ([`UdpEngine::client`]):
    /// no HELLO is answered, and each dialled link shows an identity of its own.
    pub fn bind_client(addr: SocketAddr, config: UdpConfig) -> Result<Self, Error> {
        let (max_peers, mode) = (config.max_peers, config.socket);
        let engine = UdpEngine::client(config, Timestamp::ZERO)?;
        Self::bind_engine(addr, engine, max_peers, mode)
    }

    fn bind_engine(
        addr: SocketAddr,
        engine: UdpEngine,
        max_peers: usize,
        mode: SocketMode,
    ) -> Result<Self, Error> {
        let socket = DatagramSocket::bind(addr, mode)?;
        let local = socket
            .local_addr()
            .map_err(io_error("UDP socket address"))?;
        Ok(UdpTransport {
            addressing: Addressing::new(local, max_peers),
            socket,
            engine,
            clock: CoarseClock::new(),
            batch: Vec::with_capacity(MAX_GSO_BYTES),
            run: Vec::with_capacity(64),
            tap: None,
            faults: None,
            receive_errors: 0,
            consecutive_errors: 0,
            receive_paused_until: None,
            received: None,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.socket
            .local_addr()
            .map_err(io_error("UDP socket address"))
    }

    /// Record every datagram this transport sends into `tap` (tests of what is on the wire).
    pub fn set_tap(&mut self, tap: crate::fault::WireTap) -> Result<(), Error> {
        self.tap = Some((self.local_addr()?, tap));
        Ok(())
    }

    /// Tests: pass every datagram this transport receives through a seeded
    /// [`FaultShim`] (dropped, duplicated, delayed or held back to be reordered) before the
    /// engine sees it; call before [`run`](Self::run). Handshake and control datagrams go
    /// through it too: the engine resends HELLOs and unacknowledged control messages. What
    /// is sent is unchanged (faults are injected once, on the receiving side). The returned
    /// counters follow the shim while the transport runs. Without this call the receive
    /// path has no shim and copies nothing.
    pub fn set_faults(&mut self, config: FaultConfig) -> FaultCounters {
        let counters = FaultCounters::default();
        self.faults = Some(ReceiveFaults {
            shim: FaultShim::new(config),
            counters: counters.clone(),
        });
        counters
    }

    /// Run until `commands` closes: execute commands, move datagrams, report events.
    #[tracing::instrument(name = "udp_transport", skip_all)]
    pub async fn run(
        mut self,
        mut commands: mpsc::Receiver<UdpCommand>,
        events: mpsc::Sender<UdpEvent>,
    ) -> Result<(), Error> {
        let mut storage = vec![0u8; RECV_BUF * RECV_BATCH];
        let mut meta = [RecvMeta::default(); RECV_BATCH];
        // One timer, re-armed when the wake-up time moves rather than made anew each turn
        // (a new timer goes into and out of tokio's timer wheel, under its lock, per turn).
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        let mut taken = Vec::with_capacity(COMMAND_BATCH);
        loop {
            // The engine's next timer, or the next datagram the fault shim holds back.
            let held = self.faults.as_ref().and_then(|f| f.shim.next_due());
            let wake = [self.engine.poll_timeout(), held]
                .into_iter()
                .flatten()
                .min()
                .map(|t| Instant::from_std(self.clock.instant_of(t)));
            let wake = [wake, self.receive_paused_until]
                .into_iter()
                .flatten()
                .min();
            let paused = self.receive_paused_until.is_some();
            if let Some(at) = wake
                && timer.deadline() != at
            {
                timer.as_mut().reset(at);
            }
            tokio::select! {
                // What is queued, at once, so equal-size cells to one peer leave in one GSO
                // batch instead of a system call each (and the queue's slots go back to the
                // node in one step, where a `try_recv` takes the channel's lock per command).
                n = commands.recv_many(&mut taken, COMMAND_BATCH) => {
                    if n == 0 {
                        return Ok(());
                    }
                    let now = self.now();
                    for command in taken.drain(..) {
                        self.execute(command, now)?;
                    }
                }
                ready = self.socket.readable(), if !paused => {
                    ready.map_err(io_error("UDP socket readiness"))?;
                    self.receive(&mut storage, &mut meta);
                }
                () = &mut timer, if wake.is_some() => {
                    if self.receive_paused_until.is_some_and(|t| t <= Instant::now()) {
                        self.receive_paused_until = None;
                    }
                    let now = self.now();
                    self.release_held(now);
                    self.engine.handle_timeout(now);
                }
            }
            self.flush().await;
            if !self.pass_on(&events).await {
                return Ok(());
            }
            // The rest of a large receive, a chunk at a time: the node handles each chunk
            // (the yield), and what it asks to send in return goes out before the next.
            while self.received.is_some() {
                tokio::task::yield_now().await;
                let now = self.now();
                take_queued(&mut commands, &mut taken);
                for command in taken.drain(..) {
                    self.execute(command, now)?;
                }
                self.hand_over(&storage, &meta, now);
                self.flush().await;
                if !self.pass_on(&events).await {
                    return Ok(());
                }
            }
        }
    }

    /// Send the engine's events to the node; false once nobody listens.
    async fn pass_on(&mut self, events: &mpsc::Sender<UdpEvent>) -> bool {
        while let Some(event) = self.engine.poll_event() {
            if events.send(event).await.is_err() {
                return false;
            }
        }
        true
    }

    fn execute(&mut self, command: UdpCommand, now: Timestamp) -> Result<(), Error> {
        match command {
            UdpCommand::Connect { peer, key, addr } => self.engine.connect(peer, *key, addr, now),
            // A cell for a peer without a link is dropped (counted in the engine's stats);
            // cells are unreliable by design.
            UdpCommand::Cell { addr, cell } => {
                let _ = self.engine.send_cell(addr, &cell, now);
                Ok(())
            }
            // A full control channel or a missing link drops the message; the overlay's
            // circuit timeouts handle that like any lost handshake.
            UdpCommand::Control { addr, msg } => {
                let _ = self.engine.send_control(addr, &msg, now);
                Ok(())
            }
            UdpCommand::Close { peer, addr } => {
                self.engine.close(peer, addr, now);
                Ok(())
            }
            UdpCommand::SetLinkKeys(keys) => {
                self.engine.set_link_keys(keys);
                Ok(())
            }
            UdpCommand::Stats(reply) => {
                // The asker may have gone; nothing to do then.
                let _ = reply.send(UdpSnapshot {
                    transport: self.engine.stats(),
                    links: self.engine.links(),
                    socket: SocketStats {
                        plain_io: self.socket.is_plain(),
                        receive_errors: self.receive_errors,
                    },
                });
                Ok(())
            }
        }
    }

    /// Send what the engine queued: consecutive equal-size datagrams to one address go out as
    /// one GSO transmit (copied into one contiguous batch, the layout GSO requires; a lone
    /// datagram goes out straight from its pooled buffer).
    async fn flush(&mut self) {
        let max_segments = self.socket.max_gso_segments().max(1);
        // Reused across flushes: no allocation per wake-up.
        let mut run = std::mem::take(&mut self.run);
        let mut run_to: Option<SocketAddr> = None;
        while let Some((addr, datagram)) = self.engine.poll_transmit() {
            let joins = run_to == Some(addr)
                && run.first().is_some_and(|d| d.len() == datagram.len())
                && run.len() < max_segments
                && (run.len() + 1) * datagram.len() <= MAX_GSO_BYTES;
            if !joins && !run.is_empty() {
                self.send_run(run_to, &mut run).await;
            }
            run_to = Some(addr);
            run.push(datagram);
        }
        if !run.is_empty() {
            self.send_run(run_to, &mut run).await;
        }
        self.run = run;
    }

    async fn send_run(&mut self, to: Option<SocketAddr>, run: &mut Vec<PooledBuf>) {
        let Some(to) = to else { return };
        if let [single] = &run[..] {
            self.send(to, single, None).await;
        } else if let Some(first) = run.first() {
            let size = first.len();
            self.batch.clear();
            for d in run.iter() {
                self.batch.extend_from_slice(d);
            }
            let batch = std::mem::take(&mut self.batch);
            self.send(to, &batch, Some(size)).await;
            self.batch = batch;
        }
        run.clear(); // the buffers go back to the pool
    }

    async fn send(&self, to: SocketAddr, contents: &[u8], segment_size: Option<usize>) {
        if let Some((from, tap)) = &self.tap {
            tap.record(*from, to, contents, segment_size);
        }
        let (destination, src_ip) = self.addressing.sending(to, contents);
        let transmit = Transmit {
            destination,
            ecn: None,
            contents,
            segment_size,
            src_ip,
        };
        loop {
            if self.socket.writable().await.is_err() {
                return;
            }
            match self.socket.try_send(&transmit) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                // Datagrams are unreliable: a send error (unreachable peer) drops them.
                _ => return,
            }
        }
    }

    fn now(&self) -> Timestamp {
        self.clock.tick()
    }
}

/// Up to [`COMMAND_BATCH`] commands already queued into `taken`, without waiting: what
/// `recv_many` takes, as a `try_recv` would. Polling with a no-op waker leaves it registered in
/// the channel, which is safe only because the task polls the queue with its own waker
/// (`recv_many` in `run`'s `select!`) before it next waits for a command; what it waits for
/// meanwhile (the socket, room in the node's event queue) wakes it by itself.
fn take_queued(commands: &mut mpsc::Receiver<UdpCommand>, taken: &mut Vec<UdpCommand>) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let _ = commands.poll_recv_many(&mut cx, taken, COMMAND_BATCH);
}
