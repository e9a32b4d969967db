//! Typed configuration of a stream's FEC, with documented defaults.

use std::time::Duration;

use crate::Error;

/// RaptorQ (RFC 6330) allows at most this many source symbols per block.
pub const MAX_SOURCE_SYMBOLS: u16 = 56_403;

/// How one direction of a stream is coded. Both ends must use the same `symbol_size`; the
/// other fields are local policy.
#[derive(Debug, Clone, PartialEq)]
pub struct FecConfig {
    /// Bytes of stream data per symbol; a packet is [`crate::packet::SYMBOL_HEADER_LEN`] bytes
    /// more. Default 1024; the overlay sets it so that one packet fills one cell payload.
    pub symbol_size: u16,
    /// Source symbols in a full block. Larger blocks average losses over more symbols (less
    /// redundancy for the same first-round success: docs/fec.md compares 256 and 512) but
    /// hold more memory. Default 512 (a 512 KiB block at the default symbol size). A
    /// receiver refuses symbols of blocks that declare more ([`crate::Error::BlockTooLarge`]).
    pub max_block_symbols: u16,
    /// A block with data is closed after this long even if not full, so small writes are not
    /// held back. Default 5 ms. (`Sender::flush` closes it at once.)
    pub flush_delay: Duration,
    /// Blocks the sender may have unacknowledged (and the receiver holds) at once: the
    /// memory bound (about twice this many blocks of data on each side). A sender at the cap
    /// fills one more (open) block, then accepts no more data (backpressure). Default 8.
    pub max_blocks_in_flight: u32,
    /// How often the receiver reports (while it has something to report). Default 25 ms.
    pub feedback_interval: Duration,
    /// After answering a repair request for a block, the sender ignores further requests for
    /// it this long (they were probably sent before the repair arrived). Set it near the
    /// round-trip time. Default 50 ms.
    pub repair_holdoff: Duration,
    /// With blocks unacknowledged and no feedback, the sender sends a probe symbol after this
    /// long (doubling each time, up to 8x), so a block whose every packet was lost is found.
    /// Used until the caller tells the sender the round trip ([`Sender::set_rtt`]); from then
    /// on the probe waits that round trip plus `feedback_interval` instead. Default 200 ms.
    ///
    /// [`Sender::set_rtt`]: crate::Sender::set_rtt
    pub probe_timeout: Duration,
    /// The probability that a block needs a second round that the redundancy controller
    /// aims at. Default 0.005 (half of the 1% the design allows, as margin for estimation
    /// error).
    pub target_second_round: f64,
    /// Up-front repair symbols as a fraction of source symbols are kept within
    /// `[0, max_redundancy]`. Default 1.0 (at most doubling a block).
    pub max_redundancy: f64,
}

impl Default for FecConfig {
    fn default() -> Self {
        FecConfig {
            symbol_size: 1024,
            max_block_symbols: 512,
            flush_delay: Duration::from_millis(5),
            max_blocks_in_flight: 8,
            feedback_interval: Duration::from_millis(25),
            repair_holdoff: Duration::from_millis(50),
            probe_timeout: Duration::from_millis(200),
            target_second_round: 0.005,
            max_redundancy: 1.0,
        }
    }
}

impl FecConfig {
    /// Check every field; the first problem found is returned.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field, reason| Err(Error::Config { field, reason });
        if self.symbol_size == 0 {
            return bad("symbol_size", "must be at least 1");
        }
        if self.max_block_symbols == 0 || self.max_block_symbols > MAX_SOURCE_SYMBOLS {
            return bad("max_block_symbols", "must be within 1..=56403 (RFC 6330)");
        }
        if self.max_blocks_in_flight == 0 || self.max_blocks_in_flight > 1 << 16 {
            return bad("max_blocks_in_flight", "must be within 1..=65536");
        }
        if self.feedback_interval.is_zero() {
            return bad("feedback_interval", "must be positive");
        }
        if self.probe_timeout.is_zero() {
            return bad("probe_timeout", "must be positive");
        }
        if !(self.target_second_round > 0.0 && self.target_second_round < 0.5) {
            return bad("target_second_round", "must be within (0, 0.5)");
        }
        if !(self.max_redundancy >= 0.0 && self.max_redundancy <= 16.0) {
            return bad("max_redundancy", "must be within [0, 16]");
        }
        Ok(())
    }

    /// Bytes in a full block.
    pub fn block_bytes(&self) -> usize {
        usize::from(self.symbol_size) * usize::from(self.max_block_symbols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_each_bad_field_is_named() {
        FecConfig::default().validate().unwrap();
        let cases: Vec<(&str, FecConfig)> = vec![
            (
                "symbol_size",
                FecConfig {
                    symbol_size: 0,
                    ..Default::default()
                },
            ),
            (
                "max_block_symbols",
                FecConfig {
                    max_block_symbols: 0,
                    ..Default::default()
                },
            ),
            (
                "max_block_symbols",
                FecConfig {
                    max_block_symbols: 60_000,
                    ..Default::default()
                },
            ),
            (
                "max_blocks_in_flight",
                FecConfig {
                    max_blocks_in_flight: 0,
                    ..Default::default()
                },
            ),
            (
                "feedback_interval",
                FecConfig {
                    feedback_interval: Duration::ZERO,
                    ..Default::default()
                },
            ),
            (
                "probe_timeout",
                FecConfig {
                    probe_timeout: Duration::ZERO,
                    ..Default::default()
                },
            ),
            (
                "target_second_round",
                FecConfig {
                    target_second_round: 0.0,
                    ..Default::default()
                },
            ),
            (
                "target_second_round",
                FecConfig {
                    target_second_round: f64::NAN,
                    ..Default::default()
                },
            ),
            (
                "max_redundancy",
                FecConfig {
                    max_redundancy: -1.0,
                    ..Default::default()
                },
            ),
        ];
        for (field, config) in cases {
            match config.validate() {
                Err(Error::Config { field: got, .. }) => assert_eq!(got, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
