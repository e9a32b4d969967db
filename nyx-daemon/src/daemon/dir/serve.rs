//! Answering the directory streams other nodes open to this daemon: one request, one
//! response, each stream in a task of its own, at most [`MAX_CONCURRENT`] at once. A
//! directory authority answers everything through its
//! [`Authority`](nyx_overlay::directory::authority::Authority); any other daemon is a
//! directory cache: it serves the consensus it holds and refuses the rest.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::{Semaphore, mpsc};

use super::authority::AuthorityHandle;
use super::read_frame;
use crate::daemon::DaemonState;
use nyx_node::{NyxStream, ResetReason};
use nyx_overlay::directory::request::{DirRequest, DirResponse, MAX_REQUEST_LEN};

/// Directory streams answered at once, at most; more are reset.
pub const MAX_CONCURRENT: usize = 32;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// Answer the directory streams of `streams` until the node stops.
pub fn spawn(
    mut streams: mpsc::Receiver<NyxStream>,
    state: Arc<DaemonState>,
    authority: Option<Arc<AuthorityHandle>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(MAX_CONCURRENT));
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
            let (state, authority) = (state.clone(), authority.clone());
            tokio::spawn(async move {
                serve_one(stream, &state, authority.as_deref()).await;
                drop(permit);
            });
        }
    })
}

async fn serve_one(
    mut stream: NyxStream,
    state: &DaemonState,
    authority: Option<&AuthorityHandle>,
) {
    let frame =
        match tokio::time::timeout(READ_TIMEOUT, read_frame(&mut stream, MAX_REQUEST_LEN)).await {
            Ok(Ok(frame)) => frame,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "directory request unreadable");
                return stream.reset(ResetReason::Protocol);
            }
            Err(_) => return stream.reset(ResetReason::Timeout),
        };
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
