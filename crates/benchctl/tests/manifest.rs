//! A suite from a manifest file runs as the built-in suites do: `eval`, `check`, `score`,
//! the store, `report`, `compare` and the leaderboard; its run names the manifest so later
//! commands read it again. The manifest here is the bundled Winoground one, saved as a user's
//! own file under another id, so its reports must equal the built-in `winoground`'s.

mod common;

use common::{benchctl, demo_suite, stderr, stdout, stored_run};

fn eval(suite: &str, results: &std::path::Path) -> (std::path::PathBuf, serde_json::Value) {
    // The demo model trained on shapes: its reports are not all zeros, so equality means something.
    let model = benchctl_testkit::fixture_model("clip-shapes").display().to_string();
    let data = demo_suite().display().to_string();
    let args = [
        "eval",
        "--model-path",
        &model,
        "--suite",
        suite,
        "--data-dir",
        &data,
        "--results-dir",
        results.to_str().unwrap(),
    ];
    stored_run(&benchctl(&args, &[]))
}

#[test]
fn a_manifest_file_runs_like_a_built_in_suite() {
    let dir = tempfile::tempdir().unwrap();
    let bundled = benchctl_testkit::workspace_root().join("datasets/manifests/winoground-manifest.toml");
    let text = std::fs::read_to_string(bundled).unwrap().replace("id = \"winoground-manifest\"", "id = \"my-suite\"");
    let manifest = dir.path().join("my-suite.toml");
    std::fs::write(&manifest, text).unwrap();
    let results = dir.path().join("results");

    let (_, built_in) = eval("winoground", &results);
    let (run_path, run) = eval(manifest.to_str().unwrap(), &results);
    assert_eq!(run["suite"]["id"], "my-suite");
    assert_eq!(run["suite"]["manifest"], manifest.to_str().unwrap());
    assert_eq!(run["report"], built_in["report"], "the same report as the built-in loader");
    assert_eq!(run["report"]["metrics"]["group_score"], 50.0);
    assert_eq!(run["intervals"], built_in["intervals"]);
    assert_ne!(run["data_fingerprint"], built_in["data_fingerprint"], "the manifest is part of the data");

    // `check` and `score` take the manifest's path too.
    let data = demo_suite().display().to_string();
    let out = benchctl(&["check", "--suite", manifest.to_str().unwrap(), "--data-dir", &data], &[]);
    assert!(stdout(&out).contains("my-suite in") && stdout(&out).contains("8 items, 16 images"), "{}", stdout(&out));
    let dump = common::dump_path(&run_path, &run);
    let args =
        ["score", "--suite", manifest.to_str().unwrap(), "--data-dir", &data, "--scores", dump.to_str().unwrap()];
    let out = benchctl(&args, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = built_in["report"]["metrics"]["group_score"].as_f64().unwrap();
    assert!(stdout(&out).contains(&format!("{printed:.2}")), "{}", stdout(&out));

    // Later commands find the suite from the run, wherever they run.
    let out = benchctl(&["report", run_path.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(run_path.with_extension("report").join("index.html").is_file());
    let out = benchctl(&["leaderboard", "--results-dir", results.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let board = std::fs::read_to_string(results.join("LEADERBOARD.md")).unwrap();
    assert!(board.contains("my-suite (group score)"), "{board}");
}

#[test]
fn a_broken_manifest_is_a_usage_error_naming_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("broken.toml");
    let bundled = benchctl_testkit::workspace_root().join("datasets/manifests/aro-coco-order.toml");
    let text = std::fs::read_to_string(bundled).unwrap().replace("id = \"aro-coco-order\"", "id = \"my-order\"");
    let line = text.lines().position(|l| l == "format = \"json\"").unwrap() + 1;
    std::fs::write(&manifest, text.replace("format = \"json\"", "format = \"yaml\"")).unwrap();
    let out = benchctl(&["check", "--suite", manifest.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("`source.format` (line {line})")), "{}", stderr(&out));
    // A missing key is named by the TOML reader.
    std::fs::write(&manifest, "id = \"x\"\ndescription = \"d\"\n").unwrap();
    let out = benchctl(&["check", "--suite", manifest.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("missing field `source`"), "{}", stderr(&out));
    let out = benchctl(&["check", "--suite", "no-such-suite"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("aro-vg-relation") && stderr(&out).contains("manifest's path"), "{}", stderr(&out));
}

/// `--suite NAME` finds `datasets/manifests/NAME.toml` under the working directory; shards of
/// a manifest suite merge back into the whole run (merge reads the manifest the runs name).
#[test]
fn local_manifests_by_name_and_sharded_runs_merge() {
    let dir = tempfile::tempdir().unwrap();
    let bundled = benchctl_testkit::workspace_root().join("datasets/manifests/winoground-manifest.toml");
    let text =
        std::fs::read_to_string(bundled).unwrap().replace("id = \"winoground-manifest\"", "id = \"local-bench\"");
    std::fs::create_dir_all(dir.path().join("datasets/manifests")).unwrap();
    std::fs::write(dir.path().join("datasets/manifests/local-bench.toml"), text).unwrap();
    let model = benchctl_testkit::fixture_model("clip-shapes").display().to_string();
    let data = demo_suite().display().to_string();
    let run = |extra: &[&str]| {
        let mut args =
            vec!["eval", "--model-path", &model, "--suite", "local-bench", "--data-dir", &data, "--no-cache"];
        args.extend_from_slice(extra);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_benchctl"))
            .args(&args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        stored_run(&out)
    };
    let at = |name: &str| dir.path().join(name).display().to_string();
    let (_, whole) = run(&["--results-dir", &at("whole")]);
    assert_eq!(whole["suite"]["id"], "local-bench");
    let shards: Vec<String> = ["0/2", "1/2"]
        .iter()
        .map(|s| run(&["--results-dir", &at("shards"), "--shard", s]).0.display().to_string())
        .collect();
    let merged = dir.path().join("merged");
    let mut args = vec!["merge"];
    args.extend(shards.iter().map(String::as_str));
    args.extend(["--results-dir", merged.to_str().unwrap()]);
    let (_, merged) = stored_run(&benchctl(&args, &[]));
    assert_eq!(merged["report"], whole["report"]);
    assert_eq!(merged["intervals"], whole["intervals"]);
}

/// SugarCrepe++'s text-only task end to end: a dual encoder's run dumps each item's text–text
/// cosines, equal to those of the text embeddings `transformers` gives for the same weights
/// (the fixture model's reference), and reports the official rule on them; `score` reads them
/// back from the dump to the same report.
#[test]
fn sugarcrepe_pp_text_only_task_compares_the_models_text_embeddings() {
    let model = benchctl_testkit::fixture_model("clip-tiny-a");
    let (texts, embeddings) = reference_text_embeddings(&model.join("reference.safetensors"));
    let cosine = |a: usize, b: usize| -> f64 {
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| f64::from(*p) * f64::from(*q)).sum::<f64>();
        let (x, y) = (&embeddings[a], &embeddings[b]);
        dot(x, y) / (dot(x, x).sqrt() * dot(y, y).sqrt())
    };
    // Every choice of three of the four reference texts, each one the negative in turn.
    let mut triples = Vec::new();
    for left_out in 0..4 {
        let three: Vec<usize> = (0..4).filter(|&t| t != left_out).collect();
        for negative in 0..3 {
            let positives: Vec<usize> = (0..3).filter(|&p| p != negative).map(|p| three[p]).collect();
            triples.push([positives[0], positives[1], three[negative]]);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("images")).unwrap();
    benchctl_testkit::generated_image(7, 40, 30).save(dir.path().join("images/img.png")).unwrap();
    let files = ["replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj"];
    let mut ids = Vec::new();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    for (f, file) in files.iter().enumerate() {
        let records: Vec<serde_json::Value> = (0..triples.len())
            .filter(|n| n % files.len() == f)
            .enumerate()
            .map(|(id, n)| {
                ids.push((format!("{file}/{id}"), triples[n]));
                let [p1, p2, neg] = triples[n];
                serde_json::json!({"id": id, "filename": "img.png", "caption": texts[p1], "caption2": texts[p2], "negative_caption": texts[neg]})
            })
            .collect();
        std::fs::write(dir.path().join("data").join(format!("{file}.json")), serde_json::to_string(&records).unwrap())
            .unwrap();
    }
    let results = dir.path().join("results");
    let (run_path, run, _) = common::eval_model(&model, "sugarcrepe-pp", dir.path(), &results, &[], &[]);

    // The dump's text–text scores are transformers' cosines.
    let dump = std::fs::read_to_string(common::dump_path(&run_path, &run)).unwrap();
    let mut hits = 0;
    for line in dump.lines() {
        let line: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = line["id"].as_str().unwrap();
        let (_, triple) = ids.iter().find(|(i, _)| i == id).unwrap();
        for (a, &ta) in triple.iter().enumerate() {
            for (b, &tb) in triple.iter().enumerate() {
                let ours = line["text_scores"][a][b].as_f64().unwrap();
                assert!((ours - cosine(ta, tb)).abs() < 1e-5, "{id} [{a}][{b}]: {ours} vs {}", cosine(ta, tb));
            }
        }
        // The official rule on transformers' cosines, each far from a tie.
        let [p1, p2, neg] = *triple;
        let (p1p2, p1n, p2n) = (cosine(p1, p2), cosine(p1, neg), cosine(p2, neg));
        assert!((p1p2 - p1n).abs() > 1e-4 && (p1p2 - p2n).abs() > 1e-4, "{id} is too close to a tie to test");
        hits += usize::from(p1p2 > p1n && p1p2 > p2n);
    }
    assert!(0 < hits && hits < triples.len(), "both outcomes occur: {hits} of {}", triples.len());
    let reported = run["report"]["metrics"]["text_only_accuracy"].as_f64().unwrap();
    assert!((reported - 100.0 * hits as f64 / triples.len() as f64).abs() < 1e-9, "{reported}");

    // The failure browser shows each item's text–text scores beside its image–text ones.
    let out =
        benchctl(&["report", run_path.to_str().unwrap(), "--out", dir.path().join("page").to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let chunk = std::fs::read_to_string(dir.path().join("page/data/chunk-0000.js")).unwrap();
    assert_eq!(chunk.matches("\"text_scores\":[[").count(), triples.len(), "one text–text matrix per item");

    // `score` reads the text–text scores back from the dump.
    let dump = common::dump_path(&run_path, &run);
    let args = [
        "score",
        "--suite",
        "sugarcrepe-pp",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--scores",
        dump.to_str().unwrap(),
        "--model-name",
        "rescored",
        "--results-dir",
        results.to_str().unwrap(),
    ];
    let (_, rescored) = stored_run(&benchctl(&args, &[]));
    assert_eq!(rescored["report"]["metrics"]["text_only_accuracy"], run["report"]["metrics"]["text_only_accuracy"]);

    // Shards keep them: their merge reports what the whole run did.
    let shard_results = dir.path().join("shards");
    let shards: Vec<String> = ["0/2", "1/2"]
        .iter()
        .map(|s| {
            let extra = ["--shard", s];
            common::eval_model(&model, "sugarcrepe-pp", dir.path(), &shard_results, &extra, &[]).0.display().to_string()
        })
        .collect();
    let merged = dir.path().join("merged");
    let mut merge = vec!["merge"];
    merge.extend(shards.iter().map(String::as_str));
    merge.extend(["--results-dir", merged.to_str().unwrap()]);
    let (_, merged) = stored_run(&benchctl(&merge, &[]));
    assert_eq!(merged["report"], run["report"]);

    // Text scores for some items only, or for a text the item lacks, are bad data, named.
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&dump).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let refused = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut edited = lines.clone();
        edit(&mut edited[1]);
        let broken = dir.path().join("broken.jsonl");
        std::fs::write(&broken, edited.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
        let mut args = args;
        args[6] = broken.to_str().unwrap();
        let out = benchctl(&args[..7], &[]);
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        stderr(&out)
    };
    let second = lines[1]["id"].as_str().unwrap().to_string();
    let message = refused(&|line| {
        line.as_object_mut().unwrap().remove("text_scores");
    });
    assert!(message.contains(&format!("1 item(s) lack text scores, e.g. {second}")), "{message}");
    let message = refused(&|line| line["text_scores"][0].as_array_mut().unwrap().push(serde_json::json!(0.5)));
    assert!(message.contains(&format!("item `{second}` has 3 text(s), so no text score [0][3]")), "{message}");
}

/// The texts of a fixture model's reference file (its metadata) and their `text_embeds`.
fn reference_text_embeddings(path: &std::path::Path) -> (Vec<String>, Vec<Vec<f32>>) {
    let bytes = std::fs::read(path).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let texts: Vec<String> = serde_json::from_str(header["__metadata__"]["texts"].as_str().unwrap()).unwrap();
    let tensors = candle_core::safetensors::load(path, &candle_core::Device::Cpu).unwrap();
    let embeddings = tensors["text_embeds"].to_vec2::<f32>().unwrap();
    assert_eq!(texts.len(), embeddings.len());
    (texts, embeddings)
}

/// `source.expand` shares what it does not expand: a one-record file whose record expands to
/// 20,000 items beside a 1.9 MB field it leaves alone (each element copied the whole record
/// before, 3.9 GB at once) loads every item in the memory of the file and its items; a record
/// past the bound is refused naming the file, the record and the key.
#[cfg(target_os = "linux")]
#[test]
fn expanding_a_record_shares_its_other_fields_and_is_bounded() {
    let data = tempfile::tempdir().unwrap();
    let n = 20_000;
    let record = |n: usize| {
        serde_json::json!({
            "image": "x.png",
            "notes": "x".repeat(1_900_000),
            "captions": (0..n).map(|i| format!("caption {i}")).collect::<Vec<_>>(),
            "foils": (0..n).map(|i| format!("foil {i}")).collect::<Vec<_>>(),
        })
        .to_string()
    };
    std::fs::write(data.path().join("records.jsonl"), record(n) + "\n").unwrap();
    std::fs::write(
        data.path().join("m.toml"),
        "id = \"expand-bomb\"\ndescription = \"x\"\n[source]\nfile = \"records.jsonl\"\nformat = \"jsonl\"\nexpand = [\"captions\", \"foils\"]\n[item]\nimages = [\"{image}\"]\ntexts = [\"{captions}\", \"{foils}\"]\ntruth = { text = 0 }\n[metrics]\nfamily = \"pairwise\"\n",
    )
    .unwrap();
    let manifest = data.path().join("m.toml");
    let args = ["check", "--suite", manifest.to_str().unwrap(), "--data-dir", data.path().to_str().unwrap()];
    let (out, peak_mib) = common::benchctl_peak_rss(&args, &[]);
    assert!(stdout(&out).contains(&format!("{n} items")), "{}{}", stdout(&out), stderr(&out));
    assert!(peak_mib < 1024.0, "check took {peak_mib:.0} MiB");
    // Past the bound: refused, naming where.
    let over = benchctl_suites::manifest::MAX_EXPANDED + 1;
    std::fs::write(data.path().join("records.jsonl"), record(over) + "\n").unwrap();
    let out = benchctl(&args, &[]);
    let text = stdout(&out) + &stderr(&out);
    assert!(
        text.contains("records.jsonl line 1") && text.contains("`source.expand`") && text.contains("at most 100000"),
        "{text}"
    );
}
