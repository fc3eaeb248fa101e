"""Bundled transformers config.json files (shapes only; no weights)."""
