//! The driver's view of links: one live link per peer over either transport, and the
//! tasks that dial and drive QUIC links.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nyx_core::{NodeId, Timestamp};
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
    /// Open QUIC links to a peer besides the one in use: the loser of a crossed dial or a
    /// redial, until it closes (the node moves to it if the link in use closes first).
    pub(super) quic_spare: HashMap<NodeId, Vec<Arc<QuicLink>>>,
    pub(super) udp_dials: HashMap<SocketAddr, NodeId>,
}

/// How long a QUIC link that lost to another link to the same peer stays open (and read)
/// before the node with the smaller id closes it: what the peer sent on it before it saw
/// both links still arrives.
pub(super) const LINGER: Duration = Duration::from_secs(2);

/// Which of two QUIC links to one peer a node uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    Old,
    New,
}

/// What the choice between two links to one peer looks at.
#[derive(Debug, Clone, Copy)]
pub(super) struct LinkFacts {
    pub(super) dialled_by_us: bool,
    /// When its handshake began here.
    pub(super) started: Timestamp,
    /// When its handshake completed here.
    pub(super) up: Timestamp,
}

impl LinkFacts {
    pub(super) fn of(link: &QuicLink) -> Self {
        LinkFacts {
            dialled_by_us: link.dialled_by_us(),
            started: link.handshake_started(),
            up: link.up_at(),
        }
    }
}

/// Which of two QUIC links to one peer to use: the rule both ends apply when a second link
/// comes up. Crossed dials (the links go opposite ways, and the new link's handshake began
/// before the old one was up: both ends dialled at once) keep the link dialled by the
/// smaller node id. Otherwise the new link stays: the peer redialled (it restarted, or
/// probes the address it advertises), and the old link is most likely dead or unwanted.
///
/// Only the node with the smaller id closes the other link (after [`LINGER`]); the other
/// node keeps both open and, when the link it uses closes, moves to the one left. Near the
/// edge of the crossing window the two ends may judge differently; then the larger id may
/// use the link that gets closed and moves over when it does, and nothing is closed twice.
pub(super) fn keep(me: NodeId, peer: NodeId, old: LinkFacts, new: LinkFacts) -> Keep {
    let crossed = old.dialled_by_us != new.dialled_by_us && new.started < old.up;
    if !crossed {
        return Keep::New;
    }
    // The winner is the link the smaller id dialled: ours if we are smaller.
    if old.dialled_by_us == (me < peer) {
        Keep::Old
    } else {
        Keep::New
    }
}

/// Close `link` after [`LINGER`] (it is driven meanwhile).
pub(super) fn retire_quic(link: Arc<QuicLink>) -> JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(LINGER).await;
        link.close("overlay: another link replaces this one");
    })
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
                        let _ = events.send(LinkEvent::QuicUp(link)).await;
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
            Ok(link) => LinkEvent::QuicUp(link),
            Err(e) => {
                tracing::debug!(error = %e, "QUIC dial failed");
                LinkEvent::DialFailed(peer)
            }
        };
        let _ = events.send(event).await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: NodeId = NodeId::from_bytes([1; 32]);
    const LARGE: NodeId = NodeId::from_bytes([2; 32]);

    fn facts(dialled_by_us: bool, started_ms: u64, up_ms: u64) -> LinkFacts {
        LinkFacts {
            dialled_by_us,
            started: Timestamp::from_millis(started_ms),
            up: Timestamp::from_millis(up_ms),
        }
    }

    #[test]
    fn crossed_dials_keep_the_link_the_smaller_id_dialled_at_both_ends() {
        // Both dial at 0 ms with a 10 ms round trip. Each end sees its own dial up at 10 ms
        // and the accepted one at 15 ms: each sees the other's link last.
        let (own, accepted) = (facts(true, 0, 10), facts(false, 5, 15));
        assert_eq!(keep(SMALL, LARGE, own, accepted), Keep::Old);
        assert_eq!(keep(LARGE, SMALL, own, accepted), Keep::New);
        // The other order, should one end's accepted link finish first.
        let (accepted, own) = (facts(false, 5, 9), facts(true, 0, 10));
        assert_eq!(keep(SMALL, LARGE, accepted, own), Keep::New);
        assert_eq!(keep(LARGE, SMALL, accepted, own), Keep::Old);
    }

    #[test]
    fn a_second_link_in_the_same_direction_replaces_the_first() {
        for (me, peer) in [(SMALL, LARGE), (LARGE, SMALL)] {
            for dialled in [true, false] {
                let (old, new) = (facts(dialled, 0, 10), facts(dialled, 5, 15));
                assert_eq!(keep(me, peer, old, new), Keep::New);
            }
        }
    }

    #[test]
    fn a_link_begun_after_the_old_one_was_up_replaces_it() {
        // The peer redialled (a restart, or a probe of its advertised address): whatever
        // the ids and directions, both ends move to the new link.
        for (me, peer) in [(SMALL, LARGE), (LARGE, SMALL)] {
            let (old, new) = (facts(true, 0, 10), facts(false, 11, 20));
            assert_eq!(keep(me, peer, old, new), Keep::New);
            let (old, new) = (facts(false, 0, 10), facts(true, 11, 20));
            assert_eq!(keep(me, peer, old, new), Keep::New);
        }
    }
}
