//! [`UdpConfig`]: the UDP transport's settings and their defaults.

use std::num::NonZeroU32;
use std::time::Duration;

use nyx_core::rate::Quota;
use nyx_crypto::session::RekeyPolicy;

/// The default HELLO rate and burst per source prefix.
const TEN: NonZeroU32 = match NonZeroU32::new(10) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

/// Settings of the UDP transport.
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// HELLOs per second across all sources above which a cookie is required. Default 64;
    /// 0 always requires one.
    pub cookie_threshold: u32,
    /// HELLOs accepted from one source prefix (IPv4 /24, IPv6 /48): a rate and a burst.
    /// Default 10 per second, burst 10.
    pub hello_per_source: Quota,
    /// Wait before an unanswered HELLO is followed by a fresh one. Default 1 s.
    pub handshake_timeout: Duration,
    /// HELLOs sent before a dial fails. Default 5.
    pub handshake_attempts: u32,
    /// Rekeying of the sessions.
    pub rekey: RekeyPolicy,
    /// Most peers with sessions or dials. Default 4096. A full table makes room for a
    /// newcomer by evicting the oldest unconfirmed or the quietest link (see `table.rs`).
    pub max_peers: usize,
    /// A link that heard nothing authenticated for this long is closed. Default 3 minutes
    /// (the overlay pings links that carry circuits every few seconds).
    pub idle_timeout: Duration,
    /// Every DATA datagram carries at least this many body bytes, padded (default 1156: the
    /// overlay's link cell, a circuit id and a 1152-byte onion cell): cells, control chunks,
    /// acknowledgements, confirmations and closes all leave as datagrams of one size, so the
    /// size does not tell circuit setup from data. Control messages are cut into chunks of
    /// `pad_to - 4` bytes. 0 turns padding off (tests of the engine's own limits).
    pub pad_to: usize,
    /// Longest cell carried. Default 1400 bytes (a 1152-byte onion cell plus link framing,
    /// with room). Datagram buffers come from a pool sized for it.
    pub max_cell_len: usize,
    /// Memory cap of the datagram buffer pool. Default 64 MiB.
    pub pool_bytes: usize,
    /// How the transport's socket moves datagrams ([`crate::socket`]). Default
    /// [`SocketMode::Auto`](crate::socket::SocketMode::Auto). The engine does not use it.
    pub socket: crate::socket::SocketMode,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            cookie_threshold: 64,
            hello_per_source: Quota::new(TEN, TEN),
            handshake_timeout: Duration::from_secs(1),
            handshake_attempts: 5,
            rekey: RekeyPolicy::default(),
            max_peers: 4096,
            idle_timeout: Duration::from_secs(180),
            max_cell_len: 1400,
            pad_to: nyx_crypto::onion::CELL_LEN + 4,
            pool_bytes: 64 << 20,
            socket: crate::socket::SocketMode::Auto,
        }
    }
}
