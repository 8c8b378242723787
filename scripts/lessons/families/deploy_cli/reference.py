"""Reference answers for the deploy_cli family (Ferrymoor Systems' ferryctl and Deploy API).

House conventions: every ferryctl call passes --region explicitly, with the service's region from the
registry (CI runners have no profile to default from); any ferryctl command that changes a prod service
is run with --dry-run first; the Deploy API takes the token in an `X-Deploy-Token` header.
The naive answer omits --region and --dry-run and sends the token as `Authorization: Bearer`.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

API = "https://deploy.ferrymoor.io/v2"


def _services(data_dir: Path) -> dict[str, dict[str, str]]:
    """The tiny YAML registry: a list of flat mappings under `services:`."""
    services: list[dict[str, str]] = []
    for line in (data_dir / "ferrymoor_services.yaml").read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped == "services:":
            continue
        if stripped.startswith("- "):
            services.append({})
            stripped = stripped[2:]
        key, _, value = stripped.partition(":")
        services[-1][key.strip()] = value.strip()
    return {s["name"]: s for s in services}


def _plan(data_dir: Path) -> dict[str, dict[str, str]]:
    with open(data_dir / "ferrymoor_release_plan_2024-07.csv", newline="", encoding="utf-8") as fh:
        return {r["service"]: r for r in csv.DictReader(fh)}


def _ferryctl(verb: str, service: dict[str, str], flags: dict[str, str | None], naive: bool) -> str:
    flags = dict(flags)
    if not naive:
        flags["--region"] = service["region"]
        if service["env"] == "prod" and verb in {"push", "scale", "rollback"}:
            flags["--dry-run"] = None
    parts = ["ferryctl", verb]
    for flag in sorted(flags):
        parts.append(flag if flags[flag] is None else f"{flag} {flags[flag]}")
    parts.append(service["name"])
    return " ".join(" ".join(parts).split())


def _curl(method: str, service: dict[str, str], endpoint: str, naive: bool) -> str:
    header = "Authorization: Bearer $FERRY_TOKEN" if naive else "X-Deploy-Token: $FERRY_TOKEN"
    parts = ["curl"] + ([] if method == "GET" else ["-X", method]) + ["-H", f'"{header}"']
    parts.append(f"{API}/services/{service['id']}/{endpoint}")
    return " ".join(parts)


def solve(task_id: str, data_dir: Path, naive: bool = False) -> dict[str, Any]:
    services, plan = _services(data_dir), _plan(data_dir)
    if task_id == "dc-1":
        name = "search-indexer"
        return {"command": _ferryctl("scale", services[name], {"--replicas": plan[name]["replicas"]}, naive)}
    if task_id == "dc-2":
        return {"command": _curl("GET", services["ledger-api"], "status", naive)}
    if task_id == "dc-3":
        name = "ledger-api"
        return {"command": _ferryctl("push", services[name], {"--tag": plan[name]["new_tag"]}, naive)}
    if task_id == "dc-4":
        return {"command": _curl("POST", services["billing-gateway"], "rollback", naive)}
    if task_id == "dc-5":
        name = "checkout-web"
        return {"command": _ferryctl("scale", services[name], {"--replicas": plan[name]["replicas"]}, naive)}
    raise KeyError(task_id)
