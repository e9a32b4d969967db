//! For the protocols' unit tests: check a parser on a message and its prefixes, and run a
//! handshake against given client bytes over an in-memory pipe.

use std::fmt::Debug;
use std::future::Future;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::{Accepted, HandshakeError};

/// Every strict prefix of `msg` is incomplete for `parse`; `msg` followed by `next` parses
/// using all of `msg` and none of `next`. The value parsed.
pub(crate) fn check_prefixes<T: Debug, E: Debug>(
    msg: &[u8],
    next: &[u8],
    parse: impl Fn(&[u8]) -> Result<Option<(T, usize)>, E>,
) -> T {
    for n in 0..msg.len() {
        let got = parse(&msg[..n]);
        assert!(matches!(got, Ok(None)), "prefix of {n} bytes: {got:?}");
    }
    let (value, used) = parse(&[msg, next].concat()).unwrap().unwrap();
    assert_eq!(used, msg.len());
    value
}

/// Write `client_bytes` and end of file to `handshake`'s side of a pipe, run it, and return
/// its outcome as text (`target group early=... answer`, or the refusal and the reason it
/// told, or `gone`) and everything it wrote.
pub(crate) async fn run_handshake<F, Fut>(
    client_bytes: &[u8],
    handshake: F,
) -> (Result<String, String>, Vec<u8>)
where
    F: FnOnce(DuplexStream) -> Fut,
    Fut: Future<Output = (Result<Accepted, HandshakeError>, DuplexStream)>,
{
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    client.write_all(client_bytes).await.unwrap();
    client.shutdown().await.unwrap();
    let (result, server) = handshake(server).await;
    let outcome = match result {
        Ok(a) => Ok(format!(
            "{} {:?} early={:?} {:?}",
            a.target,
            a.group,
            String::from_utf8_lossy(&a.early),
            a.answer
        )),
        Err(HandshakeError::Protocol { reason, replied }) => Err(format!("{reason} {replied:?}")),
        Err(HandshakeError::Gone) => Err("gone".into()),
    };
    drop(server);
    let mut written = Vec::new();
    client.read_to_end(&mut written).await.unwrap();
    (outcome, written)
}
