//! The module layers of kiln-cuda (lib.rs lists them): every `crate::module` a source file
//! names must sit in its own layer or below, so the runtime floor never reaches up into kernel
//! families and the families never reach into what the core drives (prebuild, graphs).

use std::collections::BTreeSet;
use std::path::Path;

/// Layers from the floor up; a module may use its own layer and every layer before it.
const LAYERS: &[&[&str]] = &[
    &["runtime", "issuing", "batch"],
    &["alloc", "transfer", "profile", "nvrtc", "build_threads", "launch", "collapse"],
    &["copy"],
    &["elementwise"],
    &[
        "reduce",
        "rows",
        "scan",
        "sort",
        "matmul",
        "gemv",
        "qmv_mma",
        "complex",
        "fft",
        "conv",
        "indexing",
        "masked",
        "creation",
        "fast",
        "collective",
    ],
    &["prebuild", "cuda_graph", "ready", "together", "backend"],
];

/// The layer of a module (its first path segment under src/); `None` for the crate root.
fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The modules a source names as `crate::name` or inside `crate::{a, b::c}`.
fn uses(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = source;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group only: `launch::{a, b}` names `launch`.
            let (mut depth, mut start) = (0, 0);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.insert(ident(&group[start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(&group[start..i]));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.retain(|n| !n.is_empty() && n.chars().next().is_some_and(|c| c.is_lowercase()));
    out
}

/// The identifier a path starts with.
fn ident(path: &str) -> String {
    path.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn modules_use_only_their_layer_and_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut violations = Vec::new();
    let mut checked = 0;
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let module = rel.iter().next().expect("a file").to_string_lossy().replace(".rs", "");
        if module == "lib" {
            continue;
        }
        let own = layer(&module).unwrap_or_else(|| panic!("{module}: add it to a layer"));
        let text = std::fs::read_to_string(file).expect("readable");
        for used in uses(&text) {
            // Crate-root items (`crate::is_available`) are the runtime's re-exports.
            let Some(theirs) = layer(&used) else { continue };
            checked += 1;
            if theirs > own {
                violations.push(format!(
                    "{} (layer {}) uses {used} (layer {})",
                    rel.display(),
                    own + 1,
                    theirs + 1
                ));
            }
        }
    }
    assert!(checked > 50, "the scan found the modules' uses ({checked})");
    assert!(violations.is_empty(), "layering violations:\n{}", violations.join("\n"));
}

#[test]
fn the_use_scanner_reads_groups_and_paths() {
    let found = uses("use crate::{copy, launch::{a, b}};\nlet x = crate::nvrtc::f(crate::Y);");
    let want: BTreeSet<String> = ["copy", "launch", "nvrtc"].map(String::from).into();
    assert_eq!(found, want);
}
