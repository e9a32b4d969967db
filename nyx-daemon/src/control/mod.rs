//! The local control API: gRPC (tonic) over a Unix domain socket that only the daemon's own
//! user can use. One service, `nyx.control.v1.Control` (proto in `nyx-daemon/proto/`),
//! plus the standard gRPC health (`grpc.health.v1.Health`) and reflection (v1 and v1alpha)
//! services, so `grpcurl -plaintext -unix <socket> list` works. Health says NOT_SERVING
//! (for `""` and for the control service) until the node can build circuits (GetInfo's
//! `ready`), then SERVING, and NOT_SERVING again if it no longer can. docs/control-api.md
//! describes every call.
//!
//! [`serve`] runs the server for a [`DaemonState`]; [`connect`] gives a client (the `nyx`
//! CLI and tests use it).

mod service;
mod uds;

use std::future::Future;
use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

pub use service::{ControlService, status};
pub use uds::{ControlListener, check_peer, connect};

use crate::Error;
use crate::daemon::DaemonState;

/// Generated protobuf messages, client and server of `nyx.control.v1`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("nyx.control.v1");
}

/// The encoded descriptors of `nyx.control.v1` (served by reflection).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/control_descriptor.bin"));

/// The fully qualified name of the control service.
pub const SERVICE_NAME: &str = "nyx.control.v1.Control";

/// Serve the control API on `listener` until `shutdown` resolves; in-flight calls are
/// given a moment to finish.
pub async fn serve(
    mut listener: ControlListener,
    state: Arc<DaemonState>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let fail = |reason: String| Error::Control {
        path: listener.path().to_owned(),
        reason,
    };
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| fail(format!("reflection: {e}")))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| fail(format!("reflection: {e}")))?;
    let (health_reporter, health) = tonic_health::server::health_reporter();
    // Subscribed before the first look, so that no change is missed in between; the first
    // status is in place before the server answers.
    let events = state.node.subscribe();
    let reported = report_readiness(&health_reporter, &state, None).await;
    let readiness = tokio::spawn(follow_readiness(
        health_reporter,
        state.clone(),
        events,
        reported,
    ));
    let control = pb::control_server::ControlServer::new(ControlService::new(state))
        .max_decoding_message_size(16 << 20);
    let incoming = listener.incoming()?;
    let result = tonic::transport::Server::builder()
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(control)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    readiness.abort();
    let path = listener.path().to_owned();
    drop(listener); // removes the socket file
    result.map_err(|e| Error::Control {
        path,
        reason: e.to_string(),
    })
}

/// Set the health status of the server (`""`) and of the control service from
/// [`DaemonState::ready_for_circuits`] when it differs from `reported`; the status now.
async fn report_readiness(
    reporter: &HealthReporter,
    state: &DaemonState,
    reported: Option<ServingStatus>,
) -> Option<ServingStatus> {
    let status = match state.ready_for_circuits() {
        true => ServingStatus::Serving,
        false => ServingStatus::NotServing,
    };
    if reported != Some(status) {
        for service in ["", SERVICE_NAME] {
            reporter.set_service_status(service, status).await;
        }
    }
    Some(status)
}

/// [`report_readiness`] after every directory change, until the node stops.
async fn follow_readiness(
    reporter: HealthReporter,
    state: Arc<DaemonState>,
    mut events: tokio::sync::broadcast::Receiver<nyx_node::NodeEvent>,
    mut reported: Option<ServingStatus>,
) {
    loop {
        match events.recv().await {
            Ok(nyx_node::NodeEvent::DirectoryChanged { .. }) | Err(RecvError::Lagged(_)) => {
                reported = report_readiness(&reporter, &state, reported).await;
            }
            Ok(_) => {}
            Err(RecvError::Closed) => return,
        }
    }
}
