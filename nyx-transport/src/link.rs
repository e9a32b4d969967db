//! The one link interface the overlay uses, whatever the transport: send a cell to a verified
//! peer ([`CellLink`]); receive `(peer, cell)` pairs from one channel ([`Inbound`]).
//!
//! A QUIC link ([`crate::quic::QuicLink`]) implements [`CellLink`] itself, and
//! [`forward_quic_cells`] moves its incoming cells to the shared channel (the daemon spawns it
//! per link). A UDP peer is a [`UdpLink`]: a handle on the UDP driver task's command queue,
//! made when that task reports `Connected`; the driver's `Cell` events are the inbound side.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use nyx_core::NodeId;
use tokio::sync::mpsc;

use crate::Error;
use crate::quic::QuicLink;
use crate::udp_driver::UdpCommand;

/// A cell that arrived from a verified peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    /// Who sent it.
    pub peer: NodeId,
    /// The cell.
    pub cell: Bytes,
}

/// Sending side of a link to one verified peer, over any transport.
pub trait CellLink: Send + Sync + std::fmt::Debug {
    /// The peer's verified identity.
    fn peer(&self) -> NodeId;

    /// Queue one cell; never waits. Cells are unreliable: a full queue or a closed link is
    /// an error the caller counts as a drop.
    fn send_cell(&self, cell: Bytes) -> Result<(), Error>;
}

impl CellLink for QuicLink {
    fn peer(&self) -> NodeId {
        QuicLink::peer(self)
    }

    fn send_cell(&self, cell: Bytes) -> Result<(), Error> {
        QuicLink::send_cell(self, cell)
    }
}

/// A link to a peer over the UDP transport: a handle on its driver's command queue.
#[derive(Debug, Clone)]
pub struct UdpLink {
    peer: NodeId,
    addr: SocketAddr,
    commands: mpsc::Sender<UdpCommand>,
}

impl UdpLink {
    /// The link to `peer` at `addr` (as the driver reported it connected).
    pub fn new(peer: NodeId, addr: SocketAddr, commands: mpsc::Sender<UdpCommand>) -> Self {
        UdpLink {
            peer,
            addr,
            commands,
        }
    }
}

impl CellLink for UdpLink {
    fn peer(&self) -> NodeId {
        self.peer
    }

    fn send_cell(&self, cell: Bytes) -> Result<(), Error> {
        self.commands
            .try_send(UdpCommand::Cell {
                addr: self.addr,
                cell,
            })
            .map_err(|e| Error::Link {
                reason: match e {
                    mpsc::error::TrySendError::Full(_) => "UDP send queue full".to_string(),
                    mpsc::error::TrySendError::Closed(_) => "UDP transport stopped".to_string(),
                },
            })
    }
}

/// Move a QUIC link's incoming cells to `to` until the link closes or `to` is dropped.
pub async fn forward_quic_cells(link: Arc<QuicLink>, to: mpsc::Sender<Inbound>) {
    while let Ok(cell) = link.recv_cell().await {
        let inbound = Inbound {
            peer: link.peer(),
            cell,
        };
        if to.send(inbound).await.is_err() {
            return;
        }
    }
}
