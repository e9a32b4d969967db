//! # nyx-crypto: keys, handshakes, sessions and onion layers for NyxNet
//!
//! What it is for: everything cryptographic on NyxNet's links and circuits, sans-IO (bytes
//! and `now` in, bytes out; no sockets, no clocks, no tasks).
//!
//! * [`identity`]: a node's Ed25519 identity, its `NodeId`, domain-separated signatures;
//!   [`keyfile`]: secret key files written atomically with mode 0600 and loaded with clear
//!   errors.
//! * [`kem`]: the hybrid X25519 + ML-KEM-768 key encapsulation with a combiner that keeps keys
//!   secret while either primitive holds.
//! * [`onion_cert`]: onion-key certificates (an identity key vouching for an onion key and
//!   its validity period); [`onion_keys`]: the rotation schedule (a new key per period, an
//!   overlap, erasure after it).
//! * [`hop`]: the circuit-hop handshake (typestates, one round trip) that turns a relay's
//!   onion key into a [`session::Session`].
//! * [`fast_hop`]: the one-hop handshake of directory circuits (Tor's CREATE_FAST), keyed
//!   through the link to a relay known only by identity, link key and address.
//! * [`link`]: the mutually authenticated link handshake between nodes (typestates, one
//!   round trip, initiator identity hidden from observers).
//! * [`session`]: ChaCha20-Poly1305 datagram sessions with explicit 64-bit packet numbers,
//!   direction-separated keys, a replay window ([`replay`]) and rekeying without a round
//!   trip, sealing and opening in place (the cipher from `ring`, whose assembly is faster
//!   for whole datagrams, or from nyx-chacha where its AVX-512 IFMA backend is).
//! * [`onion`]: fixed-size onion cells for circuits of up to three relays, keyed by the hop
//!   handshake: layers removed and added in place, bitwise unlinkable across hops, modified
//!   cells caught by the next hop, replays refused per hop.
//! * [`aead`]: the ChaCha20-Poly1305 the handshakes and onion layers use, in place and
//!   allocation-free, with the partial keystreams and suffixed tags the onion needs; the
//!   cipher itself is the `nyx-chacha` crate (SIMD kernels chosen at run time: the one place
//!   unsafe code is allowed, which is why it is a crate of its own).
//!
//! docs/protocol.md describes every message, key schedule and the reasons behind them.
//!
//! What it is not for: sockets, clocks, task spawning, or framing of anything but its own
//! messages.

#![forbid(unsafe_code)]

pub mod aead;
mod error;
pub mod fast_hop;
pub mod hop;
pub mod identity;
pub mod kem;
pub mod keyfile;
pub mod link;
pub mod onion;
pub mod onion_cert;
pub mod onion_keys;
pub mod replay;
pub mod session;

pub use error::Error;
