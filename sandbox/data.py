"""The tenant's data, seeded deterministically from ``random.Random(seed)``.

Two parts, so that ``POST /_sandbox/reset`` is cheap even at ``--scale 200``:

* static, built once: people, the audit-log history, knowledge base, answer library,
  discovered vendors, connector resources, tag categories. Later additions (injected events,
  new audit entries) are appended, and reset truncates back to the seeded lengths.
* mutable, rebuilt on every reset from its own generator: groups' members, questionnaires,
  customer-trust accounts, documents and their links, managed vendors.

Every list keeps insertion order; cursors are positions in these lists, so they stay valid
when items are appended.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sandbox import vocabulary as words
from sandbox.times import DAY_MS, iso, to_ms

T = TypeVar("T")


# Questionnaire statuses (§3); the seeded mix leans towards the ones flows act on.
QUESTIONNAIRE_STATUSES = (
    "APPROVED",
    "IN_PROGRESS",
    "IN_REVIEW",
    "READY_FOR_REVIEW",
    "WAITING_ON_ANSWERS",
    "ON_HOLD",
    "NO_LONGER_NEEDED",
    "COMPLETE",
    "ERROR",
    "EXTRACTING_QUESTIONS",
    "QUEUED_FOR_EXTRACTION",
    "PROCESSING",
    "QUEUED_FOR_PROCESSING",
    "WAITING_ON_COLUMN_SELECTION",
    "WAITING_ON_COLUMN_APPROVAL",
    "QUEUED_FOR_COLUMN_DETECTION",
    "DETECTING_COLUMNS",
)
SETTABLE_STATUSES = (
    "IN_PROGRESS",
    "IN_REVIEW",
    "READY_FOR_REVIEW",
    "WAITING_ON_ANSWERS",
    "ON_HOLD",
    "NO_LONGER_NEEDED",
)
# Values of the tag-category list's ``productContextIdsMatchesAny`` (published schema).
PRODUCT_CONTEXTS = (
    "EXTERNAL_TRUST_CENTER",
    "DOCUMENT_SHARING",
    "CONTROL_SHARING",
    "QUESTIONNAIRE",
)
_SEEDED_STATUS_WEIGHTS = {
    "READY_FOR_REVIEW": 8,
    "IN_PROGRESS": 8,
    "IN_REVIEW": 5,
    "WAITING_ON_ANSWERS": 4,
    "APPROVED": 4,
    "COMPLETE": 3,
    "ON_HOLD": 2,
    "NO_LONGER_NEEDED": 1,
    "PROCESSING": 1,
    "QUEUED_FOR_EXTRACTION": 1,
    "ERROR": 1,
}


def _pick(rng: random.Random, seq: Sequence[T]) -> T:
    """``rng.choice`` without its overhead (seeding 100,000 items calls it a lot)."""
    return seq[int(rng.random() * len(seq))]


def _below(rng: random.Random, n: int) -> int:
    return int(rng.random() * n)


@dataclass(slots=True)
class KbItem:
    """A knowledge-base resource or answer-library entry plus the fields filters read."""

    doc: dict[str, Any]
    updated: int  # epoch milliseconds
    expires: int | None
    text: str  # lower-cased searchable text
    tags: frozenset[tuple[str, str]]


class Dataset:
    """One tenant's data. ``scale`` multiplies every count (see the README)."""

    def __init__(self, seed: int, scale: int, anchor: float) -> None:
        self.seed = seed
        self.scale = max(1, scale)
        self.anchor = to_ms(anchor) // 1000 * 1000
        self._ids = random.Random(f"ids-{seed}")
        self._build_static(random.Random(seed))
        self._seeded_lengths = self._lengths()
        self.reset()

    # ----------------------------------------------------------------- identifiers
    def new_id(self) -> str:
        """A 24-hex-digit id like the real service's; deterministic per seed and call order."""
        return f"{self._ids.getrandbits(96):024x}"

    # ----------------------------------------------------------------- static part
    def _build_static(self, rng: random.Random) -> None:
        n = self.scale
        self._build_tags(rng)
        self._build_people(rng, 500 * n)
        self.group_list = [
            {
                "id": self._rid(rng),
                "name": f"{words.GROUP_NAMES[i % len(words.GROUP_NAMES)]} {i + 1}",
            }
            for i in range(5 * n)
        ]
        self.groups = {group["id"]: group for group in self.group_list}
        self._build_discovered_vendors(rng, 50 * n)
        self.kb = [self._kb_item(rng, i) for i in range(300 * n)]
        self.kb_index = {item.doc["id"]: i for i, item in enumerate(self.kb)}
        self.answers = [self._answer_item(rng, i) for i in range(200 * n)]
        self.account_ids = [self._rid(rng) for _ in range(20 * n)]
        self.document_list = [
            {
                "id": self._rid(rng),
                "title": f"{words.KB_TOPICS[i % len(words.KB_TOPICS)]} evidence {i + 1}",
            }
            for i in range(20 * n)
        ]
        self.documents = {doc["id"]: doc for doc in self.document_list}
        self.questionnaire_ids = [self._rid(rng) for _ in range(50 * n)]
        self._build_connector_resources(rng)
        self._build_history(rng, 500 * n)

    def _at(self, days: float) -> int:
        """Milliseconds ``days`` after the anchor (negative: before)."""
        return self.anchor + int(days * DAY_MS)

    @staticmethod
    def _rid(rng: random.Random) -> str:
        return f"{rng.getrandbits(96):024x}"

    def _build_tags(self, rng: random.Random) -> None:
        self.tag_categories: list[dict[str, str]] = []
        self.tags: dict[str, list[dict[str, str]]] = {}
        self.tag_category_of: dict[str, str] = {}
        # Kept beside the category (the response shape has no field for it).
        self.tag_category_contexts: dict[str, frozenset[str]] = {}
        for name, tag_names in words.TAG_CATEGORIES:
            category = {"id": self._rid(rng), "displayName": name}
            self.tag_categories.append(category)
            self.tag_category_contexts[category["id"]] = frozenset(
                words.TAG_CATEGORY_CONTEXTS[name]
            )
            self.tags[category["id"]] = []
            for tag_name in tag_names:
                tag = {"id": self._rid(rng), "category": category["id"], "displayName": tag_name}
                self.tags[category["id"]].append(tag)
                self.tag_category_of[tag["id"]] = category["id"]
        self.tag_pairs = [(cat_id, tag["id"]) for cat_id, tags in self.tags.items() for tag in tags]

    def _build_people(self, rng: random.Random, count: int) -> None:
        first, last = words.FIRST_NAMES, words.LAST_NAMES
        self.people: list[dict[str, str]] = []
        for i in range(count):
            given, family = _pick(rng, first), _pick(rng, last)
            self.people.append(
                {
                    "id": self._rid(rng),
                    "displayName": f"{given} {family}",
                    "email": f"{given.lower()}.{family.lower()}{i}@example.com",
                }
            )
        self.people_index = {person["id"]: i for i, person in enumerate(self.people)}

    def person_actor(self, rng: random.Random) -> dict[str, Any]:
        person = self.people[_below(rng, min(len(self.people), 500))]
        return {"type": "User", "id": person["id"], "displayName": person["displayName"]}

    def _company(self, rng: random.Random, i: int) -> str:
        word = _pick(rng, words.COMPANY_WORDS)
        suffix = _pick(rng, words.COMPANY_SUFFIXES)
        return f"{word} {suffix} {i + 1}"

    def _build_discovered_vendors(self, rng: random.Random, count: int) -> None:
        self.discovered: list[dict[str, Any]] = []
        for i in range(count):
            self.discovered.append(self.make_discovered_vendor(self._company(rng, i), rng))
        self.discovered_index = {v["id"]: i for i, v in enumerate(self.discovered)}

    def make_discovered_vendor(self, name: str, rng: random.Random) -> dict[str, Any]:
        slug = name.lower().replace(" ", "-")
        return {
            "id": self._rid(rng),
            "name": name,
            "websiteUrl": f"https://{slug}.example.com",
            "source": _pick(rng, ("GOOGLE_WORKSPACE", "OKTA", "EXPENSES", "BROWSER_EXTENSION")),
            "discoveredDate": iso(self._at(-rng.uniform(1, 60))),
        }

    def _random_tags(self, rng: random.Random, most: int) -> list[dict[str, str]]:
        chosen = {_pick(rng, self.tag_pairs) for _ in range(_below(rng, most + 1))}
        return [{"categoryId": c, "tagId": t} for c, t in sorted(chosen)]

    def _kb_item(self, rng: random.Random, i: int) -> KbItem:
        kind = "FILE" if rng.random() < 0.6 else "URL"
        topic = _pick(rng, words.KB_TOPICS)
        title = f"{topic} {2020 + i % 6}" + (f" ({i // len(words.KB_TOPICS)})" if i >= 20 else "")
        updated = self._at(-rng.uniform(1, 400))
        roll = rng.random()
        if roll < 0.15:
            expires = None
        elif roll < 0.25:
            expires = self._at(-rng.uniform(1, 60))
        elif roll < 0.40:
            expires = self._at(rng.uniform(1, 30))
        else:
            expires = self._at(rng.uniform(31, 365))
        visibility = _pick(rng, ("PUBLIC", "REQUEST_ACCESS", "SHAREABLE", "PRIVATE", None))
        tags = self._random_tags(rng, 3)
        rid = self._rid(rng)
        doc: dict[str, Any] = {"id": rid, "type": kind, "title": title}
        doc["description"] = (
            None if rng.random() < 0.1 else f"{topic} kept current by the security team."
        )
        if kind == "FILE":
            doc["fileUrl"] = (
                f"https://files.sandbox.invalid/kb/{rid}.pdf?X-Signature=fake&X-Expires=3600"
            )
        else:
            doc["url"] = f"https://trust.example.com/docs/{rid}"
            doc["includeSubPages"] = rng.random() < 0.3
        doc["customerVisibility"] = visibility
        if kind == "FILE":
            doc["downloadPermission"] = _pick(rng, ("VIEW_AND_DOWNLOAD", "VIEW_ONLY", None))
        doc["isUsedInQuestionnaires"] = rng.random() < 0.5
        doc["ownerAssignment"] = None if rng.random() < 0.1 else self.person_actor(rng)
        doc["expirationDate"] = None if expires is None else iso(expires)
        doc["lastUpdated"] = iso(updated)
        doc["lastVerified"] = (
            None if rng.random() < 0.2 else iso(updated + int(rng.uniform(0, 1) * DAY_MS))
        )
        doc["tags"] = tags
        on_trust_center = visibility in ("PUBLIC", "REQUEST_ACCESS")
        doc["categoryId"] = f"tc-category-{1 + _below(rng, 5)}" if on_trust_center else None
        return KbItem(
            doc,
            updated,
            expires,
            title.lower(),
            frozenset((t["categoryId"], t["tagId"]) for t in tags),
        )

    def _answer_item(self, rng: random.Random, i: int) -> KbItem:
        question, answer = _pick(rng, words.QUESTIONS)
        if i >= len(words.QUESTIONS):
            question = f"{question} (variant {i})"
        updated = self._at(-rng.uniform(1, 400))
        expires = None if rng.random() < 0.2 else self._at(rng.uniform(-60, 365))
        tags = self._random_tags(rng, 2)
        doc = {
            "id": self._rid(rng),
            "question": question,
            "answer": answer,
            "ownerAssignment": None if rng.random() < 0.1 else self.person_actor(rng),
            "expirationDate": None if expires is None else iso(expires),
            "lastUpdated": iso(updated),
            "lastVerified": None if rng.random() < 0.2 else iso(updated),
            "tags": tags,
        }
        text = f"{question}\n{answer}".lower()
        return KbItem(
            doc, updated, expires, text, frozenset((t["categoryId"], t["tagId"]) for t in tags)
        )

    def _build_connector_resources(self, rng: random.Random) -> None:
        self.package_vulnerabilities: dict[str, list[dict[str, Any]]] = {}
        self.security_training: dict[str, list[dict[str, Any]]] = {}
        for r in range(3):
            rows = []
            for i in range(25):
                package = _pick(rng, words.PACKAGES)
                score = round(rng.uniform(1.0, 10.0), 1)
                cve = f"CVE-20{rng.randint(18, 25)}-{rng.randint(1000, 49999)}"
                uid = f"vuln-{r}-{i}"
                version = f"{rng.randint(0, 5)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
                rows.append(
                    {
                        "displayName": f"{cve} in {package}",
                        "uniqueId": uid,
                        "externalUrl": f"https://scanner.example.com/findings/{uid}",
                        "packageName": package,
                        "packageVersion": version,
                        "severity": score,
                        "vulnerableComponentUniqueId": f"component-{r}-{i % 7}",
                        "description": f"{cve}: a vulnerability in {package}.",
                        "isResolvable": rng.random() < 0.7,
                        "remediationInstructions": f"Upgrade {package} to a fixed release.",
                        "isReachable": rng.random() < 0.4,
                        "cveId": cve,
                        "cvss3Vector": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
                        "cvss3Score": score,
                    }
                )
            self.package_vulnerabilities[self._rid(rng)] = rows
        for r in range(3):
            rows = []
            for i in range(25):
                person = self.people[_below(rng, min(500, len(self.people)))]
                training, frameworks = _pick(rng, words.TRAININGS)
                created = self._at(-rng.uniform(30, 120))
                complete = rng.random() < 0.6
                row: dict[str, Any] = {
                    "displayName": f"{training}: {person['displayName']}",
                    "uniqueId": f"training-{r}-{i}",
                    "externalUrl": f"https://lms.example.com/assignments/{r}-{i}",
                    "trainingId": f"training-{words.TRAININGS.index((training, frameworks))}",
                    "trainingName": training,
                    "frameworksFulfilled": list(frameworks),
                    "traineeFullName": person["displayName"],
                    "traineeAccountName": person["email"].split("@")[0],
                    "traineeEmail": person["email"],
                    "status": "COMPLETE" if complete else "INCOMPLETE",
                    "trainingCreatedTimestamp": iso(created),
                    "trainingDueTimestamp": iso(created + 30 * DAY_MS),
                }
                if complete:
                    row["trainingCompletedTimestamp"] = iso(
                        created + int(rng.uniform(1, 29) * DAY_MS)
                    )
                rows.append(row)
            self.security_training[self._rid(rng)] = rows

    def _build_history(self, rng: random.Random, count: int) -> None:
        """Audit history spread over the 90 days before start, oldest first."""
        self.events: list[dict[str, Any]] = []
        self.event_ts: list[int] = []
        start = self.anchor - 90 * DAY_MS
        step = (90 * DAY_MS - 60_000) / max(count, 1)
        targets_by_type = {
            "User": self.people,
            "Person": self.people,
            "Group": self.group_list,
            "Document": self.document_list,
            "DiscoveredVendor": self.discovered,
        }
        actions = words.AUDIT_HISTORY_ACTIONS
        for i in range(count):
            ts = start + int(i * step + rng.random() * step)
            action, target_type = _pick(rng, actions)
            pool = targets_by_type.get(target_type)
            target_id = _pick(rng, pool)["id"] if pool else self._rid(rng)
            actor = self.people[_below(rng, min(500, len(self.people)))]["id"]
            self.events.append(
                {
                    "id": self._rid(rng),
                    "actor": {"id": actor, "type": "USER"},
                    "date": iso(ts),
                    "action": action,
                    "targets": [{"id": target_id, "type": target_type}],
                }
            )
            self.event_ts.append(ts)

    def _lengths(self) -> dict[str, int]:
        return {
            "people": len(self.people),
            "events": len(self.events),
            "discovered": len(self.discovered),
        }

    # ----------------------------------------------------------------- mutable part
    def reset(self) -> None:
        """Back to the seeded state: truncate appended static lists, rebuild the mutable part."""
        lengths = self._seeded_lengths
        for person in self.people[lengths["people"] :]:
            del self.people_index[person["id"]]
        del self.people[lengths["people"] :]
        del self.events[lengths["events"] :]
        del self.event_ts[lengths["events"] :]
        for vendor in self.discovered[lengths["discovered"] :]:
            del self.discovered_index[vendor["id"]]
        del self.discovered[lengths["discovered"] :]
        for index, original in getattr(self, "_kb_replaced", {}).items():
            self.kb[index] = original
        self._kb_replaced: dict[int, KbItem] = {}
        self._ids = random.Random(f"ids-{self.seed}")
        rng = random.Random(self.seed + 1)
        sample_pool = self.people[: min(len(self.people), 500)]
        self.members: dict[str, set[str]] = {
            group["id"]: {p["id"] for p in rng.sample(sample_pool, min(40, len(sample_pool)))}
            for group in self.group_list
        }
        self.accounts = {aid: self._account(rng, aid, i) for i, aid in enumerate(self.account_ids)}
        self.questionnaire_order = list(self.questionnaire_ids)
        self.questionnaires = {
            qid: self._questionnaire(rng, qid, i) for i, qid in enumerate(self.questionnaire_ids)
        }
        self.links: dict[str, list[dict[str, Any]]] = {doc["id"]: [] for doc in self.document_list}
        self.managed: dict[str, dict[str, Any]] = {}

    def _account(self, rng: random.Random, account_id: str, i: int) -> dict[str, Any]:
        name = self._company(rng, i)
        created = self._at(-rng.uniform(30, 700))
        nda = _pick(rng, ("SIGNED", "NOT_REQUIRED", "INCOMPLETE"))
        by_category: dict[str, list[str]] = {}
        for cat_id, tag_id in rng.sample(self.tag_pairs, rng.randint(0, 3)):
            by_category.setdefault(cat_id, []).append(tag_id)
        return {
            "id": account_id,
            "name": name,
            "emailDomain": name.split(" ")[0].lower() + f"{i}.example.com",
            "createdDate": iso(created),
            "updatedDate": iso(created + int(rng.uniform(0, 25) * DAY_MS)),
            "ndaDetails": {
                "ndaStatus": nda,
                "ndaSatisfiedDate": iso(created + DAY_MS) if nda == "SIGNED" else None,
            },
            "accessConfig": None
            if rng.random() < 0.1
            else {
                "autoApprovalEnabled": rng.random() < 0.5,
                "grantAccessOption": rng.choice(
                    ("INCLUDE_EVERYTHING_REQUESTED", "INCLUDE_ONLY_CONFIGURED", None)
                ),
            },
            "customFields": [{"label": "Segment", "value": _pick(rng, ("Enterprise", "SMB"))}],
            "tagsByCategory": [{"categoryId": c, "tagIds": t} for c, t in by_category.items()],
        }

    def _questionnaire(self, rng: random.Random, qid: str, i: int) -> dict[str, Any]:
        statuses = list(_SEEDED_STATUS_WEIGHTS)
        status = rng.choices(statuses, weights=list(_SEEDED_STATUS_WEIGHTS.values()))[0]
        created = self._at(-rng.uniform(5, 120))
        updated = created + int(rng.uniform(0, 4) * DAY_MS)
        person = self.people[_below(rng, min(500, len(self.people)))]
        updater = {
            "id": person["id"],
            "displayName": person["displayName"],
            "email": person["email"],
        }
        log = [{"updatedBy": updater, "updatedAt": iso(updated), "status": status, "message": None}]
        if status != "IN_PROGRESS":
            log.append(
                {
                    "updatedBy": updater,
                    "updatedAt": iso(created),
                    "status": "IN_PROGRESS",
                    "message": None,
                }
            )
        doc: dict[str, Any] = {
            "id": qid,
            "displayName": f"Security review: {self._company(rng, i)}",
            "type": _pick(rng, ("SPREADSHEET", "WEBSITE", "DOCUMENT")),
            "status": status,
            "statusLog": log,
            "tagAndCategoryIds": self._random_tags(rng, 2),
            "createdDate": iso(created),
            "updatedDate": iso(updated),
        }
        if doc["type"] == "WEBSITE":
            doc["url"] = f"https://portal.example.com/questionnaires/{qid}"
        if rng.random() < 0.8:
            doc["ownerAssignment"] = self.person_actor(rng)
        if self.account_ids and rng.random() < 0.8:
            doc["customerTrustAccountId"] = _pick(rng, self.account_ids)
        if rng.random() < 0.7:
            doc["dueDate"] = iso(self._at(rng.uniform(-5, 40)))
        if rng.random() < 0.3:
            doc["metadata"] = [{"key": "crmOpportunity", "value": f"OPP-{rng.randint(1000, 9999)}"}]
        if status in ("APPROVED", "COMPLETE"):
            doc["completedDate"] = iso(updated)
        return doc

    # ----------------------------------------------------------------- changes
    def record_event(
        self, now_ms: int, actor: dict[str, str], action: str, targets: list[dict[str, str]]
    ) -> dict[str, Any]:
        """Append an audit entry; the log stays sorted by date because the clock only moves on."""
        now = now_ms
        if self.event_ts and now < self.event_ts[-1]:
            now = self.event_ts[-1]
        entry = {
            "id": self.new_id(),
            "actor": actor,
            "date": iso(now),
            "action": action,
            "targets": targets,
        }
        self.events.append(entry)
        self.event_ts.append(now)
        return entry

    def first_event_at_or_after(self, bound_us: int) -> int:
        """Position of the first entry created at or after ``bound_us`` (the log is sorted)."""
        return bisect_left(self.event_ts, -(-bound_us // 1000))

    def add_person(self, display_name: str | None, email: str | None) -> dict[str, str]:
        pid = self.new_id()
        n = len(self.people)
        name = display_name or f"New Joiner {n + 1}"
        person = {"id": pid, "displayName": name, "email": email or f"joiner{n + 1}@example.com"}
        self.people.append(person)
        self.people_index[pid] = n
        return person

    def add_discovered_vendor(self, name: str | None) -> dict[str, Any]:
        rng = random.Random(self.new_id())
        vendor = self.make_discovered_vendor(
            name or f"Newly Found Vendor {len(self.discovered) + 1}", rng
        )
        vendor["id"] = self.new_id()
        self.discovered_index[vendor["id"]] = len(self.discovered)
        self.discovered.append(vendor)
        return vendor

    def set_kb_expiry(self, index: int, expires: int) -> KbItem:
        original = self.kb[index]
        self._kb_replaced.setdefault(index, original)
        doc = dict(original.doc, expirationDate=iso(expires))
        item = KbItem(doc, original.updated, expires, original.text, original.tags)
        self.kb[index] = item
        return item
