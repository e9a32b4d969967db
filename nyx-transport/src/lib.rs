//! # nyx-transport: QUIC and UDP links between NyxNet nodes
//!
//! What it is for: links between nodes with authenticated peers, post-quantum key exchange
//! and batched datagram I/O:
//!
//! * [`link`]: the one interface the overlay uses over both transports: [`link::CellLink`]
//!   to send a cell to a verified peer, [`link::Inbound`] cells from one channel.
//! * [`pq_kx`]: the hybrid X25519MLKEM768 TLS key-exchange group in pure Rust for rustls'
//!   ring provider, interoperating with aws-lc-rs (`tests/pq_interop.rs`), and
//!   [`crypto_provider`], the provider NyxNet's QUIC links use: ring's primitives with only
//!   the post-quantum hybrid group offered.
//!
//! * [`identity_tls`]: TLS certificates made from a node's Ed25519 identity key, and
//!   verifiers that accept a peer by its `NodeId` (no web PKI), refusing any other identity.
//! * [`quic`]: the QUIC transport: one quinn endpoint per node, cells in DATAGRAM frames
//!   (size checked on every send), control messages made reliable by the link in DATAGRAM
//!   frames of the cell size, peers verified by `NodeId`; [`admission`] decides which incoming attempts get a handshake
//!   (Retry under load, per-source limits, a cap on handshakes in progress).
//! * [`udp`]: the UDP transport: its protocol engine, sans-IO ([`udp::UdpEngine`]:
//!   nyx-crypto's link handshake and sessions over raw datagrams, a stateless cookie step and
//!   per-source HELLO limits before any expensive cryptography), and the task that owns a
//!   socket and the engine ([`udp::UdpTransport`], with GSO/GRO and `recvmmsg` batching
//!   through quinn-udp).
//! * [`socket`]: the datagram socket under both: batched where the system allows it, one
//!   datagram per system call where it refuses (network simulators such as Shadow).
//! * [`fault`]: the seeded fault-injection shim (loss, delay, reordering, duplication) that
//!   this crate's tests, the node (nyx-node, for its tests and benches) and the benches put
//!   between real sockets.
//!
//! What it is not for: onion layers, circuits or streams (nyx-crypto, nyx-overlay), or
//! deciding which links to keep: the node (nyx-node) opens links when its overlay asks for
//! them and closes them when the overlay declares them dead, one per peer.

#![forbid(unsafe_code)]

pub mod admission;
mod control;
mod error;
pub mod fault;
pub mod identity_tls;
pub mod link;
pub mod pq_kx;
pub mod quic;
pub mod socket;
pub mod udp;

pub use error::Error;

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// rustls' ring provider with its key-exchange groups replaced by [`pq_kx::X25519MLKEM768`]
/// alone: NyxNet links never fall back to a classical-only key exchange.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(CryptoProvider {
        kx_groups: vec![pq_kx::X25519MLKEM768],
        ..rustls::crypto::ring::default_provider()
    })
}
