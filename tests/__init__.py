"""The tests of rag_eval, a module per part of the product: run ``python3 -m unittest`` from the root."""
