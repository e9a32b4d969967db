//! Answering the directory streams other nodes open to this daemon: one request, one
//! response, each stream in a task of its own. A directory authority answers everything
//! through its [`Authority`](nyx_overlay::directory::authority::Authority); any other daemon
//! is a directory cache: it serves the consensus it holds and refuses the rest.
//!
//! What a stranger can hold: at most [`MAX_CONCURRENT`] streams are answered at once (more
//! are reset), each for at most [`EXCHANGE_TIMEOUT`] from the first byte read to the last
//! byte written; request bytes held at once are at most [`REQUEST_BUDGET`] (a request that
//! does not fit is reset before it is read); a cache reads requests of at most
//! [`MAX_CACHE_REQUEST`] bytes (a GetConsensus is 9). nyx-node lets one circuit open at
//! most a few directory streams, so holding many needs many circuits, which the per-peer
//! CREATE limit paces.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};

use super::authority::AuthorityHandle;
use crate::daemon::DaemonState;
use nyx_node::{NyxStream, ResetReason};
use nyx_overlay::directory::request::{DirRequest, DirResponse, MAX_REQUEST_LEN, frame_len};

/// Directory streams answered at once, at most; more are reset.
pub const MAX_CONCURRENT: usize = 128;
/// How long one exchange may take, from reading the request to writing the last byte of the
/// answer.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Request bytes held at once over all streams (a vote of 65 536 relays is 4.5 MB).
pub const REQUEST_BUDGET: usize = 32 << 20;
/// Longest request a directory cache reads (it only answers GetConsensus).
pub const MAX_CACHE_REQUEST: usize = 64;

/// Answer the directory streams of `streams` until the node stops.
pub fn spawn(
    mut streams: mpsc::Receiver<NyxStream>,
    state: Arc<DaemonState>,
    authority: Option<Arc<AuthorityHandle>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(MAX_CONCURRENT));
        let budget = Arc::new(Semaphore::new(REQUEST_BUDGET));
        loop {
            let stream = tokio::select! {
                () = state.shutdown_requested() => return,
                stream = streams.recv() => match stream {
                    Some(stream) => stream,
                    None => return,
                },
            };
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                stream.reset(ResetReason::ResourceLimit);
                continue;
            };
            let (state, authority, budget) = (state.clone(), authority.clone(), budget.clone());
            tokio::spawn(async move {
                // On timeout the stream is dropped, which resets it if its request was not
                // read to the end; a short answer fails the client's length check.
                let exchange = serve_one(stream, &state, authority.as_deref(), &budget);
                let _ = tokio::time::timeout(EXCHANGE_TIMEOUT, exchange).await;
                drop(permit);
            });
        }
    })
}

async fn serve_one(
    mut stream: NyxStream,
    state: &DaemonState,
    authority: Option<&AuthorityHandle>,
    budget: &Semaphore,
) {
    let max = match authority {
        Some(_) => MAX_REQUEST_LEN,
        None => MAX_CACHE_REQUEST,
    };
    let mut prefix = [0u8; 4];
    if stream.read_exact(&mut prefix).await.is_err() {
        return stream.reset(ResetReason::Protocol);
    }
    let len = match frame_len(prefix, max) {
        Ok(len) => len,
        Err(e) => {
            tracing::debug!(error = %e, "directory request refused");
            return stream.reset(ResetReason::Protocol);
        }
    };
    // A length within the limits passes u32 (the prefix is one).
    let Ok(_held) = budget.try_acquire_many(u32::try_from(len).unwrap_or(u32::MAX)) else {
        return stream.reset(ResetReason::ResourceLimit);
    };
    let mut frame = Vec::with_capacity(len.min(64 * 1024));
    let read = (&mut stream).take(len as u64).read_to_end(&mut frame).await;
    if read.is_err() || frame.len() < len {
        return stream.reset(ResetReason::Protocol);
    }
    let response = match DirRequest::decode(&frame) {
        Ok(request) => answer(request, state, authority),
        Err(e) => DirResponse::refused(format!("malformed request: {e}")),
    };
    if stream.write_all(&response.encode()).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}

/// The answer to `request`: the authority's, or this cache's.
pub fn answer(
    request: DirRequest,
    state: &DaemonState,
    authority: Option<&AuthorityHandle>,
) -> DirResponse {
    if let Some(authority) = authority {
        return authority.respond(request);
    }
    match request {
        DirRequest::GetConsensus { newer_than } => {
            match (state.bundle(), state.consensus_valid_after()) {
                (Some(bundle), Some(valid_after)) if valid_after > newer_than => {
                    DirResponse::Consensus {
                        consensus: bundle.consensus.clone(),
                        descriptors: bundle.descriptors.clone(),
                    }
                }
                (Some(_), Some(_)) => DirResponse::NotModified,
                _ => DirResponse::NotFound,
            }
        }
        _ => DirResponse::refused("not a directory authority"),
    }
}
