"""Small helpers shared across the package, one module per job: argument validation
(:mod:`.validation`), atomic file writes (:mod:`.io`), generation lengths against a position table
(:mod:`.generation`) and label conventions (:mod:`.labels`:
``IGNORE_INDEX`` and BIO tag decoding). Each imports only the standard library (and numpy), so
the remote-code bundle can copy them next to a model."""
