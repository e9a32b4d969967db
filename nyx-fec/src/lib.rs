//! # nyx-fec: RaptorQ forward error correction for NyxNet streams
//!
//! What it will be for (issue 4): splitting a byte stream into RaptorQ source blocks sized to
//! cells, rateless repair on demand, and a controller that adapts up-front redundancy to the
//! loss the receiver reports. Sans-IO: it takes bytes and `now`, returns packets and deadlines.
//!
//! What it is not for: sockets, clocks, encryption or congestion control.
//!
//! This crate has no API yet; nothing here should be relied on until issue 4 lands.

#![forbid(unsafe_code)]
