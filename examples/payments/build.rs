//! Release builds of the `consumer` and `payments` binaries put the functions a warm batch runs
//! together, at the front of the code (`hot-text.ld`, written by `scripts/hot-text.py`): the
//! kernel maps a binary's code 64 KiB around every page a process touches, and those functions,
//! about 2 MB, are spread over 12 MB of code otherwise; together, a warm `consumer` has 4.8 MiB
//! fewer resident pages (docs/performance.md, "Where a warm process's memory goes").
//!
//! The script is a linker script that only adds one output section before `.text` (`INSERT
//! BEFORE .text`); functions it does not name stay where they were. It is passed where it was
//! tested, on Linux GNU targets, by the two linkers that link what we ship:
//! - rustc's default linker (`rust-lld` on `x86_64-unknown-linux-gnu`), that is, no linker
//!   configured for the target and none in the flags: `cargo build --release`;
//! - cargo-lambda's `zig cc` (cargo-zigbuild's `zigcc-...` wrapper, which hands `-T` to zig's
//!   `ld.lld`), on `x86_64` and `aarch64`: `cargo lambda build --release` and `sam build`, the
//!   artifact a team deploys (issue 39).
//!
//! Any other linker (a cross `cc`, a `linker` or `-fuse-ld` in the flags) gets nothing.
//! `PAYMENTS_HOT_TEXT=1` passes it whatever the linker (GNU ld also reads `INSERT`),
//! `PAYMENTS_HOT_TEXT=0` never.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=hot-text.ld");
    println!("cargo:rerun-if-env-changed=PAYMENTS_HOT_TEXT");
    let wanted = match env::var("PAYMENTS_HOT_TEXT").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => default_linker_on_linux(),
    };
    if !wanted || env::var("PROFILE").as_deref() != Ok("release") {
        return;
    }
    let script = format!(
        "{}/hot-text.ld",
        env::var("CARGO_MANIFEST_DIR").unwrap_or_default()
    );
    println!("cargo:rustc-link-arg-bin=consumer=-Wl,-T,{script}");
    // `payments` is built only with the feature `cli`.
    if env::var_os("CARGO_FEATURE_CLI").is_some() {
        println!("cargo:rustc-link-arg-bin=payments=-Wl,-T,{script}");
    }
}

/// Linux GNU on x86_64 linked by rustc's own `rust-lld` (no linker chosen by the configuration
/// or the flags), or on x86_64 or aarch64 linked by cargo-lambda's zig.
fn default_linker_on_linux() -> bool {
    let target = env::var("TARGET").unwrap_or_default();
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if ["linker", "fuse-ld", "link-self-contained"]
        .iter()
        .any(|f| flags.contains(f))
    {
        return false;
    }
    match env::var_os("RUSTC_LINKER") {
        None => target == "x86_64-unknown-linux-gnu",
        Some(linker) => {
            zig_linker(std::path::Path::new(&linker))
                && matches!(
                    target.as_str(),
                    "x86_64-unknown-linux-gnu" | "aarch64-unknown-linux-gnu"
                )
        }
    }
}

/// cargo-zigbuild's linker wrapper (cargo-lambda builds through it): `zigcc-<target>-<hash>`.
fn zig_linker(linker: &std::path::Path) -> bool {
    linker
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with("zigcc-"))
}
