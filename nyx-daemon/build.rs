//! Compiles the control API's protobuf definitions with protox (a pure-Rust protobuf
//! compiler: no system `protoc` needed) and generates the tonic client and server. The
//! encoded descriptor set is kept for the gRPC reflection service.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/nyx/control/v1/control.proto";
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile([proto], ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("control_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // The CLI prints responses as JSON (`nyx --json ...`).
        .type_attribute(".nyx.control.v1", "#[derive(serde::Serialize)]")
        .compile_fds(descriptors)?;
    Ok(())
}
