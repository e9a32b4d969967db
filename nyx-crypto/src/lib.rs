//! # nyx-crypto: keys, handshakes, sessions and onion layers for NyxNet
//!
//! What it will be for (issue 3): node identity and onion keys, the hybrid post-quantum
//! handshake (X25519 + ML-KEM-768) for links and circuit hops as typestates, ChaCha20-Poly1305
//! datagram sessions with explicit packet numbers and a replay window, and per-hop onion cell
//! layers. Sans-IO: bytes in, bytes out.
//!
//! What it is not for: sockets, clocks, task spawning or wire framing of anything but its own
//! messages.
//!
//! This crate has no API yet; nothing here should be relied on until issue 3 lands.

#![forbid(unsafe_code)]
