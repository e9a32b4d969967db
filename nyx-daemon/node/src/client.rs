//! The client side of streams: a pool of circuits per isolation group, and
//! [`NodeHandle::connect`](crate::NodeHandle::connect).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tracing::Instrument as _;

use crate::Error;
use crate::endpoint::{self, Endpoint, Port};
use crate::{IntoTarget, NodeHandle, NyxStream};
use nyx_overlay::circuit::CircuitHandle;
use nyx_overlay::directory::{ExitPolicy, ExitTarget};
use nyx_overlay::path::ExitRequirement;
use nyx_overlay::stream::{
    MAX_OPEN_ATTEMPTS, MuxStats, ResetReason, Role, StreamConfig, StreamMux,
};

/// Streams in different groups never share a circuit (Tor's stream isolation): use one
/// group per identity an application must keep unlinkable (per user, per SOCKS
/// credentials, per site).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct IsolationGroup(String);

impl IsolationGroup {
    /// The group named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        IsolationGroup(name.into())
    }
}

/// A circuit in the pool and the exit policy its exit published.
#[derive(Debug)]
struct Pooled {
    ep: Endpoint,
    policy: ExitPolicy,
}

/// What a node's handles share for opening streams.
#[derive(Debug)]
pub(super) struct ClientStreams {
    pool: tokio::sync::Mutex<HashMap<IsolationGroup, Vec<Pooled>>>,
    /// Counters of circuits dropped from the pool, so that totals never go down.
    retired: std::sync::Mutex<MuxStats>,
    config: StreamConfig,
    pub(super) open_timeout: Duration,
}

impl ClientStreams {
    pub(super) fn new(config: StreamConfig, open_timeout: Duration) -> Arc<Self> {
        Arc::new(ClientStreams {
            pool: tokio::sync::Mutex::new(HashMap::new()),
            retired: std::sync::Mutex::new(MuxStats::default()),
            config,
            open_timeout,
        })
    }

    /// The stream counters of every circuit the pool held, summed; the levels (window,
    /// in flight, RTTs) of the circuits still in it.
    pub(super) async fn stats(&self) -> MuxStats {
        let pool = self.pool.lock().await;
        let mut sum = *self
            .retired
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for p in pool.values().flatten() {
            sum.accumulate(&p.ep.lock().mux.stats());
        }
        sum
    }
}

impl NodeHandle {
    /// Open a stream to `target` ("host:port", resolved by the exit) in the default
    /// isolation group: reuses a circuit of the group whose exit allows the target, or builds
    /// one. `target` is `"host:port"`, `(host, port)` or an address ([`IntoTarget`]). Fails
    /// with a stream reset if the exit refuses (policy, connection refused, unreachable,
    /// timeout): see [`Error::kind`].
    pub async fn connect(&self, target: impl IntoTarget) -> Result<NyxStream, Error> {
        self.connect_isolated(target, &IsolationGroup::default())
            .await
    }

    /// The stream counters (packets, loss, FEC overhead) of this node's circuits, summed
    /// (closed circuits included, so totals never go down); the levels (window, in flight,
    /// RTTs) of the circuits still open.
    pub async fn stream_stats(&self) -> MuxStats {
        self.streams.stats().await
    }

    /// [`connect`](Self::connect) within `group`: never on a circuit of another group.
    /// Traced as a `stream_open` span; a circuit built for it is a `circuit_build` child.
    pub async fn connect_isolated(
        &self,
        target: impl IntoTarget,
        group: &IsolationGroup,
    ) -> Result<NyxStream, Error> {
        let parsed = target.into_target()?;
        let span = crate::spans::stream_open();
        let mut attempts = 0;
        let result = self
            .open_with_retries(&parsed, group, &mut attempts)
            .instrument(span.clone())
            .await;
        span.record("attempts", attempts);
        crate::spans::record_outcome(&span, &result, "opened");
        result
    }

    /// Tor's rule: a stream the exit could not open for a reason of its own (or whose
    /// circuit ended) is tried again on another circuit, within the one open timeout.
    /// Counts the circuits tried in `attempts`.
    async fn open_with_retries(
        &self,
        parsed: &ExitTarget,
        group: &IsolationGroup,
        attempts: &mut u32,
    ) -> Result<NyxStream, Error> {
        let text = parsed.to_string();
        // A host name the parsers accept (up to 253 bytes) can still make a target longer
        // than a stream's OPEN carries: refuse it before a circuit is built for it.
        if text.len() > nyx_overlay::stream::wire::MAX_TARGET_LEN {
            return Err(nyx_overlay::Error::BadTarget {
                target: text,
                reason: "host:port longer than the 255 bytes a stream's OPEN carries",
            }
            .into());
        }
        let deadline = tokio::time::Instant::now() + self.streams.open_timeout;
        let mut tried: Vec<Endpoint> = Vec::new();
        let mut last = Error::NodeStopped;
        for _ in 0..MAX_OPEN_ATTEMPTS {
            let ep = self.circuit_for(group, parsed, &tried).await?;
            *attempts += 1;
            match self.open_on(ep.clone(), &text, deadline).await {
                Err(e)
                    if e.reset_reason().is_some_and(ResetReason::retry_elsewhere)
                        && tokio::time::Instant::now() < deadline =>
                {
                    tracing::debug!(reason = ?e.reset_reason(), "stream not opened; trying another circuit");
                    tried.push(ep);
                    last = e;
                }
                other => return other,
            }
        }
        Err(last)
    }

