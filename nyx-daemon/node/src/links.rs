//! The driver's view of links: one live link per peer over either transport, and the
//! tasks that dial and drive QUIC links.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use nyx_core::NodeId;
use nyx_transport::link::{CellLink, Inbound, UdpLink, drive_quic_link};
use nyx_transport::quic::{QuicEndpoint, QuicLink};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What the link tasks report to the driver.
#[derive(Debug)]
pub(super) enum LinkEvent {
    /// A QUIC link is up (dialled or accepted).
    QuicUp(Arc<QuicLink>),
    /// A QUIC link closed.
    QuicClosed(Arc<QuicLink>),
    /// Dialling failed.
    DialFailed(NodeId),
}

/// A live link.
#[derive(Debug, Clone)]
pub(super) enum LinkRef {
    Quic(Arc<QuicLink>),
    Udp(UdpLink),
}

impl LinkRef {
    pub(super) fn send_cell(&self, cell: Bytes) -> bool {
        match self {
            LinkRef::Quic(l) => CellLink::send_cell(l.as_ref(), cell).is_ok(),
            LinkRef::Udp(l) => l.send_cell(cell).is_ok(),
        }
    }

    pub(super) fn send_control(&self, msg: Vec<u8>) -> bool {
        match self {
            LinkRef::Quic(l) => CellLink::send_control(l.as_ref(), msg).is_ok(),
            LinkRef::Udp(l) => l.send_control(msg).is_ok(),
        }
    }

    /// Where the peer's end of the link is (the address its handshake answered from).
    pub(super) fn remote_addr(&self) -> SocketAddr {
        match self {
            // A dual-stack endpoint sees IPv4 peers as IPv4-mapped addresses.
            LinkRef::Quic(l) => {
                let addr = l.raw_connection().remote_address();
                SocketAddr::new(addr.ip().to_canonical(), addr.port())
            }
            LinkRef::Udp(l) => l.addr(),
        }
    }

    pub(super) fn close(&self) {
        match self {
            LinkRef::Quic(l) => l.close("overlay: link dead"),
            LinkRef::Udp(l) => {
                l.close();
            }
        }
    }
}

/// Links by peer, and the bookkeeping of UDP dials.
#[derive(Debug, Default)]
pub(super) struct Links {
    pub(super) live: HashMap<NodeId, LinkRef>,
    pub(super) udp_dials: HashMap<SocketAddr, NodeId>,
}

/// Spawn the task that moves a QUIC link's messages to `inbound` and reports its end.
pub(super) fn spawn_quic_driver(
    link: Arc<QuicLink>,
    inbound: mpsc::Sender<Inbound>,
    events: mpsc::Sender<LinkEvent>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        drive_quic_link(link.clone(), inbound).await;
        let _ = events.send(LinkEvent::QuicClosed(link)).await;
    })
}

/// Spawn the task that accepts QUIC links.
pub(super) fn spawn_quic_acceptor(
    endpoint: Arc<QuicEndpoint>,
    events: mpsc::Sender<LinkEvent>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(incoming) = endpoint.accept_incoming().await {
            let events = events.clone();
            // The handshake runs in its own task so one slow peer does not hold up others.
            tokio::spawn(async move {
                match incoming.complete().await {
                    Ok(link) => {
                        let _ = events.send(LinkEvent::QuicUp(Arc::new(link))).await;
                    }
                    Err(e) => tracing::debug!(error = %e, "incoming QUIC link failed"),
                }
            });
        }
    })
}

/// Spawn a QUIC dial.
pub(super) fn spawn_quic_dial(
    endpoint: Arc<QuicEndpoint>,
    peer: NodeId,
    addr: SocketAddr,
    events: mpsc::Sender<LinkEvent>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let event = match endpoint.connect(peer, addr).await {
            Ok(link) => LinkEvent::QuicUp(Arc::new(link)),
            Err(e) => {
                tracing::debug!(error = %e, "QUIC dial failed");
                LinkEvent::DialFailed(peer)
            }
        };
        let _ = events.send(event).await;
    })
}
