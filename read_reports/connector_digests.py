"""Digests of connector resources: what an engineer or a manager has to do next.

Findings are ordered reachable, then resolvable, first (a reachable, fixable critical is the
cheapest risk to remove); bands and the training rules: docs/read-flows.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from compliance_api.models import PackageVulnerability, TrainingStatus, UserSecurityTrainingStatus
from read_reports.tables import BoundedTop

SEVERITY_BANDS: tuple[tuple[str, float], ...] = (
    ("critical", 9.0),
    ("high", 7.0),
    ("medium", 4.0),
    ("low", 0.1),
)
NONE_BAND = "none"
UNKNOWN_BAND = "unknown"
BAND_ORDER = [name for name, _ in SEVERITY_BANDS] + [NONE_BAND, UNKNOWN_BAND]


def severity_of(vulnerability: PackageVulnerability) -> float | None:
    """``severity`` (0-10), falling back to the CVSS v3 score when a connector leaves it out."""
    severity = vulnerability.severity
    return severity if severity is not None else vulnerability.cvss3_score


def severity_band(score: float | None) -> str:
    if score is None:
        return UNKNOWN_BAND
    for name, floor in SEVERITY_BANDS:
        if score >= floor:
            return name
    return NONE_BAND


def _flag(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


@dataclass
class VulnerabilityDigest:
    top_n: int
    min_severity: float
    total: int = 0
    below_threshold: int = 0
    bands: Counter[str] = field(default_factory=Counter)
    matrix: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    packages: Counter[str] = field(default_factory=Counter)
    findings: BoundedTop[tuple[int, int, float, float, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.findings = BoundedTop(self.top_n)

    def add(self, vulnerability: PackageVulnerability) -> str | None:
        """Count one finding; returns its band, or None when it is below ``min_severity``."""
        self.total += 1
        score = severity_of(vulnerability)
        if score is not None and score < self.min_severity:
            self.below_threshold += 1
            return None
        band = severity_band(score)
        self.bands[band] += 1
        reachable = _flag(vulnerability.is_reachable)
        resolvable = _flag(vulnerability.is_resolvable)
        self.matrix[(band, reachable, resolvable)] += 1
        if vulnerability.package_name:
            self.packages[vulnerability.package_name] += 1
        key = (
            0 if vulnerability.is_reachable else 1,
            0 if vulnerability.is_resolvable else 1,
            -(score if score is not None else -1.0),
            -(vulnerability.cvss3_score or 0.0),
            vulnerability.unique_id,
        )
        self.findings.offer(key, lambda: self._row(vulnerability, band, score))
        return band

    @staticmethod
    def _row(vulnerability: PackageVulnerability, band: str, score: float | None) -> dict[str, Any]:
        package, version = vulnerability.package_name, vulnerability.package_version
        return {
            "severity": band,
            "score": score,
            "reachable": _flag(vulnerability.is_reachable),
            "resolvable": _flag(vulnerability.is_resolvable),
            "cve": vulnerability.cve_id or "",
            "cvss3_score": vulnerability.cvss3_score,
            "cvss3_vector": vulnerability.cvss3_vector or "",
            "package": f"{package or '?'}@{version or '?'}",
            "remediation": vulnerability.remediation_instructions or "",
            "finding": vulnerability.unique_id,
            "link": vulnerability.external_url or "",
        }

    def band_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "severity": band,
                "findings": self.bands[band],
                "reachable_and_resolvable": self.matrix[(band, "yes", "yes")],
                "reachable": sum(
                    n for (b, r, _), n in self.matrix.items() if b == band and r == "yes"
                ),
                "resolvable": sum(
                    n for (b, _, s), n in self.matrix.items() if b == band and s == "yes"
                ),
            }
            for band in BAND_ORDER
            if self.bands.get(band)
        ]

    def summary(self) -> dict[str, Any]:
        return {
            "findings": self.total,
            "below_min_severity": self.below_threshold,
            "by_severity": {band: self.bands[band] for band in BAND_ORDER if self.bands.get(band)},
            "reachable_and_resolvable": sum(
                n for (_, r, s), n in self.matrix.items() if r == "yes" and s == "yes"
            ),
            "top_packages": dict(self.packages.most_common(10)),
        }


def trainee_key(row: UserSecurityTrainingStatus) -> str:
    """Who the training belongs to: e-mail, else account name, else the display name."""
    return (
        row.trainee_email or row.trainee_account_name or row.trainee_full_name or "unknown"
    ).lower()


@dataclass
class TraineeCounts:
    name: str
    email: str | None
    account: str | None
    assigned: int = 0
    incomplete: int = 0
    overdue: int = 0
    overdue_trainings: list[dict[str, Any]] = field(default_factory=list)
    frameworks_at_risk: set[str] = field(default_factory=set)

    def identity(self) -> dict[str, Any]:
        return {"name": self.name, "email": self.email, "account": self.account}


#: overdue trainings listed per trainee (in artifacts and events); the count covers all
MAX_LISTED_PER_TRAINEE = 20


@dataclass
class TrainingDigest:
    as_of: datetime
    frameworks: frozenset[str] | None = None
    total: int = 0
    trainees: dict[str, TraineeCounts] = field(default_factory=dict)
    by_framework: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, row: UserSecurityTrainingStatus) -> bool:
        """Count one assignment; returns True when it is overdue."""
        frameworks = [str(f) for f in row.frameworks_fulfilled] or ["(none)"]
        if self.frameworks is not None and not self.frameworks.intersection(frameworks):
            return False
        self.total += 1
        complete = row.status == TrainingStatus.COMPLETE
        due = row.training_due_timestamp
        overdue = not complete and due is not None and due < self.as_of
        key = trainee_key(row)
        trainee = self.trainees.get(key)
        if trainee is None:
            trainee = self.trainees[key] = TraineeCounts(
                row.trainee_full_name or key, row.trainee_email, row.trainee_account_name
            )
        trainee.assigned += 1
        trainee.incomplete += not complete
        trainee.overdue += overdue
        if overdue:
            trainee.frameworks_at_risk.update(frameworks)
            if len(trainee.overdue_trainings) < MAX_LISTED_PER_TRAINEE:
                trainee.overdue_trainings.append(
                    {
                        "training": row.training_name or row.training_id,
                        "due": due.isoformat() if due else None,
                        "days_overdue": (self.as_of - due).days if due else None,
                        "frameworks": frameworks,
                        "link": row.external_url,
                    }
                )
        for framework in frameworks:
            counts = self.by_framework.setdefault(framework, Counter())
            counts["assigned"] += 1
            counts["incomplete"] += not complete
            counts["overdue"] += overdue
        return overdue

    def trainee_rows(self, limit: int) -> list[dict[str, Any]]:
        needing = [t for t in self.trainees.values() if t.incomplete]
        needing.sort(key=lambda t: (-t.overdue, -t.incomplete, t.name))
        return [
            {
                "trainee": t.name,
                "email": t.email or "",
                "assigned": t.assigned,
                "incomplete": t.incomplete,
                "overdue": t.overdue,
                "overdue_trainings": ", ".join(
                    str(item["training"]) for item in t.overdue_trainings
                ),
                "frameworks_at_risk": ", ".join(sorted(t.frameworks_at_risk)),
            }
            for t in needing[:limit]
        ]

    def framework_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "framework": framework,
                "assigned": counts["assigned"],
                "incomplete": counts["incomplete"],
                "overdue": counts["overdue"],
            }
            for framework, counts in sorted(
                self.by_framework.items(), key=lambda item: (-item[1]["overdue"], item[0])
            )
        ]

    def overdue_trainees(self) -> list[tuple[str, TraineeCounts]]:
        return [(key, t) for key, t in self.trainees.items() if t.overdue]

    def summary(self) -> dict[str, Any]:
        return {
            "assignments": self.total,
            "trainees": len(self.trainees),
            "incomplete": sum(t.incomplete for t in self.trainees.values()),
            "overdue": sum(t.overdue for t in self.trainees.values()),
            "trainees_overdue": sum(1 for t in self.trainees.values() if t.overdue),
            "by_framework": {
                framework: dict(counts) for framework, counts in sorted(self.by_framework.items())
            },
        }
