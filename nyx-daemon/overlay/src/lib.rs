//! # nyx-overlay: the NyxNet overlay protocol, sans-IO
//!
//! What it is for: every decision a NyxNet node makes about circuits and streams, as state
//! machines that take bytes and `now` and return what to send, what happened and when to be
//! called again:
//!
//! * [`directory`]: signed relay descriptors, exit policies, the directory document, and
//!   generated test networks;
//! * [`path`]: path selection with guards;
//! * [`circuit`]: the circuit core ([`Overlay`]): building circuits, relaying cells for
//!   others, teardown, link liveness;
//! * [`build`]: the circuit-building policy ([`BuildPolicy`]): which path to try, how many
//!   attempts, which relay to blame for a failure, and when to fall back;
//! * [`stream`]: reliable byte streams over a circuit, protected by nyx-fec, with congestion
//!   and flow control.
//!
//! What it is not for: sockets, tasks, timers or clocks. This crate depends on no async
//! runtime and reads no clock; the time always comes in as an argument. The async node that
//! drives it over QUIC or UDP is `nyx-node`; files and processes are `nyx-daemon`'s.

#![forbid(unsafe_code)]

pub mod build;
pub mod circuit;
pub mod directory;
mod error;
pub mod path;
pub mod stream;

pub use build::{BuildId, BuildOutcome, BuildPolicy};
pub use circuit::{
    CircuitHandle, DestroyReason, Event, ExitHandle, HopSpec, LiveLimits, Output, Overlay,
    OverlayConfig, OverlayStats,
};
pub use error::Error;
