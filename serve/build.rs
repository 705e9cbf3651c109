//! Compiles `proto/atomflake/v1/ids.proto` with protox (no system `protoc`): the message
//! types and the service for tonic, and the descriptor set that reflection serves.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/atomflake/v1/ids.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("ids.bin"), prost::Message::encode_to_vec(&descriptors))?;
    tonic_prost_build::configure()
        .build_client(false)
        .compile_fds(descriptors)?;
    Ok(())
}
