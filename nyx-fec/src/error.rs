//! The one error type of nyx-fec.

/// What can go wrong in nyx-fec. Every error from data that came over the network is one of
/// these, never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A packet or feedback message is shorter than its fixed part or its declared contents.
    #[error("{what} of {len} bytes is truncated (needs {needed})")]
    Truncated {
        /// Which message.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The length it needs.
        needed: usize,
    },

    /// The first byte names no known message kind.
    #[error("unknown FEC message kind {kind:#04x}")]
    UnknownKind {
        /// The byte.
        kind: u8,
    },

    /// A field has a value the format does not allow.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Why it is invalid.
        reason: &'static str,
    },

    /// A symbol's size differs from the stream's symbol size.
    #[error("symbol of {got} bytes, the stream uses {expected}")]
    SymbolSize {
        /// The stream's symbol size.
        expected: usize,
        /// What arrived.
        got: usize,
    },

    /// A symbol's block has more source symbols than this receiver accepts
    /// (`max_block_symbols`).
    #[error("block {block} has {symbols} source symbols, more than the {max} accepted")]
    BlockTooLarge {
        /// The block in the packet.
        block: u32,
        /// Its source symbols, as the packet declares them.
        symbols: u16,
        /// The receiver's `max_block_symbols`.
        max: u16,
    },

    /// A packet names a block beyond the receiver's window: the sender exceeded the cap on
    /// blocks in flight.
    #[error("block {block} is beyond the receive window (next needed {next}, window {window})")]
    BlockOutOfWindow {
        /// The block in the packet.
        block: u32,
        /// The next block the receiver needs.
        next: u32,
        /// How many blocks it holds at most.
        window: u32,
    },

    /// A packet disagrees with earlier packets of the same block about the block's shape.
    #[error("block {block} was announced with another length")]
    BlockMismatch {
        /// The block.
        block: u32,
    },

    /// The stream used up its block numbers, symbol ids or packet sequence numbers.
    #[error("stream exhausted its {what}")]
    Exhausted {
        /// Which counter.
        what: &'static str,
    },

    /// A configuration value is out of range.
    #[error("invalid configuration: {field} {reason}")]
    Config {
        /// The field.
        field: &'static str,
        /// Why.
        reason: &'static str,
    },

    /// An output buffer is too small for the packet.
    #[error("buffer of {capacity} bytes cannot hold a {needed}-byte packet")]
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        capacity: usize,
    },
}
