"""Rebuild this example: the corpus chunked at 200 and 400 characters, evidence labels, a run per chunking.

    python3 examples/rechunking/make_example.py

The retriever is a toy (distinct query words a chunk holds, per square root of
its length), deterministic, so the files are the same on every machine.
"""

import json
import math
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))

DOCUMENTS = {
    "refunds": (
        "Refunds. You can ask for a refund within 30 days of purchase. Open the billing page, choose the order "
        "and press Request refund. Annual plans are refunded in full during the first 30 days; after that, the "
        "unused months are refunded pro rata. Monthly plans are not refunded after the first 30 days, but you can "
        "cancel at any time and keep access until the end of the month. Refunds go back to the card that paid, "
        "usually within 5 to 10 business days. Purchases made through a reseller are refunded by the reseller. "
        "If a refund is refused, support explains why in writing and you may appeal once."
    ),
    "uptime": (
        "Service levels. We commit to 99.9% monthly uptime for the API and the dashboard. Uptime is measured "
        "every minute from three regions; a minute counts as down when two regions cannot reach the service. "
        "Planned maintenance is announced 72 hours ahead on the status page and does not count as downtime. "
        "When uptime falls below 99.9%, customers on annual plans receive a credit of 10% of the monthly fee for "
        "each full 0.1% below the target, up to 50%. Credits must be claimed within 30 days through support. "
        "The status page keeps the history of incidents for one year."
    ),
    "sso": (
        "Single sign-on. Administrators can connect an identity provider through SAML 2.0 or OpenID Connect. "
        "In the admin console, open Security, choose Single sign-on and paste the metadata URL of the provider. "
        "Users are created on their first login when just-in-time provisioning is on; otherwise invite them "
        "first. Okta and Azure AD are tested; other providers that follow the standards work too. Enforcing "
        "single sign-on disables password login for everyone except the owner account, so that a broken "
        "provider never locks the company out. SCIM provisioning keeps groups in sync and removes users who "
        "leave the company within an hour."
    ),
    "pricing": (
        "Pricing. The Team plan costs 12 euros per user per month, billed monthly, or 10 euros billed yearly. "
        "The Business plan adds single sign-on, audit logs and priority support for 24 euros per user per month. "
        "Enterprise prices are quoted on request and include a dedicated support engineer. Prices exclude VAT, "
        "which is added at checkout for customers in the European Union. Seats can be added at any time and are "
        "charged pro rata for the rest of the billing period; removed seats are credited at the next renewal. "
        "Nonprofits and schools get 50% off any plan."
    ),
}

QUERIES = {  # query -> (its words for the toy retriever, the evidence it needs: (document, quoted text, grade))
    "q1": ("how long do refunds take to reach my card", [
        ("refunds", "Refunds go back to the card that paid, usually within 5 to 10 business days.", 2)]),
    "q2": ("refund annual plan after 30 days", [
        ("refunds", "Annual plans are refunded in full during the first 30 days; after that, the unused months "
                    "are refunded pro rata.", 2),
        ("refunds", "You can ask for a refund within 30 days of purchase.", 1)]),
    "q3": ("uptime credit when below target", [
        ("uptime", "When uptime falls below 99.9%, customers on annual plans receive a credit of 10% of the "
                   "monthly fee for each full 0.1% below the target, up to 50%.", 2),
        ("uptime", "Credits must be claimed within 30 days through support.", 1)]),
    "q4": ("does maintenance count as downtime", [
        ("uptime", "Planned maintenance is announced 72 hours ahead on the status page and does not count as "
                   "downtime.", 2)]),
    "q5": ("which plan includes single sign-on and what does it cost", [
        ("pricing", "The Business plan adds single sign-on, audit logs and priority support for 24 euros per "
                    "user per month.", 2)]),
    "q6": ("enforcing single sign-on password login owner", [
        ("sso", "Enforcing single sign-on disables password login for everyone except the owner account, so that "
                "a broken provider never locks the company out.", 2)]),
}


def words(text):
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def chunks_of(size):
    """Each document cut every ``size`` characters, at the last space before the cut."""
    found = []
    for doc, text in DOCUMENTS.items():
        start, number = 0, 1
        while start < len(text):
            end = len(text) if len(text) - start <= size else text.rindex(" ", start, start + size) + 1
            found.append({"chunk_id": f"{doc}#{size}-{number}", "doc_id": doc, "start": start, "end": end})
            start, number = end, number + 1
    return found


def ranked(query, chunks, depth=5):
    scored = []
    for chunk in chunks:
        text = DOCUMENTS[chunk["doc_id"]][chunk["start"]:chunk["end"]]
        scored.append((len(words(query) & words(text)) / math.sqrt(len(text)), chunk))
    scored.sort(key=lambda pair: (-pair[0], pair[1]["chunk_id"]))
    return scored[:depth]


def write_jsonl(name, rows):
    with open(os.path.join(HERE, name), "w", encoding="utf-8", newline="\n") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)


def main():
    write_jsonl("corpus.jsonl", [{"doc_id": doc, "text": text} for doc, text in DOCUMENTS.items()])
    labels = []
    for qid, (_, evidence) in QUERIES.items():
        for doc, quote, grade in evidence:
            start = DOCUMENTS[doc].index(quote)
            labels.append({"query_id": qid, "doc_id": doc, "start": start, "end": start + len(quote),
                           "grade": grade, "text": quote})
    write_jsonl("qrels.spans.jsonl", labels)
    for size in (200, 400):
        chunks = chunks_of(size)
        write_jsonl(f"chunks{size}.jsonl", chunks)
        if size == 200:  # labels as a team had them before: chunk ids, each chunk holding a quote at its best grade
            best = {}
            for row in labels:
                for chunk in chunks:
                    if chunk["doc_id"] == row["doc_id"] and chunk["start"] <= row["start"] < chunk["end"]:
                        key = (row["query_id"], chunk["chunk_id"])
                        best[key] = max(row["grade"], best.get(key, 0))
            write_jsonl("qrels.chunks200.jsonl", [{"query_id": qid, "doc_id": chunk, "grade": grade}
                                                  for (qid, chunk), grade in best.items()])
        write_jsonl(f"run{size}.jsonl", [{"query_id": qid, "doc_id": chunk["chunk_id"], "score": round(score, 6)}
                                         for qid, (query, _) in QUERIES.items() for score, chunk in ranked(query, chunks)])


if __name__ == "__main__":
    main()
