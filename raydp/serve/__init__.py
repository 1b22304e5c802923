"""``raydp serve``: a curator's service that releases on private data sets and keeps their budgets.

A curator holds the private data and the budget; analysts ask over HTTP and get noisy answers. The service
is one process (``raydp serve DIR``) with all its state in DIR: an SQLite database (:mod:`raydp.serve.db`, the
one module that owns every table and query) and the Δ̂ stores it samples (``DIR/stores``). It binds 127.0.0.1
only, refuses to start where the private evaluation cannot be sandboxed (unless told), hides DIR and the data
sets' files from every sandbox, and answers every release at a deadline the curator sets.

* :mod:`raydp.serve.db` — tables, exact budgets (the ledger's rules), request ids, the hash-chained audit log;
* :mod:`raydp.serve.service` — what a request does: the allow-listed target or estimator, Δ̂ found or sampled,
  the reservation, :func:`raydp.release.respond`, the settlement;
* :mod:`raydp.serve.app` — the HTTP JSON API (FastAPI; OpenAPI at ``/v1/openapi.json``);
* :mod:`raydp.serve.commands` — ``raydp serve``, ``raydp admin ...``, ``raydp remote ...``.

The clients' side is :mod:`raydp.client` (the standard library only). FastAPI, uvicorn and SQLAlchemy come
with the ``[serve]`` extra and are imported only by the service itself.
"""
