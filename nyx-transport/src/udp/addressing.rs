//! Which local address a reply leaves from, on a socket bound to an unspecified address
//! (a node reachable at several addresses answers each peer from the one it used).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// Addresses between the socket and the engine. The engine sees every peer by its plain
/// address (IPv4 as IPv4, as descriptors publish them); a dual-stack IPv6 socket sends to and
/// receives from IPv4 peers as IPv4-mapped IPv6 addresses. On a socket bound to an
/// unspecified address (`0.0.0.0` or `[::]`) a reply must leave from the local address the peer
/// sent to, not whichever the kernel would pick (a peer matches replies by address): the
/// destination of each received datagram is kept per peer and used as the source of what
/// is sent to it. A peer with a link or a dial keeps the address it has (a datagram forged
/// with its source cannot move it) until a datagram authenticated under its session arrives
/// at another local address (the peer now sends there: it dialled this node at another of
/// its addresses). Handshake answers (WELCOME, COOKIE) leave from where the peer's latest
/// HELLO arrived. Entries of peers the engine does not know are dropped when the table is
/// full, and none is added while it stays full.
#[derive(Debug)]
pub(super) struct Addressing {
    /// The socket is IPv6 (dual-stack unless the system says otherwise).
    v6: bool,
    /// The socket is bound to an unspecified address.
    unspecified: bool,
    /// The local address each peer last sent to (unspecified sockets only).
    reply_from: HashMap<SocketAddr, IpAddr>,
    /// The local address each peer's latest HELLO arrived at (unspecified sockets only).
    hello_to: HashMap<SocketAddr, IpAddr>,
    /// Entries kept at most in each table before it makes room.
    max_entries: usize,
}

impl Addressing {
    pub(super) fn new(local: SocketAddr, max_peers: usize) -> Self {
        Addressing {
            v6: local.is_ipv6(),
            unspecified: local.ip().is_unspecified(),
            reply_from: HashMap::new(),
            hello_to: HashMap::new(),
            max_entries: max_peers.saturating_mul(2).max(64),
        }
    }

    /// A received datagram's source as the engine knows it; remembers where it arrived
    /// unless `known` peers already have an address.
    pub(super) fn received(
        &mut self,
        from: SocketAddr,
        to_local: Option<IpAddr>,
        datagram: &[u8],
        known: impl Fn(SocketAddr) -> bool,
    ) -> SocketAddr {
        let from = SocketAddr::new(from.ip().to_canonical(), from.port());
        let (true, Some(local)) = (self.unspecified, to_local) else {
            return from;
        };
        let local = local.to_canonical();
        // Only a datagram of a HELLO's exact length: a forged short one from a known peer's
        // source cannot redirect the answer to that peer's real HELLO so cheaply.
        let hello_len = 1 + super::COOKIE_LEN + nyx_crypto::link::HELLO_LEN;
        if datagram.first() == Some(&super::T_HELLO) && datagram.len() == hello_len {
            if self.hello_to.len() >= self.max_entries && !self.hello_to.contains_key(&from) {
                // Answers to handshakes in flight fall back to the peers' other entries.
                self.hello_to.clear();
            }
            self.hello_to.insert(from, local);
        }
        if self.reply_from.contains_key(&from) && known(from) {
            return from;
        }
        if self.reply_from.len() >= self.max_entries && !self.reply_from.contains_key(&from) {
            self.reply_from.retain(|addr, _| known(*addr));
            if self.reply_from.len() >= self.max_entries {
                return from;
            }
        }
        self.reply_from.insert(from, local);
        from
    }

    /// A datagram from `from` (as the engine knows it) that arrived at `to_local`
    /// authenticated under the peer's session: replies leave from there now.
    pub(super) fn authenticated(&mut self, from: SocketAddr, to_local: Option<IpAddr>) {
        if let (true, Some(local)) = (self.unspecified, to_local)
            && let Some(entry) = self.reply_from.get_mut(&from)
        {
            *entry = local.to_canonical();
        }
    }

