"""colabhive-mcp: the ColabHive Builder Gateway as Model Context Protocol tools.

The house's own words, as the code uses them:

- **era**: which kind of MCP a message speaks. *Legacy* (2024-11-05 … 2025-11-25) opens with the
  ``initialize`` handshake and lives in a session; *modern* (2026-07-28) carries its revision and
  the client's capabilities in every request's ``_meta`` (:mod:`.protocol.envelope`).
- **tenant**: one API key's server-side state (its gateway session, manifest, limits); hosted mode
  keeps them in a pool keyed by the key's digest (:mod:`.tenants.tenant`, :mod:`.tenants.pool`).
- **binding**: 128 bits derived from a key that signed tokens (session ids, task ids,
  confirmations) carry, so a token works only with the key it was issued for (:mod:`.keys`).
- **place**: a worker thread a request may hold for long (a tool call, a stream, a wait), within
  the worker's budget and the key's fair share (:mod:`.transports.http.admission`).
- **held**: said of a request that keeps its place for as long as its client likes (a listen, a
  notification stream, ``tasks/result``), as opposed to one that ends with its work.
- **lease**: what a request holds while it is served (its tenant, its place), given back once, when
  its handler and whatever still serves its answer (a stream, its thread) have let go
  (:mod:`.transports.http.lease`).
- **instance**: the processes that share one runtime directory (gunicorn's workers); what they must
  agree on is in the instance store (:mod:`.store`).
"""

__version__ = "1.0.0"
