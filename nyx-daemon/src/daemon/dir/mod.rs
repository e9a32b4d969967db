//! The directory protocol as a daemon runs it, over directory streams (nyx-node's
//! one-hop circuits to a relay itself; requests are nyx-overlay's `directory::request`):
//!
//! * [`serve`]: answering the directory streams others open to this node: as a directory
//!   cache (the consensus this daemon holds, with its descriptors) or, for an authority,
//!   everything its [`Authority`](nyx_overlay::directory::authority::Authority) answers;
//! * [`authority`]: an authority's own work: reachability tests, votes, signatures;
//! * [`fetch`]: what every daemon that pins authorities does: upload its descriptor to them,
//!   and fetch the consensus at start and when it is due, from relays or authorities.

pub mod authority;
pub mod fetch;
pub mod serve;

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::Error;
use nyx_node::{DirectoryPeer, NodeHandle};
use nyx_overlay::directory::request::{
    DirRequest, DirResponse, MAX_RESPONSE_LEN, RequestError, frame_len,
};

/// How long one directory request may take, from building its circuit to the last byte of
/// the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Ask `peer` one request over a directory stream of its own.
pub async fn request(
    node: &NodeHandle,
    peer: DirectoryPeer,
    request: &DirRequest,
) -> Result<DirResponse, Error> {
    let to = nyx_core::redact::Redacted(peer.node_id()).to_string();
    let failed = |reason: String| Error::DirectoryRequest {
        to: to.clone(),
        reason,
    };
    let exchange = async {
        let mut stream = node.directory_stream(peer).await?;
        stream
            .write_all(&request.encode())
            .await
            .map_err(|e| failed(format!("sending: {e}")))?;
        stream
            .shutdown()
            .await
            .map_err(|e| failed(format!("sending: {e}")))?;
        let frame = read_frame(&mut stream, MAX_RESPONSE_LEN)
            .await
            .map_err(|e| failed(format!("reading the answer: {e}")))?;
        DirResponse::decode(&frame).map_err(|e| failed(format!("the answer: {e}")))
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(result) => result,
        Err(_) => Err(failed(format!("no answer within {REQUEST_TIMEOUT:?}"))),
    }
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream failed or ended inside the frame.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The length is out of bounds.
    #[error("{0}")]
    Frame(#[from] RequestError),
}

/// Read one frame (length prefix, then at most `max` bytes) and return what follows the
/// prefix; an oversize length is refused before anything else is read, and memory grows
/// with the bytes that arrive, not with the length announced.
pub async fn read_frame<R: AsyncRead + Unpin>(
    stream: &mut R,
    max: usize,
) -> Result<Vec<u8>, FrameError> {
    let len = read_frame_len(stream, max).await?;
    read_frame_body(stream, len).await
}

/// Read a frame's length prefix; a length of 0 or above `max` is refused.
pub async fn read_frame_len<R: AsyncRead + Unpin>(
    stream: &mut R,
    max: usize,
) -> Result<usize, FrameError> {
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await?;
    Ok(frame_len(prefix, max)?)
}

/// Read the `len` bytes after a frame's prefix, memory growing with what arrives.
pub async fn read_frame_body<R: AsyncRead + Unpin>(
    stream: &mut R,
    len: usize,
) -> Result<Vec<u8>, FrameError> {
    let mut frame = Vec::with_capacity(len.min(64 * 1024));
    (&mut *stream)
        .take(len as u64)
        .read_to_end(&mut frame)
        .await?;
    if frame.len() < len {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    Ok(frame)
}
