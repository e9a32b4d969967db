//! [`NodeBuilder`]: a node in a few lines, with the settings that matter for embedding.

use std::net::SocketAddr;

use nyx_core::config::TransportKind;

use crate::Error;
use crate::{BoundNode, Node, NodeKeys, NodeSettings, unix_now};
use nyx_overlay::directory::{Directory, ExitPolicy};

/// Configures and starts a [`Node`]: `Node::builder().directory(dir).build()?`. Defaults are
/// [`NodeSettings::default`]: QUIC on 127.0.0.1 with a free port, no exit traffic, fresh
/// keys. Needs a tokio runtime.
#[derive(Debug, Default)]
pub struct NodeBuilder {
    settings: NodeSettings,
    keys: Option<NodeKeys>,
    directory: Option<Directory>,
}

impl NodeBuilder {
    /// The relays to build circuits through (required).
    pub fn directory(mut self, directory: Directory) -> Self {
        self.directory = Some(directory);
        self
    }

    /// QUIC (default) or UDP.
    pub fn transport(mut self, transport: TransportKind) -> Self {
        self.settings.transport = transport;
        self
    }

    /// Where to listen for other nodes (default 127.0.0.1, a free port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.settings.listen = addr;
        self
    }

    /// What this node connects streams to as an exit (default: nothing).
    pub fn exit_policy(mut self, policy: ExitPolicy) -> Self {
        self.settings.exit_policy = policy;
        self
    }

    /// The node's keys (default: generated now).
    pub fn keys(mut self, keys: NodeKeys) -> Self {
        self.keys = Some(keys);
        self
    }

    /// Every other setting at once (replaces what the other calls set before it).
    pub fn settings(mut self, settings: NodeSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Bind and start the node.
    pub fn build(self) -> Result<Node, Error> {
        let directory = self.directory.ok_or(Error::Settings {
            reason: "a node needs a directory (NodeBuilder::directory)".into(),
        })?;
        let keys = match self.keys {
            Some(k) => k,
            None => NodeKeys::generate(unix_now())?,
        };
        BoundNode::bind(keys, self.settings)?.start(directory)
    }
}
