//! The SOCKS side of a client's connection, from its first byte to a request: version 4
//! (SOCKS4 and SOCKS4a: a request alone) or anything else (SOCKS5: greeting, method
//! selection, optional username/password, request; a version byte other than 5 is refused
//! there). Protocol errors are answered the way the phase allows, success is not: the
//! entry server answers once the stream is open.

use std::convert::Infallible;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::proto::{self, Method, Parsed, Reply, SocksError};
use super::{isolation_group, proto4, socks4_isolation_group};
use crate::entry::{Accepted, Answer, HandshakeError, read_message};

/// Read a SOCKS4, SOCKS4a or SOCKS5 request, told apart by the first byte.
pub(crate) async fn handshake<S>(conn: &mut S) -> Result<Accepted, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(512);
    let first = |b: &[u8]| Ok::<_, Infallible>(b.first().map(|&v| (v, 0)));
    match read_message(conn, &mut buf, first).await? {
        Ok(proto4::VERSION) => socks4(conn, buf).await,
        _ => socks5(conn, buf).await,
    }
}

fn refused(error: SocksError, replied: Option<Reply>) -> HandshakeError {
    HandshakeError::Protocol {
        reason: error.to_string(),
        replied,
    }
}

/// SOCKS4 and 4a: the request, then (on error) reply 91 and close.
async fn socks4<S>(conn: &mut S, mut buf: Vec<u8>) -> Result<Accepted, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let request = read_request(conn, &mut buf, proto4::parse_request, Answer::Socks4).await?;
    Ok(Accepted {
        target: request.target,
        group: socks4_isolation_group(&request.userid),
        early: buf,
        answer: Answer::Socks4,
    })
}

/// SOCKS5: greeting, method selection, optional username/password, request. Answers
/// protocol errors the way the phase allows (method 0xFF, auth status 1, or a reply).
async fn socks5<S>(conn: &mut S, mut buf: Vec<u8>) -> Result<Accepted, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let greeting = read_message(conn, &mut buf, proto::parse_greeting)
        .await?
        .map_err(|e| refused(e, None))?;
    let method = proto::choose_method(&greeting);
    send(conn, &proto::encode_method(method)).await?;
    let credentials = match method {
        None => return Err(refused(SocksError::NoAcceptableMethod, None)),
        Some(Method::NoAuth) => None,
        Some(Method::UserPassword) => {
            match read_message(conn, &mut buf, proto::parse_auth).await? {
                Ok(creds) => Some(creds),
                Err(e) => {
                    let _ = conn.write_all(&proto::encode_auth_status(false)).await;
                    return Err(refused(e, None));
                }
            }
        }
    };
    if credentials.is_some() {
        send(conn, &proto::encode_auth_status(true)).await?;
    }
    let request = read_request(conn, &mut buf, proto::parse_request, Answer::Socks5).await?;
    Ok(Accepted {
        target: request.target,
        group: isolation_group(credentials.as_ref()),
        early: buf,
        answer: Answer::Socks5,
    })
}

/// Read a request with `parse`; if it is refused, tell the client why in `answer`'s
/// protocol and close.
async fn read_request<S, T>(
    conn: &mut S,
    buf: &mut Vec<u8>,
    parse: fn(&[u8]) -> Parsed<T>,
    answer: Answer,
) -> Result<T, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match read_message(conn, buf, parse).await? {
        Ok(request) => Ok(request),
        Err(error) => {
            let reply = error.reply();
            let _ = conn.write_all(&answer.encode(reply)).await;
            let _ = conn.shutdown().await;
            Err(refused(error, Some(reply)))
        }
    }
}

async fn send<S: AsyncWrite + Unpin>(conn: &mut S, bytes: &[u8]) -> Result<(), HandshakeError> {
    conn.write_all(bytes)
        .await
        .map_err(|_| HandshakeError::Gone)?;
    conn.flush().await.map_err(|_| HandshakeError::Gone)
}
