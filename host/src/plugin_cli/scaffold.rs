//! `plugin new`: a plugin crate from the `hello` template.

use std::path::PathBuf;

use anyhow::{Context, bail};

/// The SDK version a new plugin depends on: the one released with this host.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The template `plugin new` copies, with `hello`/`Hello` renamed.
const TEMPLATE_LIB: &str = include_str!("../../../plugins/hello/src/lib.rs");

/// `my-plugin` -> `MyPlugin`.
fn type_name(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

pub(super) fn scaffold(
    name: &str,
    dir: Option<PathBuf>,
    sdk: Option<PathBuf>,
) -> anyhow::Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        bail!(
            "plugin name {name:?} must be lower-case letters, digits and '-', starting with a letter"
        );
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    // The crate depends on the SDK by version, as a published plugin does. Next to a checkout
    // of wasmop (the SDK this binary was built from, or --sdk) a `[patch.crates-io]` points
    // that version at the checkout, so the plugin builds against the SDK beside it.
    let sdk = match sdk {
        Some(path) => Some(
            path.canonicalize()
                .with_context(|| format!("the SDK at {} (--sdk)", path.display()))?,
        ),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk"))
            .canonicalize()
            .ok(),
    };
    let patch = match &sdk {
        // `{:?}` quotes and escapes the path as a TOML basic string does.
        Some(path) => format!(
            "\n# The SDK of the wasmop checkout this was generated from; delete to use crates.io.\n\
             [patch.crates-io]\nwasmop-sdk = {{ path = {:?} }}\n",
            path.display().to_string()
        ),
        None => String::new(),
    };
    std::fs::create_dir_all(dir.join("src"))
        .with_context(|| format!("creating {}", dir.display()))?;
    let ty = type_name(name);
    let lib = TEMPLATE_LIB
        .replace("Hello", &ty)
        .replace("\"hello\"", &format!("\"{name}\""))
        .replace("`hello`", &format!("`{name}`"))
        .replace("wasmop/hello:", &format!("wasmop/{name}:"))
        .replace("a hello App", &format!("a {name} App"));
    let cargo = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
# A wasm32-wasip2 component; `cargo test` runs the logic natively.
crate-type = ["cdylib"]

[dependencies]
serde = {{ version = "1", features = ["derive"] }}
wasmop-sdk = "{sdk_version}"

[dev-dependencies]
serde_json = "1"

# Small, for a ConfigMap's 1 MiB; one codegen unit and whole-program LTO let the SDK, serde_json
# and k8s-openapi inline into the plugin, which makes calls faster (kvstore: 12-18%).
[profile.release]
opt-level = "s"
strip = true
lto = true
codegen-units = 1

# Optimised dependencies keep native test runs quick.
[profile.dev.package."*"]
opt-level = 1

# A plugin is its own workspace.
[workspace]
{patch}"#,
        sdk_version = SDK_VERSION,
        patch = patch
    );
    std::fs::write(dir.join("Cargo.toml"), cargo)?;
    std::fs::write(dir.join("src/lib.rs"), lib)?;
    std::fs::write(dir.join(".gitignore"), "/target\n")?;
    println!("created plugin {name} in {}", dir.display());
    println!("  cargo test --manifest-path {}/Cargo.toml", dir.display());
    println!("  wasmop plugin build {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_are_camel_case() {
        assert_eq!(type_name("my-cache"), "MyCache");
        assert_eq!(type_name("kv"), "Kv");
    }

    #[test]
    fn bad_plugin_names_are_refused() {
        let err = scaffold("My Plugin", Some(std::env::temp_dir().join("never")), None)
            .expect_err("invalid");
        assert!(err.to_string().contains("lower-case"), "{err}");
    }
}
