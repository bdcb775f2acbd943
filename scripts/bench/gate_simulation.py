"""The regression gate's false-alarm rate and power, simulated with scipy and statsmodels
alone (never benchctl): an independent check of `benchctl bench --part gate`
(crates/benchctl/src/bench/gate.rs), which simulates the same design through benchctl's gate.

Design (as the bench): a suite of 50 tags × 40 one-image two-text items; two runs whose
outcomes differ on 20 % of the items, as often one way as the other (no true difference);
a concordant item is right in both with probability 3/4. The gate tests the overall accuracy
and every tag's (51 rows) by McNemar's exact one-sided test (`binomtest(worse, worse + better,
0.5, alternative="greater")`), a row being a regression when its drop exceeds 0.5 points and
its p-value, adjusted over the 51 rows (`multipletests`, Holm or Benjamini–Hochberg) or not,
is below 0.05. Then pairs whose true overall drop is `--drop` points (benchctl reports its
detectable drop for this design): the share in which the overall row is a regression (Holm).

    python3 scripts/bench/gate_simulation.py [--pairs 1000] [--drop 3.95] [--seed 48]

Prints the family-wise false-alarm rates and the power; docs/results.md records a run.
"""
import argparse

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests

TAGS, PER_TAG, DISCORDANCE, TOLERANCE, ALPHA = 50, 40, 0.2, 0.5, 0.05


def pair(rng, drop):
    """Per item: 1 where the baseline is right and the current wrong, -1 the reverse, 0 same."""
    n = TAGS * PER_TAG
    u = rng.random(n)
    worse = (DISCORDANCE + drop) / 2
    return np.where(u < worse, 1, np.where(u < DISCORDANCE, -1, 0))


def rows(changes):
    """Each row's (drop in points, one-sided p): the overall row, then every tag's."""
    out = []
    for part in [changes] + [changes[t * PER_TAG:(t + 1) * PER_TAG] for t in range(TAGS)]:
        worse, better = int((part == 1).sum()), int((part == -1).sum())
        drop = 100.0 * (worse - better) / len(part)
        p = stats.binomtest(worse, worse + better, 0.5, alternative="greater").pvalue if worse else 1.0
        out.append((drop, p))
    return out


def regressions(decided, method):
    drops = np.array([d for d, _ in decided])
    p = np.array([p for _, p in decided])
    adjusted = p if method == "none" else multipletests(p, method=method)[1]
    return (drops > TOLERANCE) & (adjusted < ALPHA)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--drop", type=float, default=3.95, help="true overall drop in points for the power")
    parser.add_argument("--seed", type=int, default=48)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    alarms = {"holm": 0, "fdr_bh": 0, "none": 0}
    for _ in range(args.pairs):
        decided = rows(pair(rng, 0.0))
        for method in alarms:
            alarms[method] += bool(regressions(decided, method).any())
    found = sum(bool(regressions(rows(pair(rng, args.drop / 100)), "holm")[0]) for _ in range(args.pairs))
    for method, count in alarms.items():
        print(f"false_alarm_rate_{method} = {count / args.pairs:.3f}")
    print(f"power_at_{args.drop}_points_holm = {found / args.pairs:.3f}")


if __name__ == "__main__":
    main()
