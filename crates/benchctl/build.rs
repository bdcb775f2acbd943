//! Records the git commit benchctl is built from, for run records.

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=BENCHCTL_GIT_COMMIT={commit}");
    // Rebuilt when HEAD moves (a commit or checkout: both append to logs/HEAD), not on every edit.
    for path in ["../../.git/HEAD", "../../.git/logs/HEAD"] {
        println!("cargo:rerun-if-changed={path}");
    }
}
