//! The one link interface the overlay uses, whatever the transport: send a cell (unreliable)
//! or a control message (reliable, ordered) to a verified peer ([`CellLink`]); receive
//! [`Inbound`] cells and control messages from one channel.
//!
//! A QUIC link ([`crate::quic::QuicLink`]) implements [`CellLink`] itself, and
//! [`drive_quic_link`] (the node spawns it per link) moves its incoming cells and control
//! messages to the shared channel and acknowledges and resends its control datagrams. A UDP
//! peer is a [`UdpLink`]: a handle on the UDP driver task's command queue, made when that task
//! reports `Connected`; the driver's `Cell` and `Control` events are the inbound side.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use nyx_core::NodeId;
use tokio::sync::mpsc;

use crate::Error;
use crate::quic::QuicLink;
use crate::udp::UdpCommand;

/// What arrives on a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A cell (unreliable, unordered).
    Cell(Bytes),
    /// A control message (reliable, in order).
    Control(Vec<u8>),
}

/// A message that arrived from a verified peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    /// Who sent it.
    pub peer: NodeId,
    /// What it is.
    pub message: Message,
}

/// Sending side of a link to one verified peer, over any transport.
pub trait CellLink: Send + Sync + std::fmt::Debug {
    /// The peer's verified identity.
    fn peer(&self) -> NodeId;

    /// Queue one cell; never waits. Cells are unreliable: a full queue or a closed link is
    /// an error the caller counts as a drop.
    fn send_cell(&self, cell: Bytes) -> Result<(), Error>;

    /// Queue one control message; never waits. Once queued it is delivered reliably and in
    /// order while the link lives; a full queue, or (QUIC) a full window of unacknowledged
    /// chunks, is an error (backpressure).
    fn send_control(&self, msg: Vec<u8>) -> Result<(), Error>;
}

impl CellLink for QuicLink {
    fn peer(&self) -> NodeId {
        QuicLink::peer(self)
    }

    fn send_cell(&self, cell: Bytes) -> Result<(), Error> {
        QuicLink::send_cell(self, cell)
    }

    fn send_control(&self, msg: Vec<u8>) -> Result<(), Error> {
        QuicLink::send_control(self, &msg)
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

    /// The peer's address (where its datagrams come from, checked by the handshake).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Close the link (the peer is told); false if the driver's queue is full or gone, in
    /// which case the link ends by its idle timeout.
    pub fn close(&self) -> bool {
        let close = UdpCommand::Close {
            peer: self.peer,
            addr: self.addr,
        };
        self.commands.try_send(close).is_ok()
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
            .map_err(queue_error)
    }

    fn send_control(&self, msg: Vec<u8>) -> Result<(), Error> {
        self.commands
            .try_send(UdpCommand::Control {
                addr: self.addr,
                msg,
            })
            .map_err(queue_error)
    }
}

/// The identity a dial shows: the relay's own, or (a client-only node, `relay` none) one
/// generated for this link alone.
pub(crate) fn dial_identity(
    relay: Option<&Arc<nyx_crypto::identity::IdentityKey>>,
) -> Result<Arc<nyx_crypto::identity::IdentityKey>, Error> {
    match relay {
        Some(identity) => Ok(identity.clone()),
        None => Ok(Arc::new(
            nyx_crypto::identity::IdentityKey::generate().map_err(|e| Error::Link {
                reason: format!("cannot make a link identity: {e}"),
            })?,
        )),
    }
}

fn queue_error<T>(e: mpsc::error::TrySendError<T>) -> Error {
    Error::Link {
        reason: match e {
            mpsc::error::TrySendError::Full(_) => "UDP send queue full".to_string(),
            mpsc::error::TrySendError::Closed(_) => "UDP transport stopped".to_string(),
        },
    }
}

/// Drive a QUIC link until it closes or `to` is dropped: its incoming cells and control
/// messages go to `to`; its control chunks are acknowledged and resent until the peer
/// acknowledges them. Run one per link (a second call returns at once).
pub async fn drive_quic_link(link: Arc<QuicLink>, to: mpsc::Sender<Inbound>) {
    link.drive(to).await;
}
