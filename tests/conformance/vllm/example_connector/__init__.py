"""Out-of-tree example connectors for ``record.py --connector-class`` (docs/conformance.md,
"Test generation for connector implementations"). Not vLLM code: small classes of our own
that vLLM's ``KVConnectorFactory`` loads by class path, as it would a team's connector."""
