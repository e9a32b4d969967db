//! End-to-end benchmarks for NyxNet live in `benches/`; this library only holds helpers they
//! share. Run them with `cargo bench -p nyx-benches`; figures and baselines are recorded in
//! docs/benchmarks.md.

use std::io;
use std::net::UdpSocket;
use std::time::Duration;

/// A connected pair of UDP sockets on 127.0.0.1 (never any other address).
pub fn loopback_pair() -> io::Result<(UdpSocket, UdpSocket)> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.1:0")?;
    a.connect(b.local_addr()?)?;
    b.connect(a.local_addr()?)?;
    // A lost datagram must fail the bench rather than hang it.
    a.set_read_timeout(Some(Duration::from_secs(1)))?;
    b.set_read_timeout(Some(Duration::from_secs(1)))?;
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_pair_carries_a_datagram() {
        let (a, b) = super::loopback_pair().unwrap();
        a.send(b"ping").unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(b.recv(&mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"ping");
    }
}
