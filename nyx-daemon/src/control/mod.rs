//! The local control API: gRPC (tonic) over a Unix domain socket that only the daemon's own
//! user can use. One service, `nyx.control.v1.Control` (proto in `nyx-daemon/proto/`),
//! plus the standard gRPC health (`grpc.health.v1.Health`) and reflection (v1 and v1alpha)
//! services, so `grpcurl -plaintext -unix <socket> list` works. docs/control-api.md
//! describes every call.
//!
//! [`serve`] runs the server for a [`DaemonState`]; [`connect`] gives a client (the `nyx`
//! CLI and tests use it).

mod service;
mod uds;

use std::future::Future;
use std::sync::Arc;

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
    health_reporter
        .set_serving::<pb::control_server::ControlServer<ControlService>>()
        .await;
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
    let path = listener.path().to_owned();
    drop(listener); // removes the socket file
    result.map_err(|e| Error::Control {
        path,
        reason: e.to_string(),
    })
}
