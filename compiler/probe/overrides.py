"""Per-family overrides: small declarative patches for what rendering cannot reveal.

Each file in `family_overrides/` names the templates it applies to (by sha256, so a new
template revision is probed afresh, not patched blindly), says why rendering cannot show
the fact (`why`) and where the fact comes from instead (`source`, when it is not the
template's own text), and holds a patch that is merged over the derived spec (objects
merge key by key; any other value replaces). The spec lists the overrides applied.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from ..spec import ProtocolSpec

OVERRIDES_DIR = Path(__file__).resolve().parent / "family_overrides"


@lru_cache(maxsize=1)
def load_overrides() -> tuple[dict, ...]:
    found = []
    for path in sorted(OVERRIDES_DIR.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["file"] = path.name
        found.append(data)
    return tuple(found)


def _merge(base, patch):
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _merge(base.get(key), value)
        return merged
    return patch


def apply_overrides(spec: ProtocolSpec) -> ProtocolSpec:
    for override in load_overrides():
        if spec.template_sha256 not in override["template_sha256"]:
            continue
        data = _merge(spec.to_dict(), override["patch"])
        source = f" (source: {override['source']})" if override.get("source") else ""
        data["overrides"] = list(spec.overrides) + [f"{override['file']}: {override['why']}{source}"]
        spec = ProtocolSpec.from_dict(data)
    return spec
