"""``python -m miaudit.external.audit_spec_docs [PATH]``: writes the reference of both
configs (`miaudit run`'s and `miaudit audit`'s) to ``docs/config-reference.md`` (or PATH),
generated from their models' descriptions (:mod:`miaudit.config.reference`). Here, not in
:mod:`miaudit.config`, because the audit's config is of this higher layer."""

from __future__ import annotations

import sys
from pathlib import Path

from miaudit.config.reference import reference
from miaudit.config.run import RunConfig
from miaudit.external.audit_spec import AuditConfig

DEFAULT_PATH = Path("docs") / "config-reference.md"


def config_reference() -> str:
    """The Markdown reference of both configs."""
    return reference({"miaudit run (RunConfig, config.yaml)": RunConfig,
                      "miaudit audit (AuditConfig, audit.yaml)": AuditConfig})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else DEFAULT_PATH
    path.write_text(config_reference(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
