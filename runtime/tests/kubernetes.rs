//! The Kubernetes manifests in deploy/kubernetes/ validate offline against
//! the Kubernetes schemas (kubernetes-validate, installed from PyPI by
//! deploy/validate.sh), agree with swan's drain settings and ports, and
//! their swan.toml is one this swan accepts.

use std::process::Command;

#[test]
fn the_kubernetes_manifests_validate() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(repo.join("deploy/validate.sh"))
        .env("SWAN_BIN", env!("CARGO_BIN_EXE_swan"))
        .output()
        .expect("run deploy/validate.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains(", 0 failed"), "{text}");
    // The schema check and swan's own check both ran.
    assert!(text.contains("Deployment"), "{text}");
    assert!(
        text.contains("`swan check` accepts ConfigMap swan.toml"),
        "{text}"
    );
}
