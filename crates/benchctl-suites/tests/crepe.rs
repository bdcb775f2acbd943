//! CREPE's productivity sets (the bundled `crepe-productivity` manifest) on a fixture in the
//! release's layout (its CSVs with Python-list hard negatives, Visual Genome's two image
//! folders), read and scored against the official code (`scripts/fixtures/gen_crepe_fixture.py`:
//! `BaseCsvDataset`'s texts, `get_one2many_rank` and `get_one2many_metrics`' Recall@1 per file).

mod common;

use benchctl_scoring::ScoreTensor;
use common::{fixture, fixture_json, loaded};

#[test]
fn crepe_reads_and_scores_as_its_official_code() {
    let suite = loaded("crepe-productivity", "crepe");
    let official = fixture_json("crepe", "official.json");
    let files = official["files"].as_object().unwrap();
    assert_eq!(suite.items.len(), 3 * files.len());
    let table = fixture_json("crepe", "scores.json");
    let mut scores = ScoreTensor::new();
    for item in suite.items.iter() {
        let (stem, row) = item.id().rsplit_once('/').unwrap();
        let row: usize = row.parse().unwrap();
        // The caption and its hard negatives exactly as `ast.literal_eval` reads them.
        let texts: Vec<&str> = (0..item.text_count()).map(|l| item.text(l)).collect();
        let expected: Vec<&str> =
            files[stem]["texts"][row].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        assert_eq!(texts, expected, "{}", item.id());
        assert!((0..item.text_count()).all(|l| item.truth().is_match(0, l) == (l == 0)));
        // The image from whichever of Visual Genome's folders holds it, cropped to the region.
        let path = item.image(0).path().to_path_buf();
        assert!(path.is_file() && path.starts_with(fixture("crepe")), "{}", path.display());
        let values: Vec<f64> = table[stem][row].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        scores.push_exact(1, values.len(), &values).unwrap();
    }
    let report = suite.evaluate(&scores).unwrap();
    for (stem, want) in files {
        let group = report.group("file", stem).unwrap_or_else(|| panic!("no file {stem}"));
        let got = group.metrics.iter().find(|(n, _)| n == "i2t_accuracy").unwrap().1;
        assert!((got - 100.0 * want["R@1"].as_f64().unwrap()).abs() < 1e-9, "{stem}: {got}");
    }
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
