//! Compiles the client of `proto/atomflake/v1/ids.proto` (`atomflake serve`'s gRPC API) with
//! protox, for the `serve` bench: building needs no protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../proto/atomflake/v1/ids.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["../proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
