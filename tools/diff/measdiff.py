"""measdiff: each measure function of this rag_eval.py against another copy, on seeded random rankings.

For every measure of the reference's table (``MEASURES``) and its function (``recall_at_k``,
``reciprocal_rank``...), each case draws one ranking (a list of ids, or ids -> scores with ties, chunk
ids now and then), grades (0 to 3, some documents unjudged), a cutoff and conventions (gain, min
grade, judged only, a document id separator), and now and then an invalid value; both copies must
return the same float to the last bit, or raise the same error.  Prints the counts per measure and
the first differences; exits 1 on any difference.

    python3 tools/diff/measdiff.py --reference OLD/rag_eval.py [--cases 2000] [--seed 0]
"""

import sys

from common import Tally, api, arguments, case_random, outcome

FUNCTIONS = {"recall": "recall_at_k", "success": "success_at_k", "mrr": "reciprocal_rank", "ndcg": "ndcg_at_k",
             "precision": "precision_at_k", "ap": "ap_at_k", "judged": "judged_at_k"}
ODD = (None, [1], {"a": float("inf")}, ["a", "a"], {"a": True}, 0, -1, 1.5, "x", {"a": -1}, {"a": 1.5})


def draw(rng):
    docs = [f"d{i}" for i in range(rng.randint(0, 30))]
    sep = "#" if rng.random() < 0.2 else None
    ids = [doc + (f"#{rng.randint(0, 2)}" if sep and rng.random() < 0.5 else "") for doc in docs]
    ranking = list(dict.fromkeys(rng.sample(ids, rng.randint(0, len(ids)))))
    if rng.random() < 0.5:
        values = [rng.choice((0.0, 0.5, 1.0, -2.0, 1e300)) for _ in range(3)]
        ranking = {doc: rng.choice(values) if rng.random() < 0.4 else rng.random() for doc in ranking}
    judged = rng.sample(ids, rng.randint(0, len(ids)))
    grades = {doc: rng.choice((0, 0, 1, 1, 2, 3)) for doc in judged}
    k = rng.choice((1, 2, 3, 5, 10, 20, 100))
    conventions = {"gain": rng.choice(("exp", "linear")), "min_grade": rng.choice((1, 1, 1, 2, 3)) if rng.random() > 0.01 else 0,
                   "judged_only": rng.random() < 0.3}
    if sep:
        conventions["doc_id_sep"] = sep
    if rng.random() < 0.03:
        which = rng.choice(("ranking", "grades", "k"))
        bad = rng.choice(ODD)
        ranking, grades, k = (bad if which == "ranking" else ranking, bad if which == "grades" else grades,
                              bad if which == "k" else k)
    return ranking, grades, k, conventions


def call(module, name, case):
    ranking, grades, k, conventions = case
    copied = (dict(ranking) if isinstance(ranking, dict) else list(ranking) if isinstance(ranking, list) else ranking,
              dict(grades) if isinstance(grades, dict) else grades)
    return api(module, FUNCTIONS.get(name, name))(*copied, k, **conventions)


def main():
    args, new, reference = arguments(__doc__, 2000)
    tally = Tally(args.show)
    names = [measure.name for measure in reference.MEASURES]
    for index in range(args.cases):
        case = draw(case_random(args.seed, index))
        for name in names:
            tally.add(name, index, case, outcome(lambda: call(new, name, case)), outcome(lambda: call(reference, name, case)))
    return tally.report(args.seed)


if __name__ == "__main__":
    sys.exit(main())