    /// The socket destination and the source address for `datagram` to `to`.
    pub(super) fn sending(&self, to: SocketAddr, datagram: &[u8]) -> (SocketAddr, Option<IpAddr>) {
        let destination = match (self.v6, to.ip()) {
            (true, IpAddr::V4(v4)) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), to.port()),
            _ => to,
        };
        let handshake = matches!(datagram.first(), Some(&super::T_WELCOME | &super::T_COOKIE));
        let hello_to = self.hello_to.get(&to).filter(|_| handshake);
        (destination, hello_to.or(self.reply_from.get(&to)).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATA: &[u8] = &[super::super::T_DATA];
    const HELLO: &[u8] = &{
        let mut hello = [0u8; 1 + super::super::COOKIE_LEN + nyx_crypto::link::HELLO_LEN];
        hello[0] = super::super::T_HELLO;
        hello
    };
    const WELCOME: &[u8] = &[super::super::T_WELCOME];
    const COOKIE: &[u8] = &[super::super::T_COOKIE];

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn replies_leave_from_where_a_peer_sent_and_forgeries_cannot_move_a_known_peer() {
        let mut a = Addressing::new(addr("[::]:9000"), 2);
        let peer = addr("[::ffff:198.51.100.7]:4000");
        let seen = a.received(
            peer,
            Some("::ffff:203.0.113.1".parse().unwrap()),
            DATA,
            |_| false,
        );
        assert_eq!(
            seen,
            addr("198.51.100.7:4000"),
            "the engine sees plain IPv4"
        );
        assert_eq!(
            a.sending(seen, DATA),
            (peer, Some("203.0.113.1".parse().unwrap())),
            "to the mapped address, from where it sent"
        );
        // Once the peer has a link, a datagram forged with its source to another local
        // address does not move it; an unknown peer's entry follows its latest datagram.
        a.received(peer, Some("203.0.113.2".parse().unwrap()), DATA, |_| true);
        assert_eq!(
            a.sending(seen, DATA).1,
            Some("203.0.113.1".parse().unwrap())
        );
        a.received(peer, Some("203.0.113.2".parse().unwrap()), DATA, |_| false);
        assert_eq!(
            a.sending(seen, DATA).1,
            Some("203.0.113.2".parse().unwrap())
        );
        // Bounded: full of unknown peers, they make room; full of known ones, none is added.
        for port in 1..200 {
            a.received(
                addr(&format!("192.0.2.1:{port}")),
                Some("203.0.113.1".parse().unwrap()),
                DATA,
                |_| false,
            );
            assert!(a.reply_from.len() <= a.max_entries);
        }
        let mut full = Addressing::new(addr("0.0.0.0:9000"), 1);
        for port in 1..100 {
            full.received(
                addr(&format!("192.0.2.1:{port}")),
                Some("203.0.113.1".parse().unwrap()),
                DATA,
                |_| true,
            );
        }
        assert_eq!(full.reply_from.len(), full.max_entries);
        // A socket bound to one address leaves the choice to the kernel.
        let mut bound = Addressing::new(addr("203.0.113.1:9000"), 8);
        bound.received(peer, Some("203.0.113.1".parse().unwrap()), DATA, |_| false);
        assert!(bound.reply_from.is_empty());
    }

    /// A known peer that dials this node at another of its addresses: the handshake is
    /// answered from that address at once, and everything else once a datagram of the new
    /// session authenticates there.
    #[test]
    fn a_known_peer_moves_to_another_local_address_only_by_an_authenticated_datagram() {
        let first: IpAddr = "127.0.0.1".parse().unwrap();
        let second: IpAddr = "127.0.9.61".parse().unwrap();
        let mut a = Addressing::new(addr("0.0.0.0:9000"), 8);
        let peer = addr("127.0.9.60:4000");
        a.received(peer, Some(first), DATA, |_| false);
        a.received(peer, Some(second), HELLO, |_| true);
        assert_eq!(a.sending(peer, WELCOME).1, Some(second));
        assert_eq!(a.sending(peer, COOKIE).1, Some(second));
        assert_eq!(
            a.sending(peer, DATA).1,
            Some(first),
            "a HELLO proves nothing"
        );
        a.authenticated(peer, Some(second));
        assert_eq!(a.sending(peer, DATA).1, Some(second));
        // An unknown address gets no entry from an authenticated datagram (none can be).
        a.authenticated(addr("127.0.9.70:1"), Some(first));
        assert_eq!(a.reply_from.len(), 1);
    }
}
