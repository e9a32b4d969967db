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

use tokio::io::AsyncWriteExt;
use tokio::sync::{Semaphore, mpsc};

use super::authority::AuthorityHandle;
use super::{read_frame_body, read_frame_len};
use crate::daemon::{Bundle, DaemonState};
use nyx_node::{NyxStream, ResetReason};
use nyx_overlay::directory::request::{DirRequest, DirResponse, MAX_REQUEST_LEN};

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
    let len = match read_frame_len(&mut stream, max).await {
        Ok(len) => len,
        Err(e) => {
            tracing::debug!(error = %e, "directory request refused");
            return stream.reset(ResetReason::Protocol);
        }
    };
    // A length within the limits fits u32 (the prefix is one).
    let Ok(_held) = budget.try_acquire_many(u32::try_from(len).unwrap_or(u32::MAX)) else {
        return stream.reset(ResetReason::ResourceLimit);
    };
    let Ok(frame) = read_frame_body(&mut stream, len).await else {
        return stream.reset(ResetReason::Protocol);
    };
    let answer = match DirRequest::decode(&frame) {
        Ok(request) => answer(request, state, authority),
        Err(e) => Answer::Fresh(DirResponse::refused(format!("malformed request: {e}")).encode()),
    };
    if stream.write_all(answer.frame()).await.is_ok() {
        let _ = stream.shutdown().await;
    }
}

/// An encoded answer: made for this request, or the consensus bundle a cache holds (encoded
/// once when it was taken up, not copied per request).
enum Answer {
    /// Encoded for this request.
    Fresh(Vec<u8>),
    /// The cache's GetConsensus answer.
    Held(Arc<Bundle>),
}

impl Answer {
    /// The frame to write.
    fn frame(&self) -> &[u8] {
        match self {
            Answer::Fresh(frame) => frame,
            Answer::Held(bundle) => &bundle.response,
        }
    }
}

/// The answer to `request`: the authority's, or this cache's.
fn answer(request: DirRequest, state: &DaemonState, authority: Option<&AuthorityHandle>) -> Answer {
    if let Some(authority) = authority {
        return Answer::Fresh(authority.respond(request).encode());
    }
    let response = match request {
        DirRequest::GetConsensus { newer_than } => match state.bundle() {
            Some(bundle) if bundle.period.valid_after > newer_than => {
                return Answer::Held(bundle);
            }
            Some(_) => DirResponse::NotModified,
            None => DirResponse::NotFound,
        },
        _ => DirResponse::refused("not a directory authority"),
    };
    Answer::Fresh(response.encode())
}
