//! Generates the protobuf types and gRPC stubs from our own `.proto` files
//! with a pure-Rust compiler (protox), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/resourceplugin.proto",
        "proto/pluginregistration.proto",
        "proto/podresources_v1.proto",
        "proto/podresources_v1alpha1.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Unimplemented answers for RPCs a server does not provide (plugins
        // implement only what their resource needs).
        .generate_default_stubs(true)
        // Maps as `BTreeMap`: the plugins read labels and annotations
        // sorted, and nothing on either side hashes them.
        .btree_map(".")
        .compile_fds(descriptors)?;
    Ok(())
}
