//! [`Node`]: a running node, owned by the application; dropping it (and every
//! [`NodeHandle`] and stream) stops it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::handle::Command;
use crate::{Error, ExitRequest, IntoTarget, IsolationGroup, NodeBuilder, NodeHandle, NyxStream};

/// A running node: its handle, the payloads it receives as an exit, and its tasks.
///
/// Dropping it does not stop the node while a [`NodeHandle`] or a client [`NyxStream`] is
/// still held; once the last of them is gone the node stops as
/// [`shutdown`](Self::shutdown) would (DESTROY on every circuit, links closed, tasks ended,
/// socket released) without anyone waiting for it.
#[derive(Debug)]
pub struct Node {
    pub(crate) handle: NodeHandle,
    pub(crate) addr: SocketAddr,
    pub(crate) exits: Option<mpsc::Receiver<ExitRequest>>,
    pub(crate) directory: Option<mpsc::Receiver<NyxStream>>,
    pub(crate) task: JoinHandle<()>,
    pub(crate) aux: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
}

impl Node {
    /// Configure, bind and start a node (see [`NodeBuilder`]).
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// Open a stream to `target` ("host:port") through a 3-hop circuit; see
    /// [`NodeHandle::connect`].
    pub async fn connect(&self, target: impl IntoTarget) -> Result<NyxStream, Error> {
        self.handle.connect(target).await
    }

    /// [`connect`](Self::connect) in an isolation group; see
    /// [`NodeHandle::connect_isolated`].
    pub async fn connect_isolated(
        &self,
        target: impl IntoTarget,
        group: &IsolationGroup,
    ) -> Result<NyxStream, Error> {
        self.handle.connect_isolated(target, group).await
    }

    /// Where the node listens for other nodes.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The node's id.
    pub fn node_id(&self) -> nyx_core::NodeId {
        self.handle.id
    }

    /// A handle for using the node.
    pub fn handle(&self) -> NodeHandle {
        self.handle.clone()
    }

    /// The payloads delivered to this node as an exit (taken once; part 2 connects them to
    /// streams). Until taken, they are dropped and counted.
    pub fn take_exit_requests(&mut self) -> Option<mpsc::Receiver<ExitRequest>> {
        self.exits.take()
    }

    /// The directory streams clients open to this node (one request, one response each:
    /// nyx-overlay's `directory::request`), for the owner to answer as a directory cache or
    /// authority (taken once). Streams wait here while nobody reads them; when too many wait
    /// (or the receiver was dropped) new ones are refused. Needs the stream exit service
    /// ([`ExitServiceKind::Streams`](crate::ExitServiceKind::Streams)).
    pub fn take_directory_streams(&mut self) -> Option<mpsc::Receiver<NyxStream>> {
        self.directory.take()
    }

    /// Stop gracefully within 5 seconds; see [`shutdown_within`](Self::shutdown_within).
    pub async fn shutdown(self) {
        self.shutdown_within(Duration::from_secs(5)).await;
    }

    /// Stop gracefully: tear every circuit down (DESTROY with reason shutdown, so streams
    /// fail at once at the other end), close links, and wait for the tasks, at most `grace`.
    pub async fn shutdown_within(self, grace: Duration) {
        let (reply, rx) = oneshot::channel();
        if self
            .handle
            .commands
            .send(Command::Shutdown(reply))
            .await
            .is_ok()
        {
            let _ = tokio::time::timeout(grace, rx).await;
        }
        self.kill();
    }

    /// Stop at once, as a crash would: no DESTROY, no close; peers find out by themselves.
    pub fn kill(self) {
        self.task.abort();
        if let Ok(mut aux) = self.aux.lock() {
            for t in aux.drain(..) {
                t.abort();
            }
        }
    }
}
