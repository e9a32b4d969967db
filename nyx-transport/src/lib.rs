//! # nyx-transport: links between NyxNet nodes
//!
//! What it will be for (issue 5): one link abstraction over QUIC (quinn, cells in DATAGRAM
//! frames, hybrid post-quantum TLS 1.3) and over raw UDP (nyx-crypto sessions, GSO/GRO
//! batching), a connection pool with one connection per peer, and a seeded fault-injection shim
//! for tests.
//!
//! What it is not for: circuits, relaying or streams (nyx-daemon's overlay).
//!
//! This crate has no API yet; nothing here should be relied on until issue 5 lands.
