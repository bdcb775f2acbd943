//! CREPE's productivity sets (the bundled `crepe-productivity` manifest) and systematicity
//! sets (`crepe-systematicity-atom` and `-comp`) on fixtures in the release's layout (its CSVs
//! with Python-list hard negatives, Visual Genome's two image folders), read and scored against
//! the official code (`scripts/fixtures/gen_crepe_fixture.py`, `gen_crepe_syst_fixture.py`:
//! `BaseCsvDataset`'s texts, `get_one2many_rank` and `get_one2many_metrics`' Recall@1 per file).

mod common;

use benchctl_scoring::ScoreTensor;
use benchctl_suites::Suite;
use common::{fixture, fixture_json, loaded};
use serde_json::Value;

/// Checks each item of `suite` (loaded from the fixture `name`) against the official reader's
/// view of its row (`files[stem]["texts"][row]`: the caption, then its hard negatives, as
/// `ast.literal_eval` reads them; the caption the match; the image from whichever of Visual
/// Genome's folders holds it), and returns the fixture's scores of every item (`table[stem][row]`).
fn official_rows(suite: &Suite, name: &str, files: &serde_json::Map<String, Value>, table: &Value) -> ScoreTensor {
    let mut scores = ScoreTensor::new();
    for item in suite.items.iter() {
        let (stem, row) = item.id().rsplit_once('/').unwrap();
        let row: usize = row.parse().unwrap();
        let texts: Vec<&str> = (0..item.text_count()).map(|l| item.text(l)).collect();
        let expected: Vec<&str> =
            files[stem]["texts"][row].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        assert_eq!(texts, expected, "{}", item.id());
        assert!((0..item.text_count()).all(|l| item.truth().is_match(0, l) == (l == 0)));
        let path = item.image(0).path().to_path_buf();
        assert!(path.is_file() && path.starts_with(fixture(name)), "{}", path.display());
        let values: Vec<f64> = table[stem][row].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        scores.push_exact(1, values.len(), &values).unwrap();
    }
    scores
}

/// Each file's `i2t_accuracy` against the official `image_to_text_R@1`.
fn assert_recall_per_file(report: &benchctl_scoring::Report, files: &serde_json::Map<String, Value>) {
    for (stem, want) in files {
        let group = report.group("file", stem).unwrap_or_else(|| panic!("no file {stem}"));
        let got = group.metrics.iter().find(|(n, _)| n == "i2t_accuracy").unwrap().1;
        assert!((got - 100.0 * want["R@1"].as_f64().unwrap()).abs() < 1e-9, "{stem}: {got}");
    }
}

#[test]
fn crepe_reads_and_scores_as_its_official_code() {
    let suite = loaded("crepe-productivity", "crepe");
    let official = fixture_json("crepe", "official.json");
    let files = official["files"].as_object().unwrap();
    assert_eq!(suite.items.len(), 3 * files.len());
    let scores = official_rows(&suite, "crepe", files, &fixture_json("crepe", "scores.json"));
    let report = suite.evaluate(&scores).unwrap();
    assert_recall_per_file(&report, files);
    let (kind, complexity) = (report.group("type", "negate").unwrap(), report.group("complexity", "5").unwrap());
    assert_eq!((kind.items, complexity.items), (6, 9));
}

/// A hard-negative cell that is not a Python list of strings is a problem naming the key and
/// the row; the other rows are kept.
#[test]
fn a_cell_that_is_not_a_python_list_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ["atom", "swap", "negate"] {
        let folder = dir.path().join("prod_hard_negatives").join(kind);
        std::fs::create_dir_all(&folder).unwrap();
        let bad = if kind == "swap" { "2,0,0,4,4,a dog,\"['a cat', 3]\"\n" } else { "" };
        let csv =
            format!("image_id,x,y,width,height,caption,hard_negs\n1,0,0,4,4,a cup,\"['a mug', 'a bowl']\"\n{bad}");
        std::fs::write(folder.join(format!("prod_vg_hard_negs_{kind}_complexity_4.csv")), csv).unwrap();
    }
    let info = benchctl_suites::find("crepe-productivity").unwrap();
    let (suite, problems) = info.load_all(dir.path()).unwrap();
    let all: Vec<&str> = (0..problems.len()).map(|i| problems.message(i)).collect();
    assert_eq!(suite.items.len(), 3, "{all:?}");
    assert_eq!(suite.items.item(0).text_count(), 3);
    assert!(
        all.iter().any(|m| m.contains("`item.texts_list`") && m.contains("not a list") && m.contains("line 3")),
        "{all:?}"
    );
}

/// Systematicity: each file read with the atom and with the compound hard negatives, as the
/// official script's `--hard-neg-type` picks the column; a row with an empty list is an item of
/// one text that the official rank counts as found; Recall@1 per file, and the groups by
/// pretraining set and compound split.
#[test]
fn crepe_systematicity_reads_and_scores_as_its_official_code_for_both_negative_types() {
    let official = fixture_json("crepe-syst", "official.json");
    let table = fixture_json("crepe-syst", "scores.json");
    for kind in ["atom", "comp"] {
        let suite = loaded(&format!("crepe-systematicity-{kind}"), "crepe-syst");
        let files = official[kind].as_object().unwrap();
        assert_eq!(suite.items.len(), 3 * files.len(), "{kind}");
        let scores = official_rows(&suite, "crepe-syst", files, &table[kind]);
        let singles = suite.items.iter().filter(|item| item.text_count() == 1).count();
        assert_eq!(singles, if kind == "comp" { 2 } else { 0 }, "the empty compound lists");
        let report = suite.evaluate(&scores).unwrap();
        assert_recall_per_file(&report, files);
        let (laion, unseen) =
            (report.group("pretraining", "laion").unwrap(), report.group("compounds", "unseen").unwrap());
        assert_eq!((laion.items, unseen.items), (6, 9));
    }
}
