"""Empirical privacy audits: lower bounds on ε and μ from canary experiments (``bounds``) and canary
audits of the engine's mechanisms through its own code (``canaries``); docs/audits.md."""
