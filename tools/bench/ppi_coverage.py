"""How often the prediction-powered interval (ppi_mean, PPI++) covers the mean humans would give, simulated.

    python3 tools/bench/ppi_coverage.py [--labels 30] [--questions 300] [--simulations 2000] [--seed 0]

Standard library only; prints a markdown table (pasted into docs/judged.md).  Each simulated test set draws
``--questions`` questions; a question's human score Y comes from its difficulty, and the judge's score f is Y
plus a bias and noise (three judges: good, biased, poor), cut to [0, 1]; for pass/fail scores Y and f are 0/1
and the judge flips a share of them.  ``--labels`` questions, a random subset, get their human label.  The
truth is the population mean of Y (the expectation over questions, computed in closed form per scenario from a
million draws with a fixed seed, ``--truth-draws``), so coverage counts how often the nominal 95% interval holds it.  The paired
delta is the same estimator on per-question differences, so one table covers both.
"""

import argparse
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
import rag_eval  # noqa: E402


def clip(value):
    return min(1.0, max(0.0, value))


SCENARIOS = {  # name -> draw(rng) -> (human Y, judge f)
    "graded, good judge": lambda rng: (lambda y: (y, clip(y + rng.gauss(0, 0.1))))(rng.betavariate(2, 2)),
    "graded, biased judge": lambda rng: (lambda y: (y, clip(0.6 * y + 0.3 + rng.gauss(0, 0.1))))(rng.betavariate(2, 3)),
    "graded, poor judge": lambda rng: (lambda y: (y, clip(0.2 * y + rng.gauss(0.5, 0.2))))(rng.betavariate(3, 2)),
    "pass/fail, 10% flips": lambda rng: (lambda y: (y, y if rng.random() > 0.1 else 1.0 - y))(float(rng.random() < 0.7)),
    "pass/fail, lenient judge": lambda rng: (lambda y: (y, 1.0 if y or rng.random() < 0.3 else 0.0))(
        float(rng.random() < 0.5)),
}


def truth(draw, seed, draws):
    rng = random.Random(f"truth:{seed}")
    return sum(draw(rng)[0] for _ in range(draws)) / draws


def coverage(draw, labels, questions, simulations, seed, draws):
    rng = random.Random(seed)
    target = truth(draw, seed, draws)
    covered = methods = 0
    width = 0.0
    for _ in range(simulations):
        pairs = [draw(rng) for _ in range(questions)]
        judged = {f"q{i}": f for i, (_, f) in enumerate(pairs)}
        chosen = rng.sample(range(questions), labels)
        human = {f"q{i}": pairs[i][0] for i in chosen}
        entry = rag_eval._ppi_mean(human, judged)
        low, high = entry["interval"]
        covered += low <= target <= high
        methods += entry["method"] == "ppi++"
        width += high - low
    return covered / simulations, methods / simulations, width / simulations


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--labels", type=int, default=rag_eval._MIN_HUMAN_LABELS)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--simulations", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--truth-draws", type=int, default=1_000_000, help="draws that make each scenario's truth")
    args = parser.parse_args()
    print(f"{args.labels} labels of {args.questions} questions, {args.simulations} simulations, seed {args.seed}\n")
    print("| scenario | coverage of the 95% interval | PPI++ used | mean width |")
    print("|---|---|---|---|")
    for name, draw in SCENARIOS.items():
        cover, used, width = coverage(draw, args.labels, args.questions, args.simulations, args.seed, args.truth_draws)
        print(f"| {name} | {cover:.3f} | {used:.0%} | {width:.3f} |")


if __name__ == "__main__":
    main()