    /// Build a circuit for `group` whose exit satisfies `req` and add it to the group's
    /// pool, so that later streams of the group can use it without waiting for a build
    /// (Tor's preemptive circuits). Returns its handle and path.
    pub async fn build_pooled(
        &self,
        group: &IsolationGroup,
        req: ExitRequirement,
    ) -> Result<(CircuitHandle, Vec<nyx_core::NodeId>), Error> {
        let circuit = self.build_circuit(req).await?;
        let built = (circuit.handle(), circuit.path.clone());
        let mut pool = self.streams.pool.lock().await;
        let ep = self.pool_circuit(circuit)?;
        pool.entry(group.clone()).or_default().push(ep);
        Ok(built)
    }

    /// Start the stream endpoint of a freshly built circuit, for the pool.
    fn pool_circuit(&self, circuit: crate::Circuit) -> Result<Pooled, Error> {
        let policy = circuit.exit_policy.clone();
        let ep = self.start_endpoint(circuit)?;
        Ok(Pooled { ep, policy })
    }

    /// Start the stream endpoint of a freshly built circuit.
    pub(crate) fn start_endpoint(&self, circuit: crate::Circuit) -> Result<Endpoint, Error> {
        let mut mux = StreamMux::new(
            Role::Client,
            self.streams.config.clone(),
            nyx_core::Timestamp::ZERO,
        )?;
        if let Some(rtt) = circuit.rtt {
            mux.seed_rtt(rtt);
        }
        let ep = Endpoint::new(mux, circuit.path.clone());
        tokio::spawn(endpoint::run(ep.clone(), Port::Client(circuit), None));
        Ok(ep)
    }

    /// Open a stream to `target` on the circuit of `ep`, waiting for the exit until
    /// `deadline`. A circuit whose exit did not answer in time takes no new streams (it may
    /// be stuck; Tor does the same).
    pub(crate) async fn open_on(
        &self,
        ep: Endpoint,
        target: &str,
        deadline: tokio::time::Instant,
    ) -> Result<NyxStream, Error> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut s = ep.lock();
            let now = s.now();
            let id = s.mux.open(target, now)?;
            s.opens.insert(id, tx);
            id
        };
        ep.notify.notify_one();
        let stream = NyxStream::new(ep.clone(), id, Some(self.liveness.clone()));
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(Ok(()))) => Ok(stream),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(Error::reset(ResetReason::CircuitLost)),
            Err(_) => {
                stream.reset(ResetReason::Timeout);
                ep.lock().expiring = true;
                ep.notify.notify_one();
                Err(Error::reset(ResetReason::Timeout))
            }
        }
    }

    /// A usable circuit of `group` whose exit allows `target`, other than those `tried`;
    /// built if there is none.
    async fn circuit_for(
        &self,
        group: &IsolationGroup,
        target: &ExitTarget,
        tried: &[Endpoint],
    ) -> Result<Endpoint, Error> {
        let max = self.streams.config.max_streams;
        let mut pool = self.streams.pool.lock().await;
        let list = pool.entry(group.clone()).or_default();
        list.retain(|p| {
            let ep = p.ep.lock();
            if ep.gone.is_none() {
                return true;
            }
            let mut counters = ep.mux.stats();
            (counters.window, counters.in_flight) = (0, 0);
            (counters.blocks_in_flight, counters.send_credit) = (0, 0);
            (counters.srtt, counters.min_rtt) = (Duration::ZERO, Duration::ZERO);
            self.streams
                .retired
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .accumulate(&counters);
            false
        });
        if let Some(p) = list.iter().find(|p| {
            p.policy.allows(target) && p.ep.usable(max) && !tried.iter().any(|t| t.same(&p.ep))
        }) {
            return Ok(p.ep.clone());
        }
        // Build without holding the pool: a build takes round trips, and streams of other
        // groups (or of this one, on circuits it has) need not wait for it.
        drop(pool);
        let circuit = self
            .build_circuit(ExitRequirement::Target(target.clone()))
            .await?;
        let pooled = self.pool_circuit(circuit)?;
        let ep = pooled.ep.clone();
        self.streams
            .pool
            .lock()
            .await
            .entry(group.clone())
            .or_default()
            .push(pooled);
        Ok(ep)
    }
}
