//! Builds `specs/*.toml` into the binary (`kvmc::check::specs::EMBEDDED`), so an installed
//! kvmc gives the same verdicts and explanations from any directory; `--specs DIR` reads
//! another set instead (docs/guide.md, "Where specs and models come from").

use std::path::Path;

fn main() {
    let root = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&root).join("specs");
    println!("cargo:rerun-if-changed=specs");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("specs/ is readable")
        .filter_map(|e| e.ok().and_then(|e| e.file_name().into_string().ok()))
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    let mut out = String::from("/// `specs/*.toml` at build time: (file name, text), sorted by name.\n");
    out.push_str("pub const EMBEDDED: &[(&str, &str)] = &[\n");
    for n in &names {
        out.push_str(&format!("    ({n:?}, include_str!({:?})),\n", dir.join(n).display().to_string()));
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("embedded_specs.rs");
    std::fs::write(dest, out).expect("OUT_DIR is writable");
}
