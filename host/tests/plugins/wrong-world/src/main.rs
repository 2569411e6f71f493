//! A WASI command: a valid component of the wrong world.

fn main() {
    println!("I am not a wasmop plugin");
}
