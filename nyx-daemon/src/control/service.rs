//! The `nyx.control.v1.Control` service: each call acts on the [`DaemonState`], and every
//! error becomes a gRPC status with a message that says what to do.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nyx_core::NodeId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::pb;
use super::pb::control_server::Control;
use crate::Error;
use crate::daemon::DaemonState;
use crate::daemon::stream_registry::StreamSource;
use nyx_node::ErrorKind;
use nyx_node::{IsolationGroup, NodeEvent};
use nyx_overlay::circuit::CircuitHandle;
use nyx_overlay::directory::{Directory, ExitTarget};
use nyx_overlay::path::ExitRequirement;
use nyx_overlay::stream::ResetReason;

/// The control service of one daemon.
#[derive(Debug, Clone)]
pub struct ControlService {
    state: Arc<DaemonState>,
}

impl ControlService {
    /// Serve `state`.
    pub fn new(state: Arc<DaemonState>) -> Self {
        ControlService { state }
    }

    fn hops(&self, path: &[NodeId], directory: &Directory) -> Vec<pb::Hop> {
        path.iter()
            .map(|id| pb::Hop {
                node_id: id.to_string(),
                nickname: directory
                    .get(id)
                    .map(|d| d.nickname().to_owned())
                    .unwrap_or_default(),
            })
            .collect()
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// The gRPC status for a daemon error.
pub fn status(e: &Error) -> Status {
    let msg = e.to_string();
    match e {
        Error::Node(e) => node_status(e),
        Error::ConfigRead { .. } | Error::ConfigSyntax { .. } | Error::ConfigInvalid { .. } => {
            Status::invalid_argument(msg)
        }
        Error::DirectoryRead { .. } | Error::DirectoryInvalid { .. } => {
            Status::failed_precondition(msg)
        }
        _ => Status::internal(msg),
    }
}

/// The gRPC status for a node error, by its [`ErrorKind`].
pub(super) fn node_status(e: &nyx_node::Error) -> Status {
    let msg = e.to_string();
    if let nyx_node::Error::Overlay(nyx_overlay::Error::Path(_)) = e {
        return Status::failed_precondition(format!(
            "{msg} (is the directory loaded? `nyx status` shows the relays known)"
        ));
    }
    match e.kind() {
        ErrorKind::NodeStopped | ErrorKind::CircuitFailed | ErrorKind::NoPath => {
            Status::unavailable(msg)
        }
        ErrorKind::InvalidInput => Status::invalid_argument(msg),
        ErrorKind::ResourceLimit => Status::resource_exhausted(msg),
        ErrorKind::NotAllowed => Status::permission_denied(msg),
        ErrorKind::TargetRefused | ErrorKind::TargetUnreachable => Status::unavailable(msg),
        ErrorKind::Closed if e.reset_reason() == Some(ResetReason::CircuitLost) => {
            Status::unavailable(msg)
        }
        ErrorKind::Timeout => Status::deadline_exceeded(msg),
        ErrorKind::Closed => Status::aborted(msg),
        _ => Status::internal(msg),
    }
}

#[tonic::async_trait]
impl Control for ControlService {
    async fn get_info(
        &self,
        _: Request<pb::GetInfoRequest>,
    ) -> Result<Response<pb::NodeInfo>, Status> {
        let s = &self.state;
        let stats = s.node.stats().await.map_err(|e| node_status(&e))?;
        let config = s.config();
        let directory = s.directory();
        let relays = directory.len();
        let e = &s.endpoints;
        Ok(Response::new(pb::NodeInfo {
            node_id: s.node.node_id().to_string(),
            nickname: config.nickname.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            transport: config.transport.to_string(),
            listen_addr: e.listen.to_string(),
            socks_addr: e.socks.map(|a| a.to_string()).unwrap_or_default(),
            http_connect_addr: e.http_connect.map(|a| a.to_string()).unwrap_or_default(),
            control_socket: e
                .control
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            prometheus_addr: e.prometheus.map(|a| a.to_string()).unwrap_or_default(),
            data_dir: e.data_dir.display().to_string(),
            pid: std::process::id(),
            uptime_ms: millis(s.started.elapsed()),
            relays: u32::try_from(relays).unwrap_or(u32::MAX),
            peers: u32::try_from(stats.links).unwrap_or(u32::MAX),
            own_circuits: u32::try_from(stats.own_circuits).unwrap_or(u32::MAX),
            relay_circuits: u32::try_from(stats.relay_circuits).unwrap_or(u32::MAX),
            streams: u32::try_from(s.streams.open_count()).unwrap_or(u32::MAX),
            ready: s.ready_for_circuits(),
            exit_policy: config
                .exit_policy()
                .map(|p| p.to_string())
                .unwrap_or_default(),
        }))
    }

    async fn list_peers(
        &self,
        _: Request<pb::ListPeersRequest>,
    ) -> Result<Response<pb::ListPeersResponse>, Status> {
        let peers = self.state.node.peers().await.map_err(|e| node_status(&e))?;
        let directory = self.state.directory();
        let peers = peers
            .into_iter()
            .map(|p| pb::Peer {
                node_id: p.peer.to_string(),
                nickname: directory
                    .get(&p.peer)
                    .map(|d| d.nickname().to_owned())
                    .unwrap_or_default(),
                relay: p.in_directory,
                up_ms: millis(p.age),
            })
            .collect();
        Ok(Response::new(pb::ListPeersResponse { peers }))
    }

    async fn list_circuits(
        &self,
        _: Request<pb::ListCircuitsRequest>,
    ) -> Result<Response<pb::ListCircuitsResponse>, Status> {
        let list = self
            .state
            .node
            .circuits()
            .await
            .map_err(|e| node_status(&e))?;
        let directory = self.state.directory();
        let circuits = list
            .into_iter()
            .map(|c| pb::Circuit {
                id: c.circuit.id(),
                hops: self.hops(&c.path, &directory),
                age_ms: millis(c.age),
            })
            .collect();
        Ok(Response::new(pb::ListCircuitsResponse { circuits }))
    }

    async fn build_circuit(
        &self,
        request: Request<pb::BuildCircuitRequest>,
    ) -> Result<Response<pb::Circuit>, Status> {
        let target = request.into_inner().target;
        let req = if target.is_empty() {
            ExitRequirement::Any
        } else {
            let parsed: ExitTarget = target.parse().map_err(|_| {
                Status::invalid_argument(format!(
                    "target {target:?}: expected host:port with a port in 1..=65535"
                ))
            })?;
            ExitRequirement::Target(parsed)
        };
        // Pooled for streams of the default group (as `connect` and SOCKS without
        // credentials use); open until it expires or is closed.
        let (handle, path) = self
            .state
            .node
            .build_pooled(&IsolationGroup::default(), req)
            .await
            .map_err(|e| node_status(&e))?;
        Ok(Response::new(pb::Circuit {
            id: handle.id(),
            hops: self.hops(&path, &self.state.directory()),
            age_ms: 0,
        }))
    }

    async fn close_circuit(
        &self,
        request: Request<pb::CloseCircuitRequest>,
    ) -> Result<Response<pb::CloseCircuitResponse>, Status> {
        let id = request.into_inner().id;
        let closed = self
            .state
            .node
            .close_circuit(CircuitHandle::from_id(id))
            .await
            .map_err(|e| node_status(&e))?;
        if !closed {
            return Err(Status::not_found(format!(
                "no circuit {id} (see `nyx circuits`)"
            )));
        }
        Ok(Response::new(pb::CloseCircuitResponse {}))
    }

    type OpenStreamStream = BoxStream<pb::StreamResponse>;

    async fn open_stream(
        &self,
        request: Request<Streaming<pb::StreamRequest>>,
    ) -> Result<Response<Self::OpenStreamStream>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("no request: send `open` first"))?;
        let Some(pb::stream_request::Msg::Open(open)) = first.msg else {
            return Err(Status::invalid_argument(
                "the first request must be `open` with a target",
            ));
        };
        let group = if open.isolation.is_empty() {
            IsolationGroup::default()
        } else {
            IsolationGroup::new(format!("control:{}", open.isolation))
        };
        let stream = self
            .state
            .node
            .connect_isolated(&open.target, &group)
            .await
            .map_err(|e| node_status(&e))?;
        let ticket = self.state.streams.register(
            StreamSource::Control,
            &open.target,
            stream.path().to_vec(),
        );
        let opened = pb::StreamOpened {
            stream_id: ticket.id(),
            hops: self.hops(stream.path(), &self.state.directory()),
        };
        let (tx, rx) = mpsc::channel::<Result<pb::StreamResponse, Status>>(16);
        let _ = tx
            .send(Ok(pb::StreamResponse {
                msg: Some(pb::stream_response::Msg::Opened(opened)),
            }))
            .await;
        tokio::spawn(async move {
            let (mut rd, mut wr) = tokio::io::split(stream);
            let up = async {
                while let Some(msg) = inbound.message().await.map_err(|s| s.to_string())? {
                    if let Some(pb::stream_request::Msg::Data(data)) = msg.msg {
                        wr.write_all(&data).await.map_err(|e| e.to_string())?;
                        ticket.add_sent(data.len());
                    }
                }
                wr.shutdown().await.map_err(|e| e.to_string())
            };
            let down = async {
                let mut buf = vec![0u8; 32 * 1024];
                loop {
                    let n = rd.read(&mut buf).await.map_err(|e| e.to_string())?;
                    if n == 0 {
                        return Ok::<(), String>(());
                    }
                    ticket.add_received(n);
                    let msg = pb::StreamResponse {
                        msg: Some(pb::stream_response::Msg::Data(buf[..n].to_vec())),
                    };
                    if tx.send(Ok(msg)).await.is_err() {
                        return Err("the client went away".to_owned());
                    }
                }
            };
            let result = tokio::select! {
                r = async { tokio::try_join!(up, down) } => r.map(|_| ()),
                () = ticket.closed() => Err("closed by the operator".to_owned()),
            };
            if let Err(reason) = result {
                let _ = tx.send(Err(Status::aborted(reason))).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_streams(
        &self,
        _: Request<pb::ListStreamsRequest>,
    ) -> Result<Response<pb::ListStreamsResponse>, Status> {
        let directory = self.state.directory();
        let streams = self
            .state
            .streams
            .list()
            .into_iter()
            .map(|s| pb::StreamInfo {
                id: s.id,
                source: s.source.as_str().to_owned(),
                target: s.target,
                age_ms: millis(s.age),
                bytes_sent: s.sent,
                bytes_received: s.received,
                hops: self.hops(&s.path, &directory),
            })
            .collect();
        Ok(Response::new(pb::ListStreamsResponse { streams }))
    }

    async fn close_stream(
        &self,
        request: Request<pb::CloseStreamRequest>,
    ) -> Result<Response<pb::CloseStreamResponse>, Status> {
        let id = request.into_inner().id;
        if !self.state.streams.close(id) {
            return Err(Status::not_found(format!(
                "no stream {id} (see `nyx streams`)"
            )));
        }
        Ok(Response::new(pb::CloseStreamResponse {}))
    }

    async fn get_stream_stats(
        &self,
        _: Request<pb::GetStreamStatsRequest>,
    ) -> Result<Response<pb::StreamStats>, Status> {
        let s = self.state.node.stream_stats().await;
        Ok(Response::new(pb::StreamStats {
            packets_sent: s.packets_sent,
            packets_received: s.packets_received,
            packets_lost: s.lost,
            streams_opened: s.streams_opened,
            streams_reset: s.streams_reset,
            fec_packets: s.fec_packets,
            fec_source_symbols: s.fec_source_symbols,
            fec_overhead: s.fec_overhead(),
            window_cells: s.window,
            in_flight_cells: s.in_flight,
            srtt_us: u64::try_from(s.srtt.as_micros()).unwrap_or(u64::MAX),
            congestion_events: s.congestion_events,
        }))
    }

    type SubscribeEventsStream = BoxStream<pb::Event>;

    async fn subscribe_events(
        &self,
        _: Request<pb::SubscribeEventsRequest>,
    ) -> Result<Response<Self::SubscribeEventsStream>, Status> {
        let mut events = self.state.node.subscribe();
        let (tx, rx) = mpsc::channel(64);
        let service = self.clone();
        tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(e) => match service.event(e) {
                        Some(event) => event,
                        None => continue,
                    },
                    Err(broadcast::error::RecvError::Lagged(n)) => pb::Event {
                        kind: pb::EventKind::Lagged.into(),
                        time_unix_ms: unix_millis(),
                        count: n,
                        ..Default::default()
                    },
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_metrics(
        &self,
        _: Request<pb::GetMetricsRequest>,
    ) -> Result<Response<pb::Metrics>, Status> {
        let text = self.state.metrics_text().await;
        let values = samples(&text);
        Ok(Response::new(pb::Metrics {
            values,
            prometheus_text: text,
        }))
    }

    async fn get_config(
        &self,
        _: Request<pb::GetConfigRequest>,
    ) -> Result<Response<pb::Config>, Status> {
        let mut config = self.state.config();
        config.log.level = self.state.log_level();
        Ok(Response::new(pb::Config {
            toml: config.to_toml(),
            path: self
                .state
                .config_path()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        }))
    }

    async fn reload_config(
        &self,
        _: Request<pb::ReloadConfigRequest>,
    ) -> Result<Response<pb::ReloadConfigResponse>, Status> {
        let outcome = self.state.reload().await.map_err(|e| status(&e))?;
        Ok(Response::new(pb::ReloadConfigResponse {
            applied: outcome.diff.live,
            restart_required: outcome.diff.restart,
            relays: u32::try_from(outcome.relays).unwrap_or(u32::MAX),
        }))
    }

    async fn set_log_level(
        &self,
        request: Request<pb::SetLogLevelRequest>,
    ) -> Result<Response<pb::SetLogLevelResponse>, Status> {
        let level = request.into_inner().level;
        let previous = self
            .state
            .set_log_level(&level)
            .map_err(|reason| Status::invalid_argument(format!("log level {level:?}: {reason}")))?;
        Ok(Response::new(pb::SetLogLevelResponse { previous }))
    }

    async fn shutdown(
        &self,
        _: Request<pb::ShutdownRequest>,
    ) -> Result<Response<pb::ShutdownResponse>, Status> {
        tracing::info!("shutdown requested over the control socket");
        self.state.request_shutdown();
        Ok(Response::new(pb::ShutdownResponse {}))
    }
}

/// The samples of a Prometheus text: `name{labels}` to value.
fn samples(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

impl ControlService {
    /// The API's form of a node event; `None` for kinds the API has no name for yet.
    fn event(&self, event: NodeEvent) -> Option<pb::Event> {
        let mut e = pb::Event {
            time_unix_ms: unix_millis(),
            ..Default::default()
        };
        let kind = match event {
            NodeEvent::CircuitBuilt { circuit, path, .. } => {
                e.circuit_id = circuit.id();
                e.hops = self.hops(&path, &self.state.directory());
                pb::EventKind::CircuitBuilt
            }
            NodeEvent::CircuitFailed { attempt, reason } => {
                e.count = attempt as u64;
                e.reason = format!("{reason:?}");
                pb::EventKind::CircuitFailed
            }
            NodeEvent::CircuitClosed { circuit, reason } => {
                e.circuit_id = circuit.id();
                e.reason = format!("{reason:?}");
                pb::EventKind::CircuitClosed
            }
            NodeEvent::PeerUp { peer } => {
                e.node_id = peer.to_string();
                pb::EventKind::PeerUp
            }
            NodeEvent::PeerDown { peer } => {
                e.node_id = peer.to_string();
                pb::EventKind::PeerDown
            }
            NodeEvent::DirectoryChanged { relays } => {
                e.count = relays as u64;
                pb::EventKind::DirectoryChanged
            }
            NodeEvent::Error { message } => {
                e.message = message;
                pb::EventKind::Error
            }
            NodeEvent::OnionKeysRotated { certs } => {
                e.count = certs.len() as u64;
                pb::EventKind::OnionKeysRotated
            }
            _ => return None,
        };
        e.kind = kind.into();
        Some(e)
    }
}
