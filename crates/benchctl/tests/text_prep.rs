//! `--text-prep`: SigLIP 2's captions as its authors prepare them (the default) or as
//! `transformers`' processor does, through `eval` on the tiny SigLIP 2 fixture: recorded,
//! labelled, cached apart, scored differently (transformers' padding masked even where the ids
//! agree); refused for a model with one preparation.

mod common;

use benchctl_models::models::siglip::SiglipText;
use benchctl_models::registry::TextPrep;
use common::{benchctl, demo_suite, dump_path, eval_model, scratch_dir};

fn identities(root: &std::path::Path) -> Vec<serde_json::Value> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "identity.json") {
                found.push(serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap());
            }
        }
    }
    found
}

/// The demo Winoground suite with every caption capitalised and ended with " !", its images copied.
fn shouted_demo() -> tempfile::TempDir {
    let demo = demo_suite();
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(demo.join("examples.jsonl")).unwrap();
    let mut lines = Vec::new();
    for line in text.lines() {
        let mut row: serde_json::Value = serde_json::from_str(line).unwrap();
        for key in ["caption_0", "caption_1"] {
            let caption = row[key].as_str().unwrap();
            row[key] = format!("{}{} !", caption[..1].to_uppercase(), &caption[1..]).into();
        }
        lines.push(row.to_string());
    }
    std::fs::write(dir.path().join("examples.jsonl"), lines.join("\n") + "\n").unwrap();
    std::fs::create_dir(dir.path().join("images")).unwrap();
    for image in std::fs::read_dir(demo.join("images")).unwrap().flatten() {
        std::fs::copy(image.path(), dir.path().join("images").join(image.file_name())).unwrap();
    }
    dir
}

#[test]
fn each_preparation_is_recorded_cached_apart_and_scores_its_own_ids() {
    let model = benchctl_testkit::fixture_model("siglip2-tiny");
    let cache = tempfile::tempdir().unwrap();
    let env = [("BENCHCTL_CACHE", cache.path().to_str().unwrap())];
    let results = scratch_dir("text-prep");
    let (authors_path, authors, _) = eval_model(&model, "winoground", &demo_suite(), &results, &[], &env);
    let (transformers_path, transformers, _) =
        eval_model(&model, "winoground", &demo_suite(), &results, &["--text-prep", "transformers"], &env);
    assert!(authors["model"].get("text_prep").is_none(), "{}", authors["model"]);
    assert_eq!(transformers["model"]["text_prep"], "transformers");

    let found = identities(cache.path());
    let preps: Vec<Option<&str>> = found.iter().map(|i| i.get("text_prep").and_then(|p| p.as_str())).collect();
    assert_eq!(found.len(), 2, "one namespace each: {preps:?}");
    assert!(preps.contains(&None) && preps.contains(&Some("transformers")), "{preps:?}");
    let settings = found.iter().find(|i| i.get("text_prep").is_some()).unwrap();
    assert!(settings["tokenizer_settings"].is_string(), "the tokenizer_config.json read is in the identity");

    // The demo's captions are lower-case without punctuation: both preparations give the same
    // ids, yet not the same scores, since transformers' processor masks the padding and the
    // authors' preparation does not.
    let dump = |path: &std::path::Path, run: &serde_json::Value| std::fs::read_to_string(dump_path(path, run)).unwrap();
    let files = benchctl_models::hub::from_dir(&model).unwrap();
    let [authors_ids, transformers_ids] = [TextPrep::Authors, TextPrep::Transformers].map(|prep| {
        let config = benchctl_models::models::siglip::SiglipConfig::from_file(&files.config).unwrap();
        let tokenizer = SiglipText::of(&files, &config.text_config, prep).unwrap();
        tokenizer.encode("a brown dog").unwrap()
    });
    assert_eq!(authors_ids, transformers_ids);
    assert_ne!(dump(&authors_path, &authors), dump(&transformers_path, &transformers));

    // Capitalised and punctuated, they differ for transformers' processor; the authors'
    // canonical form is the same as before, and so are its scores.
    let shouted = shouted_demo();
    let (shouted_authors_path, shouted_authors, _) =
        eval_model(&model, "winoground", shouted.path(), &results, &[], &env);
    let (shouted_transformers_path, shouted_transformers, _) =
        eval_model(&model, "winoground", shouted.path(), &results, &["--text-prep", "transformers"], &env);
    assert_eq!(dump(&shouted_authors_path, &shouted_authors), dump(&authors_path, &authors));
    assert_ne!(dump(&shouted_transformers_path, &shouted_transformers), dump(&transformers_path, &transformers));
}

#[test]
fn a_model_with_one_preparation_refuses_the_other() {
    let (results, demo) = (scratch_dir("text-prep-refused"), demo_suite());
    let model = common::tiny_model();
    let eval = |prep: &str| {
        let args = ["--text-prep", prep];
        benchctl(
            &common::eval_args(&model, "winoground", demo.to_str().unwrap(), results.to_str().unwrap(), &args),
            &[],
        )
    };
    let out = eval("transformers");
    assert_eq!(out.status.code(), Some(4), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(err.contains("--text-prep transformers") && err.contains("clip"), "{err}");
    let out = eval("lowercase");
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
}

#[test]
fn a_run_spec_chooses_the_preparation_per_block() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("run.toml");
    let model = benchctl_testkit::fixture_model("siglip2-tiny").display().to_string();
    let block = |extra: &str| {
        format!(
            "[[runs]]\nmodel_paths = [{model:?}]\nsuites = [\"winoground\"]\ndata_dirs = {{ winoground = {:?} }}\n{extra}",
            demo_suite().display().to_string()
        )
    };
    std::fs::write(
        &spec,
        format!("results_dir = \"out\"\n\n{}\n{}", block(""), block("text_prep = \"transformers\"\n")),
    )
    .unwrap();
    let out = benchctl(&["eval", "--config", spec.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let store = benchctl::store::Store::open(&dir.path().join("out")).unwrap();
    let preps: Vec<Option<String>> = store.runs().unwrap().iter().map(|r| r.run.model.text_prep.clone()).collect();
    assert_eq!(preps, [None, Some("transformers".to_string())]);
    let labels: Vec<String> = store.runs().unwrap().iter().map(|r| r.run.label()).collect();
    assert_eq!(labels, ["siglip2-tiny", "siglip2-tiny (transformers captions)"]);
    // The regression gate compares runs of one identity only: the two are not baselines of
    // each other.
    let identities: Vec<String> = store.runs().unwrap().iter().map(|r| r.run.identity().to_string()).collect();
    assert!(identities[1].contains("transformers captions") && !identities[0].contains("captions"), "{identities:?}");

    std::fs::write(&spec, block("text_prep = \"lower\"\n")).unwrap();
    let out = benchctl(&["eval", "--config", spec.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(common::stderr(&out).contains("--text-prep lower"), "{}", common::stderr(&out));
}
