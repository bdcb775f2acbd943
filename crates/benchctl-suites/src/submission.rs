//! The official submission files benchmarks define: what a benchmark's own scorer (or its
//! leaderboard) reads from a model. A suite names its format: a built-in suite's loader (EqBen's
//! [`crate::PairOrder`]), a manifest's `submission` key. `benchctl` writes a run's file beside
//! it and `score --format` reads one back (its `submission/` modules, one per format).

/// An official submission format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submission {
    /// EqBen's `prediction.npy`: one `<f4` score per entry of its flat annotation list, in
    /// that list's order (the suite's [`crate::PairOrder`]).
    EqbenNpy,
    /// NaturalBench's output list (`output_file`): a JSON list of generated replies, per item
    /// each question asked of each image, read by its `extract_answer`.
    NaturalbenchOutputs,
    /// VisMin-bench's CSV: `id,T0_I0,T0_I1,T1_I0,T1_I1` (the similarity of text t with image i)
    /// for its 2 × 2 items, or `id,Text_Q0,Text_Q1,Image_Q0,Image_Q1` (the label answered to
    /// each question) for its VQA form.
    VisminCsv,
}

impl Submission {
    /// Every format, in the order of [`Submission::NAMES`].
    pub const ALL: [Submission; 3] = [Submission::EqbenNpy, Submission::NaturalbenchOutputs, Submission::VisminCsv];

    /// The names manifests, `score --format` and run records use, in the order of the variants.
    pub const NAMES: [&'static str; 3] = ["eqben-npy", "naturalbench-outputs", "vismin-csv"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_reads_back_from_its_name() {
        for format in Submission::ALL {
            assert_eq!(Submission::from_name(format.name()), Some(format));
        }
        assert_eq!(Submission::from_name("vismin"), None);
    }
}
