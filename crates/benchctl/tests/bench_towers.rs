//! `benchctl bench --part image|text` builds the towers an architecture declares
//! (`BenchTowers`) from any config: CLIP's (and MetaCLIP 2's), SigLIP's (SigLIP 2's fixed
//! resolution) with its texts at their trained length, PE-Core's from its open_clip config;
//! other architectures are refused.

mod common;

use common::{benchctl, stderr};

fn bench(config: &str, extra: &[&str]) -> std::process::Output {
    bench_file(&benchctl_testkit::fixture_model(config).join("config.json"), extra)
}

fn bench_file(config: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args =
        vec!["bench", "--part", "both", "--config", config.to_str().unwrap(), "--batch", "2", "--iters", "1"];
    args.extend_from_slice(extra);
    args.push("--json");
    benchctl(&args, &[])
}

fn parts(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "{}", stderr(out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json["parts"].as_array().unwrap().clone()
}

#[test]
fn siglip_texts_are_benchmarked_at_their_trained_length() {
    let siglip = parts(&bench("siglip2-tiny", &["--text-tokens", "8"]));
    let names: Vec<&str> = siglip.iter().map(|p| p["part"].as_str().unwrap()).collect();
    assert_eq!(names, ["image", "text"]);
    assert_eq!(siglip[1]["text_tokens"], 64.0, "SigLIP pads every text to 64");
    assert!(siglip.iter().all(|p| p["per_second"].as_f64().unwrap() > 0.0));

    let metaclip = parts(&bench("metaclip2-tiny", &["--text-tokens", "8"]));
    assert_eq!(metaclip[1]["text_tokens"], 8.0, "CLIP's towers take the length asked for");

    // PE-Core's towers from its open_clip config (the timm tower at its published shape),
    // its texts at most its 32 tokens.
    let config = benchctl_testkit::fixture_model("pe-core-tiny").join("open_clip_config.json");
    let pe = parts(&bench_file(&config, &["--text-tokens", "40"]));
    assert_eq!(pe[1]["text_tokens"], 32.0, "PE-Core's context is 32 tokens");
    assert!(pe.iter().all(|p| p["per_second"].as_f64().unwrap() > 0.0));
}

#[test]
fn towers_an_architecture_does_not_declare_are_refused() {
    let out = bench("qwen3vl-tiny", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("qwen3_vl model's towers are not benchmarked"), "{}", stderr(&out));
}
