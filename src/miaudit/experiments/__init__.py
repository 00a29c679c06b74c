"""The papers' studies as code, and the packaged run configs (configs/*.yaml)."""
