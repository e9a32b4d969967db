//! DATA datagrams: a cell, a control message, its acknowledgement or a close, sealed under
//! the link's session; and, on receipt, the session (or a pending one) that opens it.

use std::net::SocketAddr;

use nyx_core::Timestamp;
use nyx_core::redact::Redacted;
use nyx_crypto::session::{HEADER_LEN, OVERHEAD};

use super::{
    KIND_CELL, KIND_CLOSE, KIND_CONFIRM, KIND_CONTROL, KIND_CONTROL_ACK, PAYLOAD_HEADER, T_DATA,
    UdpEngine, UdpEvent,
};
use crate::Error;
use crate::control::ControlState;

impl UdpEngine {
    /// Seal `kind ‖ len ‖ parts ‖ padding` as one DATA datagram to `addr` (padded to
    /// `pad_to` body bytes).
    pub(super) fn send_data(
        &mut self,
        addr: SocketAddr,
        kind: u8,
        parts: &[&[u8]],
        now: Timestamp,
    ) -> Result<(), Error> {
        let body = parts.iter().map(|p| p.len()).sum::<usize>();
        let body_len = match u16::try_from(body) {
            Ok(n) if body <= self.config.max_cell_len => n,
            _ => {
                return Err(Error::CellTooLarge {
                    len: body,
                    max: self.config.max_cell_len,
                });
            }
        };
        let len = PAYLOAD_HEADER + body.max(self.config.pad_to);
        let Some(link) = self.links.get_mut(&addr) else {
            self.stats.dropped_no_link += 1;
            return Err(Error::Link {
                reason: "no link to that address".to_string(),
            });
        };
        let Ok(mut buf) = self.pool.acquire() else {
            self.stats.dropped_no_buffer += 1;
            return Err(Error::Link {
                reason: "datagram buffer pool exhausted".to_string(),
            });
        };
        let full = buf.full_mut();
        full[0] = T_DATA;
        let mut at = 1 + HEADER_LEN;
        full[at] = kind;
        full[at + 1..at + PAYLOAD_HEADER].copy_from_slice(&body_len.to_be_bytes());
        at += PAYLOAD_HEADER;
        for part in parts {
            full[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        // The pooled buffer may hold an earlier datagram's bytes.
        full[at..1 + HEADER_LEN + len].fill(0);
        let n = link
            .session
            .seal(now, &mut full[1..1 + OVERHEAD + len], len)
            .map_err(|e| Error::Link {
                reason: e.to_string(),
            })?;
        buf.truncate(1 + n);
        self.out.push_back((addr, buf));
        Ok(())
    }

    pub(super) fn on_data(&mut self, from: SocketAddr, body: &[u8], now: Timestamp) -> bool {
        let Some(link) = self.links.get_mut(&from) else {
            self.stats.dropped_malformed += 1;
            return false;
        };
        // One copy, from the socket's reused receive buffer into a pooled buffer the cell
        // is decrypted in and delivered from.
        if body.len() > self.pool.buffer_size() {
            self.stats.dropped_malformed += 1;
            return false;
        }
        let Ok(mut buf) = self.pool.acquire() else {
            self.stats.dropped_no_buffer += 1;
            return false;
        };
        buf.truncate(body.len());
        buf.copy_from_slice(body);
        let range = match link.session.open(now, &mut buf) {
            Ok(range) => range,
            Err(_) => {
                // Perhaps a later handshake from this address completed: the initiator's
                // next attempt after a lost WELCOME, or a restarted peer. Newest first. (A
                // failed open changes no session but zeroes the payload, so each try starts
                // from the datagram as received, still in the socket's buffer.)
                let opened = link
                    .pending
                    .iter_mut()
                    .enumerate()
                    .rev()
                    .find_map(|(i, p)| {
                        buf.copy_from_slice(body);
                        p.session.open(now, &mut buf).ok().map(|r| (i, r))
                    });
                let Some((i, range)) = opened else {
                    self.stats.dropped_auth += 1;
                    link.stats.dropped_auth += 1;
                    return false;
                };
                // The newest completed handshake wins: it becomes the link's session, the
                // older ones go (the initiator finishes one handshake per dial, so they
                // cannot complete any more). Newer ones stay: they may still complete (the
                // peer restarted again). Only the initiator, who holds the ephemeral
                // secrets, can make a DATA authenticate, so a replayed HELLO never gets here.
                link.pending.drain(..i);
                let Some(promoted) = link.pending.pop_front() else {
                    return false;
                };
                if link.confirmed && promoted.peer != link.peer {
                    self.events.push_back(UdpEvent::Replaced {
                        old: link.peer,
                        peer: promoted.peer,
                        addr: from,
                    });
                }
                link.peer = promoted.peer;
                link.session = promoted.session;
                link.handshake_sent = promoted.welcome_sent;
                if link.confirmed {
                    // A new handshake replaces a live session: the peer's control channel
                    // starts afresh (as the initiator's side does), and so must ours.
                    link.control = ControlState::default();
                    link.stats.rtt = Some(now.saturating_duration_since(promoted.welcome_sent));
                }
                range
            }
        };
        let peer = link.peer;
        link.last_heard = now;
        if !link.confirmed {
            link.confirmed = true;
            link.stats.rtt = Some(now.saturating_duration_since(link.handshake_sent));
            self.stats.handshakes_ok += 1;
            // A dial of ours to the same peer, begun after its HELLO arrived, is served by
            // this link: ending it keeps a later WELCOME from replacing the session.
            if self.dials.get(&from).is_some_and(|d| d.peer == peer) {
                self.dials.remove(&from);
            }
            tracing::debug!(peer = %Redacted(peer), "udp link up (accepted)");
            self.events
                .push_back(UdpEvent::Connected { peer, addr: from });
        }
        // kind ‖ len ‖ body ‖ padding
        let declared = match buf.get(range.start..range.start + PAYLOAD_HEADER) {
            Some(&[_, a, b]) => usize::from(u16::from_be_bytes([a, b])),
            _ => usize::MAX,
        };
        if declared > range.len().saturating_sub(PAYLOAD_HEADER) {
            self.stats.dropped_malformed += 1;
            return true;
        }
        let kind = buf[range.start];
        let body = range.start + PAYLOAD_HEADER..range.start + PAYLOAD_HEADER + declared;
        match kind {
            KIND_CONFIRM => {} // its authentication is all it says
            KIND_CELL => {
                self.stats.cells_in += 1;
                link.stats.cells_in += 1;
                link.stats.bytes_in += body.len() as u64;
                self.events.push_back(UdpEvent::Cell {
                    peer,
                    data: buf.freeze().slice(body),
                });
            }
            KIND_CONTROL if body.len() >= 4 => {
                let seq = u32::from_be_bytes([
                    buf[body.start],
                    buf[body.start + 1],
                    buf[body.start + 2],
                    buf[body.start + 3],
                ]);
                let c = &mut link.control;
                match c.receive(seq, &buf[body.start + 4..body.end]) {
                    Ok(messages) => {
                        for data in messages {
                            self.events.push_back(UdpEvent::Control { peer, data });
                        }
                    }
                    // The peer framed its stream wrongly; its messages are lost.
                    Err(_) => self.stats.dropped_malformed += 1,
                }
                let ack = c.expected().to_be_bytes();
                let _ = self.send_data(from, KIND_CONTROL_ACK, &[&ack], now);
            }
            KIND_CONTROL_ACK if body.len() == 4 => {
                let next = u32::from_be_bytes([
                    buf[body.start],
                    buf[body.start + 1],
                    buf[body.start + 2],
                    buf[body.start + 3],
                ]);
                // Everything before `next` arrived.
                link.control.acked(next);
            }
            KIND_CLOSE if body.is_empty() => self.closed_by_peer(from, now),
            _ => self.stats.dropped_malformed += 1,
        }
        true
    }
}
