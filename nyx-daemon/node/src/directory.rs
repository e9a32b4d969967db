//! Directory streams: a stream to a relay itself over a one-hop circuit (Tor's BEGIN_DIR),
//! on which a client asks a directory cache or authority for the consensus, a relay uploads
//! its descriptor, and authorities exchange votes. The requests are nyx-overlay's
//! (`directory::request`); this module only carries them.
//!
//! A client reaches a relay whose descriptor it holds with the full onion handshake
//! ([`DirectoryPeer::Relay`]); it reaches a pinned authority, known only by id, address and
//! link key, with the fast handshake ([`DirectoryPeer::Pinned`]), keyed through the link.
//! A node answers directory streams only when its owner took them
//! ([`Node::take_directory_streams`](crate::Node::take_directory_streams)).

use std::net::SocketAddr;

use tokio::sync::oneshot;

use crate::handle::Command;
use crate::{Circuit, Error, NodeHandle, NyxStream};
use nyx_core::NodeId;
use nyx_crypto::kem::HybridPublicKey;
use nyx_overlay::directory::Descriptor;
use nyx_overlay::stream::DIRECTORY_TARGET;

/// A relay known by its id, address and link key only: a pinned directory authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedPeer {
    /// Its id (the hash of its identity key).
    pub node_id: NodeId,
    /// Where it listens, for this node's transport.
    pub addr: SocketAddr,
    /// Its link key (the UDP transport's handshake needs it; QUIC checks the id).
    pub link_key: HybridPublicKey,
}

/// Whom a directory stream goes to.
#[derive(Debug, Clone)]
pub enum DirectoryPeer {
    /// A relay by its descriptor: its advertised address, link key and current onion key
    /// (a directory cache, or a relay an authority tests for reachability).
    Relay(Box<Descriptor>),
    /// A relay known only by id, address and link key (a pinned authority).
    Pinned(PinnedPeer),
}

impl DirectoryPeer {
    /// The relay.
    pub fn node_id(&self) -> NodeId {
        match self {
            DirectoryPeer::Relay(d) => d.node_id(),
            DirectoryPeer::Pinned(p) => p.node_id,
        }
    }
}

impl NodeHandle {
    /// Build a one-hop circuit to `peer`. For [`DirectoryPeer::Relay`] this proves the relay
    /// answers at its advertised address with its advertised link and onion keys (an
    /// authority's reachability test); for [`DirectoryPeer::Pinned`] it proves the link key
    /// and address. One attempt: the caller decides whom to try next.
    pub async fn directory_circuit(&self, peer: DirectoryPeer) -> Result<Circuit, Error> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::BuildDirectory {
                peer: Box::new(peer),
                reply,
            })
            .await
            .map_err(|_| Error::NodeStopped)?;
        rx.await.map_err(|_| Error::NodeStopped)?
    }

    /// Open a directory stream to `peer` on a one-hop circuit of its own (closed when the
    /// stream ends): write one request, read one response.
    pub async fn directory_stream(&self, peer: DirectoryPeer) -> Result<NyxStream, Error> {
        let circuit = self.directory_circuit(peer).await?;
        let ep = self.start_endpoint(circuit)?;
        let deadline = tokio::time::Instant::now() + self.streams.open_timeout;
        let opened = self.open_on(ep.clone(), DIRECTORY_TARGET, deadline).await;
        // The circuit is this stream's alone: it closes when the stream is done (or now,
        // if the relay refused it).
        ep.lock().expiring = true;
        ep.notify.notify_one();
        opened
    }
}
