//! # nyx-core: the foundations every NyxNet crate stands on
//!
//! What it is for:
//!
//! * [`buf`]: fixed-size buffer pools (the UDP transport's datagram buffers), bounded in
//!   memory, sharded per thread, with no heap allocation per acquire/release in steady state.
//! * [`rate`]: a lock-free GCRA rate limiter in one atomic word, and a keyed limiter (per peer,
//!   per IP prefix, per circuit) whose memory strangers cannot grow.
//! * [`id`]: [`NodeId`], the identity of a node.
//! * [`time`]: the [`Timestamp`] that sans-IO code takes as `now`, and the [`CoarseClock`]
//!   each async driver keeps as its time line.
//! * [`config`]: the link transport and resource limits, typed, with documented defaults
//!   and validation (serde derives behind the `serde` feature).
//! * [`redact`]: the process-wide switch for logging identifying details, and the
//!   [`Redacted`](redact::Redacted) wrapper that scrubs addresses and node ids from logs.
//!
//! What it is not for: cryptography (nyx-crypto), error correction (nyx-fec), sockets
//! (nyx-transport), or anything that spawns tasks, reads clocks on its own, or does I/O. It
//! depends on no async runtime.
//!
//! [`CoarseClock`]: time::CoarseClock

#![forbid(unsafe_code)]

pub mod buf;
pub mod config;
mod error;
pub mod id;
pub mod rate;
pub mod redact;
pub mod time;

pub use error::{Error, Result};
pub use id::NodeId;
pub use time::Timestamp;
