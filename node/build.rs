//! napi-build: the linker flags a Node.js addon needs (its N-API symbols are Node's own).

fn main() {
    napi_build::setup();
}
