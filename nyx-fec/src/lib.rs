//! # nyx-fec: RaptorQ stream coding with adaptive, rateless redundancy
//!
//! What it is for: turning a lossy, reordering, duplicating stream of datagrams (NyxNet's
//! cells over three hops) into a byte-exact stream with as little overhead and delay as the
//! loss allows, instead of retransmitting.
//!
//! * [`Sender`] cuts the byte stream into blocks of up to `max_block_symbols` symbols (closed
//!   early after `flush_delay` so small writes are not held back), sends each block's source
//!   symbols plus repair symbols chosen by the redundancy controller, answers the receiver's
//!   requests with *fresh* repair symbols (RaptorQ is rateless: ids continue, nothing is
//!   resent), and probes when feedback stops, so no block is lost for good. A block's
//!   RaptorQ encoder can be built on another thread ([`Sender::poll_prepare`]).
//! * [`Receiver`] stores source symbols in place and delivers the stream's bytes in order as
//!   soon as every byte before them arrived (no decoding on a loss-free path), decodes a
//!   block that lost a source symbol once enough symbols arrived, in any order, with
//!   duplicates and late symbols ignored, holds at most
//!   `max_blocks_in_flight` blocks, and reports loss counters and missing symbols. The
//!   decode can run on another thread ([`Receiver::poll_decode`]).
//! * [`controller`]: the loss estimator and the redundancy law (docs/fec.md).
//! * [`packet`]: the wire formats of symbol packets and feedback.
//!
//! Sans-IO: every call takes `now`; nothing here opens a socket, reads a clock or spawns.
//!
//! What it is not for: encryption, congestion control, or framing the stream's contents.
//!
//! ```
//! use nyx_core::Timestamp;
//! use nyx_fec::{FecConfig, Receiver, Sender};
//!
//! let config = FecConfig { symbol_size: 64, max_block_symbols: 16, ..FecConfig::default() };
//! let now = Timestamp::ZERO;
//! let mut tx = Sender::new(config.clone(), now)?;
//! let mut rx = Receiver::new(config)?;
//! tx.write(b"hello, lossy world", now)?;
//! tx.flush(now)?;
//! let mut packet = [0u8; 128];
//! while let Some(n) = tx.poll_transmit(now, &mut packet)? {
//!     rx.handle_packet(&packet[..n], now)?;
//! }
//! let mut out = [0u8; 64];
//! let n = rx.read(&mut out);
//! assert_eq!(&out[..n], b"hello, lossy world");
//! # Ok::<(), nyx_fec::Error>(())
//! ```

#![forbid(unsafe_code)]

mod config;
pub mod controller;
mod error;
pub mod packet;
mod receiver;
mod sender;

pub use config::{FecConfig, MAX_SOURCE_SYMBOLS};
pub use error::Error;
pub use receiver::{DecodeJob, DecodedBlock, Receiver, ReceiverStats, SETTLE_LAG};
pub use sender::{EncoderJob, PREPARE_MIN_SYMBOLS, PreparedEncoder, Sender, SenderStats};
