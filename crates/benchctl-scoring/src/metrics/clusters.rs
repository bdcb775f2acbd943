//! Clusters of items that were not made independently: several VALSE or SugarCrepe items over
//! one image, EqBen's runs of frames from one video, What'sUp's groups over one scene. A
//! bootstrap that resamples such items one by one treats them as independent and gives
//! intervals that are too narrow; resampling whole clusters does not (docs/results.md,
//! "Clusters"). A suite declares how its items cluster ([`ClusterRule`]); the suite's loader
//! side turns that into each item's cluster ([`Clusters`]).

/// How a suite's items cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ClusterRule {
    /// Items that share an image file are one cluster, transitively (VALSE's and SugarCrepe's
    /// images, each under several items). A suite whose items share none resamples items.
    #[default]
    SharedImages,
    /// Items with a value of this tag in common are one cluster (EqBen's video, a manifest's
    /// `metrics.cluster_by`).
    Tag(String),
}

impl ClusterRule {
    /// How the rule reads in run records and docs: `shared images`, `tag video`.
    pub fn describe(&self) -> String {
        match self {
            ClusterRule::SharedImages => "shared images".to_string(),
            ClusterRule::Tag(key) => format!("tag {key}"),
        }
    }
}

/// Each item's cluster, and each cluster's items (in item order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clusters {
    /// `members[offsets[c]..offsets[c + 1]]` are cluster `c`'s items.
    offsets: Vec<u32>,
    members: Vec<u32>,
    items: usize,
    /// Where every cluster is a run of consecutive items (as a release lists an image's
    /// questions together), each cluster's first item, then the number of items: the runs tile
    /// the items in cluster order (clusters are numbered by their first item), so cluster `c` is
    /// `starts[c]..starts[c + 1]`. A resample then reads two neighbouring numbers per cluster
    /// instead of its member list, from an array half the size of (first, length) pairs.
    runs: Option<Vec<u32>>,
}

impl Clusters {
    /// From each item's cluster label (any numbers; equal labels, one cluster), clusters
    /// numbered in order of their first item.
    pub fn from_labels(labels: &[usize]) -> Self {
        let mut dense: std::collections::HashMap<usize, u32> = std::collections::HashMap::new();
        let ids: Vec<u32> = labels
            .iter()
            .map(|&label| {
                let next = dense.len() as u32;
                *dense.entry(label).or_insert(next)
            })
            .collect();
        let count = dense.len();
        let mut sizes = vec![0u32; count + 1];
        ids.iter().for_each(|&c| sizes[c as usize + 1] += 1);
        let offsets: Vec<u32> = sizes
            .iter()
            .scan(0u32, |total, &s| {
                *total += s;
                Some(*total)
            })
            .collect();
        let mut next = offsets.clone();
        let mut members = vec![0u32; labels.len()];
        for (item, &c) in ids.iter().enumerate() {
            members[next[c as usize] as usize] = item as u32;
            next[c as usize] += 1;
        }
        // Runs that tile the items in cluster order: each cluster's items are consecutive and
        // start where the previous cluster's end.
        let tiled = (0..count).all(|c| {
            let cluster = &members[offsets[c] as usize..offsets[c + 1] as usize];
            cluster[0] == offsets[c] && cluster[cluster.len() - 1] + 1 == offsets[c + 1]
        });
        let runs = tiled.then(|| offsets.clone());
        Clusters { offsets, members, items: labels.len(), runs }
    }

    /// Where every cluster is a run of consecutive items: each cluster's first item, then the
    /// number of items (cluster `c` is `starts[c]..starts[c + 1]`).
    pub fn runs(&self) -> Option<&[u32]> {
        self.runs.as_deref()
    }

    /// How many clusters.
    pub fn count(&self) -> usize {
        self.offsets.len() - 1
    }

    /// How many items they hold.
    pub fn items(&self) -> usize {
        self.items
    }

    /// Whether every cluster is one item (resampling clusters is then resampling items).
    pub fn all_single(&self) -> bool {
        self.count() == self.items
    }

    /// The items of cluster `c`.
    pub fn members(&self, c: usize) -> &[u32] {
        &self.members[self.offsets[c] as usize..self.offsets[c + 1] as usize]
    }

    /// Where some cluster is not a run of consecutive items: the item order that makes every
    /// cluster one (cluster by cluster, each in item order), and the clusters over the items in
    /// that order, numbered as here (so a resample draws the same clusters). `None` where every
    /// cluster already is a run.
    pub fn gathered(&self) -> Option<(Vec<u32>, Clusters)> {
        if self.runs.is_some() {
            return None;
        }
        let labels: Vec<usize> =
            (0..self.count()).flat_map(|c| std::iter::repeat_n(c, self.members(c).len())).collect();
        Some((self.members.clone(), Clusters::from_labels(&labels)))
    }

    /// The mean cluster size.
    pub fn mean_size(&self) -> f64 {
        self.items as f64 / self.count().max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_become_dense_clusters_in_first_item_order() {
        let clusters = Clusters::from_labels(&[7, 3, 7, 9, 3, 7]);
        assert_eq!(clusters.count(), 3);
        assert_eq!(
            (clusters.members(0), clusters.members(1), clusters.members(2)),
            (&[0, 2, 5][..], &[1, 4][..], &[3][..])
        );
        assert!(!clusters.all_single() && Clusters::from_labels(&[1, 2, 3]).all_single());
        assert_eq!(clusters.mean_size(), 2.0);
        assert!(clusters.runs().is_none());
        let runs = Clusters::from_labels(&[4, 4, 9, 9, 9, 1]);
        assert_eq!(runs.runs(), Some(&[0, 2, 5, 6][..]), "cluster c is starts[c]..starts[c + 1]");
        // One cluster that is not a run of consecutive items, and no cluster is read as one.
        assert!(Clusters::from_labels(&[4, 4, 9, 4]).runs().is_none());
    }
}
