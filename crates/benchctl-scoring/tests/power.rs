//! The regression gate's statistics against scipy and statsmodels
//! (`scripts/fixtures/gen_power_fixture.py`): normal quantiles and distribution values,
//! McNemar's exact one-sided test, Holm's and Benjamini–Hochberg's adjusted p-values, the
//! minimum detectable difference against the exact power of McNemar's exact test, and the
//! seeds a two-sample comparison needs.

use benchctl_scoring::metrics::power::{
    mcnemar_detectable, mcnemar_items_needed, mcnemar_one_sided, normal_cdf, normal_quantile, seeds_needed, Correction,
};

fn fixture() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/power/cases.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap()
}

fn close(got: f64, want: f64, relative: f64) -> bool {
    (got - want).abs() <= relative * want.abs().max(1e-300)
}

#[test]
fn normal_quantiles_and_distribution_equal_scipy() {
    let fixture = fixture();
    for case in fixture["quantiles"].as_array().unwrap() {
        let (p, z) = (f(&case["p"]), f(&case["z"]));
        assert!(
            close(normal_quantile(p), z, 1e-12) || (z == 0.0 && normal_quantile(p).abs() < 1e-15),
            "Φ⁻¹({p}) = {} against {z}",
            normal_quantile(p)
        );
    }
    for case in fixture["cdf"].as_array().unwrap() {
        let (x, phi) = (f(&case["x"]), f(&case["phi"]));
        assert!(close(normal_cdf(x), phi, 1e-12), "Φ({x}) = {} against {phi}", normal_cdf(x));
    }
}

#[test]
fn mcnemar_one_sided_equals_scipy_binomtest() {
    for case in fixture()["mcnemar_one_sided"].as_array().unwrap() {
        let (worse, better) = (case["worse"].as_u64().unwrap() as usize, case["better"].as_u64().unwrap() as usize);
        let (got, want) = (mcnemar_one_sided(worse, better), f(&case["p"]));
        assert!(close(got, want, 1e-12), "{worse} worse, {better} better: {got} against {want}");
    }
}

#[test]
fn adjusted_p_values_equal_statsmodels() {
    for case in fixture()["adjusted"].as_array().unwrap() {
        let p: Vec<f64> = case["p"].as_array().unwrap().iter().map(f).collect();
        for (correction, key) in [(Correction::Holm, "holm"), (Correction::Bh, "bh")] {
            let want: Vec<f64> = case[key].as_array().unwrap().iter().map(f).collect();
            let got = correction.adjust(&p);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(close(*g, *w, 1e-12), "{key} p[{i}] = {} : {g} against {w}", p[i]);
            }
        }
    }
}

/// The normal approximation's detectable difference is within 10 % of the smallest difference
/// McNemar's exact test finds with 80 % power (its exact power, computed by scipy), from 100 to
/// 5,000 items, at levels from 5 % down to Bonferroni's 0.05/200, and with no discordance seen.
#[test]
fn the_detectable_difference_is_within_ten_percent_of_the_exact_tests() {
    for case in fixture()["detectable"].as_array().unwrap() {
        let (n, p, alpha, power) = (f(&case["items"]), f(&case["discordance"]), f(&case["alpha"]), f(&case["power"]));
        let exact = f(&case["exact_delta"]);
        let got = mcnemar_detectable(n, p, alpha, power).unwrap();
        assert!(
            (got / exact - 1.0).abs() <= 0.10,
            "{n} items, discordance {p}, α {alpha}: {got:.4} against exact {exact}"
        );
        // And where the normal approximation holds, the sample size formula is its inverse.
        if got < p {
            let needed = mcnemar_items_needed(got, p, alpha, power).unwrap() as f64;
            assert!((needed - n).abs() <= 1.0, "{needed} items needed against {n}");
        }
    }
}

#[test]
fn seeds_needed_equal_statsmodels_normal_power() {
    for case in fixture()["seeds"].as_array().unwrap() {
        let got = seeds_needed(f(&case["difference"]), f(&case["spread"]), f(&case["alpha"]), f(&case["power"]));
        assert_eq!(got, case["per_model"].as_u64(), "{case}");
    }
}
