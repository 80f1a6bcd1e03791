//! Generates the CRI v1 client from our own `proto/cri.proto` with a
//! pure-Rust protobuf compiler (protox), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = "proto/cri.proto";
    println!("cargo:rerun-if-changed={file}");
    let descriptors = protox::compile([file], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}
