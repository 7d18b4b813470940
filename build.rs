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
    let out_dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let dest = Path::new(&out_dir).join("embedded_specs.rs");
    std::fs::write(dest, out).expect("OUT_DIR is writable");
    embed_models(Path::new(&root), Path::new(&out_dir));
}

/// `models/**/*.toml` into `kvmc::check::builtin_models::EMBEDDED` (path under models/, text):
/// the gate run outside a checkout checks these (docs/guide.md).
fn embed_models(root: &Path, out_dir: &Path) {
    println!("cargo:rerun-if-changed=models");
    fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, std::path::PathBuf)>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            let r = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            if p.is_dir() {
                println!("cargo:rerun-if-changed={}", p.display());
                walk(&p, &r, out);
            } else if name.ends_with(".toml") {
                out.push((r, p));
            }
        }
    }
    let mut files = Vec::new();
    walk(&root.join("models"), "", &mut files);
    files.sort();
    let mut out = String::from("/// `models/**/*.toml` at build time: (path under models/, text), sorted.\n");
    out.push_str("pub const EMBEDDED: &[(&str, &str)] = &[\n");
    for (r, p) in &files {
        out.push_str(&format!("    ({r:?}, include_str!({:?})),\n", p.display().to_string()));
    }
    out.push_str("];\n");
    std::fs::write(out_dir.join("embedded_models.rs"), out).expect("OUT_DIR is writable");
}
