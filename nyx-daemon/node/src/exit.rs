//! The exit service: for every circuit this node is the last hop of, a stream endpoint; for
//! every stream a client opens on it, a TCP connection to the target if the exit policy
//! allows it, with bytes relayed both ways under both sides' backpressure.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};

use crate::endpoint::{self, Endpoint, OnIncoming, Port};
use crate::handle::Command;
use crate::{CircuitMessage, NyxStream};
use nyx_overlay::circuit::ExitHandle;
use nyx_overlay::directory::{ExitPolicy, ExitTarget};
use nyx_overlay::stream::{DIRECTORY_TARGET, ResetReason, Role, StreamConfig, StreamId, StreamMux};

/// Directory streams one circuit may open over its life; more are reset. A client opens one
/// per one-hop circuit, so this only bounds what a stranger holds per circuit it builds.
pub(super) const MAX_DIRECTORY_STREAMS: usize = 4;

/// What every exit stream of a node shares.
#[derive(Debug)]
pub(super) struct ExitService {
    /// The policy now (the operator may change it while the node runs).
    pub(super) policy: std::sync::RwLock<Arc<ExitPolicy>>,
    pub(super) config: StreamConfig,
    pub(super) connect_timeout: Duration,
    /// TCP connections open at once, over all circuits.
    pub(super) connections: Arc<Semaphore>,
    /// Where directory streams go (to the node's owner).
    pub(super) directory: mpsc::Sender<NyxStream>,
}

impl ExitService {
    /// The exit policy in force now.
    pub(super) fn policy(&self) -> Arc<ExitPolicy> {
        match self.policy.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replace the exit policy; streams opened from now on are checked against it.
    pub(super) fn set_policy(&self, policy: ExitPolicy) {
        let policy = Arc::new(policy);
        match self.policy.write() {
            Ok(mut p) => *p = policy,
            Err(poisoned) => *poisoned.into_inner() = policy,
        }
    }

    /// Start the endpoint of a circuit this node exits; returns where its payloads go.
    pub(super) fn spawn_circuit(
        self: &Arc<Self>,
        exit: ExitHandle,
        commands: mpsc::Sender<Command>,
        queue: usize,
    ) -> Option<(mpsc::Sender<CircuitMessage>, tokio::task::JoinHandle<()>)> {
        let mux =
            StreamMux::new(Role::Exit, self.config.clone(), nyx_core::Timestamp::ZERO).ok()?;
        let ep = Endpoint::new(mux, Vec::new());
        let (tx, rx) = mpsc::channel(queue);
        let port = Port::Exit {
            exit,
            commands,
            messages: rx,
        };
        let service = self.clone();
        let directory_streams = std::sync::atomic::AtomicUsize::new(0);
        let on_incoming: OnIncoming = Box::new(move |ep: &Endpoint, id, target| {
            if target == DIRECTORY_TARGET
                && directory_streams.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    >= MAX_DIRECTORY_STREAMS
            {
                return ep.reset(id, ResetReason::ResourceLimit);
            }
            let stream = NyxStream::new(ep.clone(), id, None);
            tokio::spawn(serve(service.clone(), stream, target));
        });
        let task = tokio::spawn(endpoint::run(ep, port, Some(on_incoming)));
        Some((tx, task))
    }
}

/// Connect one stream to its target and relay until both sides are done; hand a directory
/// stream to the owner.
async fn serve(service: Arc<ExitService>, mut stream: NyxStream, target: String) {
    if target == DIRECTORY_TARGET {
        let (ep, id) = (stream.endpoint().clone(), stream.id());
        return match service.directory.try_send(stream) {
            Ok(()) => accept(&ep, id),
            Err(refused) => refused.into_inner().reset(ResetReason::ResourceLimit),
        };
    }
    let Ok(_permit) = service.connections.clone().try_acquire_owned() else {
        return stream.reset(ResetReason::ResourceLimit);
    };
    let tcp = match connect(&service, &target).await {
        Ok(tcp) => tcp,
        Err(reason) => {
            tracing::debug!(%reason, "exit stream refused");
            return stream.reset(reason);
        }
    };
    let _ = tcp.set_nodelay(true);
    accept(stream.endpoint(), stream.id());
    let mut tcp = crate::tcp::DrainingTcp::new(tcp);
    match tokio::io::copy_bidirectional_with_sizes(
        &mut tcp,
        &mut stream,
        crate::tcp::TOWARD_USER_BUFFER,
        crate::tcp::FROM_USER_BUFFER,
    )
    .await
    {
        Ok(_) => {}
        Err(e) => {
            // The target reset its connection, or the stream failed (then this is moot).
            let reason = match e.kind() {
                std::io::ErrorKind::TimedOut => ResetReason::Timeout,
                _ => ResetReason::Cancelled,
            };
            stream.reset(reason);
        }
    }
}

fn accept(ep: &Endpoint, id: StreamId) {
    let _ = ep.lock().mux.accept(id);
    ep.notify.notify_one();
}

/// Check the policy, resolve, check again, connect: the first address that answers wins.
async fn connect(service: &ExitService, target: &str) -> Result<TcpStream, ResetReason> {
    let parsed: ExitTarget = target.parse().map_err(|_| ResetReason::Protocol)?;
    let policy = service.policy();
    if !policy.allows(&parsed) {
        return Err(ResetReason::Policy);
    }
    let addrs: Vec<SocketAddr> = match &parsed {
        ExitTarget::Addr(a) => vec![*a],
        ExitTarget::Host { name, port } => {
            let lookup = tokio::net::lookup_host((name.as_str(), *port));
            match tokio::time::timeout(service.connect_timeout, lookup).await {
                Ok(Ok(addrs)) => addrs.collect(),
                Ok(Err(_)) => return Err(ResetReason::Unreachable),
                Err(_) => return Err(ResetReason::Timeout),
            }
        }
    };
    if addrs.is_empty() {
        return Err(ResetReason::Unreachable);
    }
    let allowed: Vec<SocketAddr> = addrs
        .into_iter()
        .filter(|a| policy.allows_resolved(*a))
        .collect();
    if allowed.is_empty() {
        return Err(ResetReason::Policy);
    }
    let mut last = ResetReason::Unreachable;
    for addr in allowed {
        let started = tokio::time::Instant::now();
        match tokio::time::timeout(service.connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => {
                // The handshake took one round trip to the target.
                crate::tcp::fit_receive_buffer(&tcp, started.elapsed());
                return Ok(tcp);
            }
            Ok(Err(e)) => {
                last = match e.kind() {
                    std::io::ErrorKind::ConnectionRefused => ResetReason::Refused,
                    std::io::ErrorKind::TimedOut => ResetReason::Timeout,
                    _ => ResetReason::Unreachable,
                }
            }
            Err(_) => last = ResetReason::Timeout,
        }
    }
    Err(last)
}
