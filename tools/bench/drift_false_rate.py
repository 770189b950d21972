"""How often an unchanged judge is flagged as drifted (A/A), and how often a planted shift is caught, simulated.

    python3 tools/bench/drift_false_rate.py [--simulations 1000] [--questions 60] [--changed 20] [--seed 0]

Standard library only.  Each simulated pair of runs grades the same answers twice with a noisy judge (graded:
a true score in [0.5, 1] plus Gaussian noise 0.08, cut to [0, 1]; pass/fail: a draw with that probability);
``--changed`` answers differ between the runs, the others are byte-identical anchors.  ``--shift`` moves every
score of the second run (a drifted judge).  Prints, per scenario, the share of runs whose judged metric the
gate calls inconclusive with reason "judge drift" (through rag_eval.gate, default settings, rule drop).
"""

import argparse
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
import rag_eval  # noqa: E402


def judged(rng, truth, shift, binary, changed):
    scores = []
    for i, t in enumerate(truth):
        p = min(1.0, max(0.0, t + shift))
        score = float(rng.random() < p) if binary else min(1.0, max(0.0, p + rng.gauss(0, 0.08)))
        scores.append(rag_eval.JudgedScore(f"q{i}", "faithfulness", score, None,
                                           "%064x" % (i + (10 ** 6 if i < changed else 0))))
    return rag_eval.judged_result([rag_eval.JudgedRead(scores, {}, {}, "sim")])


def flagged(rng, args, shift, binary):
    truth = [rng.uniform(0.5, 1.0) for _ in range(args.questions)]
    before = judged(rng, truth, 0.0, binary, 0)
    now = judged(rng, truth, shift, binary, args.changed)
    baseline = rag_eval.Baseline(before["mean"], rag_eval._per_query_by_metric(before), judge=before["judge"])
    report = rag_eval.gate(now, baseline, rag_eval.GateSettings(seed=rng.randrange(10 ** 9)))
    return report["metrics"]["judge.faithfulness"].get("reason") == "judge drift"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=1000)
    parser.add_argument("--questions", type=int, default=60)
    parser.add_argument("--changed", type=int, default=20)
    parser.add_argument("--shift", type=float, default=-0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| scores | judge | runs flagged \"judge drift\" |\n|---|---|---|")
    for binary in (False, True):
        for shift in (0.0, args.shift):
            rng = random.Random(f"{args.seed}:{binary}:{shift}")
            share = sum(flagged(rng, args, shift, binary) for _ in range(args.simulations)) / args.simulations
            print(f"| {'pass/fail' if binary else 'graded'} | {'unchanged (A/A)' if not shift else f'shifted {shift:+g}'}"
                  f" | {share:.3f} |")


if __name__ == "__main__":
    main()
