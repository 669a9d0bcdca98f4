"""Response bodies shaped like the published schemas (checked against them in test_contract).

Built by hand from ``tests/fixtures/published_schemas/*.json``: every required field present,
nullable fields both filled and null across the samples, enum values from the schemas.
"""

from __future__ import annotations

import copy
from typing import Any

OWNER = {"type": "User", "id": "user-1", "displayName": "Ada Lovelace"}
TEAM = {"type": "Team", "id": "team-1", "displayName": None}
TAG = {"categoryId": "cat-framework", "tagId": "tag-soc2"}


def page_info(end_cursor: str | None, has_next: bool) -> dict[str, Any]:
    return {
        "startCursor": "c-start" if end_cursor else None,
        "endCursor": end_cursor,
        "hasNextPage": has_next,
        "hasPreviousPage": False,
    }


KB_FILE = {
    "id": "kb-file-1",
    "type": "FILE",
    "title": "SOC 2 report",
    "description": "Type II, 2024",
    "fileUrl": "https://files.example.test/soc2.pdf?sig=abc",
    "customerVisibility": "REQUEST_ACCESS",
    "downloadPermission": "VIEW_AND_DOWNLOAD",
    "isUsedInQuestionnaires": True,
    "ownerAssignment": OWNER,
    "expirationStatus": "CURRENT",
    "expirationDate": "2026-01-01T00:00:00.000Z",
    "lastUpdated": "2025-01-02T03:04:05.000Z",
    "lastVerified": None,
    "tags": [TAG],
    "categoryId": "cat-framework",
}

KB_URL = {
    "id": "kb-url-1",
    "type": "URL",
    "title": "Security page",
    "description": "",
    "url": "https://trust.example.test/security",
    "customerVisibility": None,
    "includeSubPages": False,
    "isUsedInQuestionnaires": None,
    "ownerAssignment": None,
    "expirationStatus": "EXPIRED",
    "expirationDate": None,
    "lastUpdated": "2025-01-02T03:04:05Z",
    "lastVerified": "2025-01-03T00:00:00Z",
    "tags": [],
    "categoryId": None,
}

ANSWER = {
    "id": "ans-1",
    "question": "Do you encrypt data at rest?",
    "answer": "Yes, AES-256.",
    "expirationStatus": "CURRENT",
    "ownerAssignment": TEAM,
    "expirationDate": None,
    "lastUpdated": "2025-02-01T00:00:00Z",
    "lastVerified": None,
    "tags": [TAG],
}

EVENT = {
    "id": "evt-1",
    "actor": {"id": "user-1", "type": "USER"},
    "date": "2025-03-01T12:00:00Z",
    "action": "VENDOR_DISCOVERED",
    "targets": [{"id": "dv-1", "type": "DiscoveredVendor"}],
}

QUESTIONNAIRE = {
    "id": "q-1",
    "displayName": "Acme security review",
    "url": "https://acme.example.test/q",
    "type": "SPREADSHEET",
    "status": "IN_REVIEW",
    "statusLog": [
        {
            "updatedBy": {"id": "user-1", "displayName": "Ada", "email": "ada@example.test"},
            "updatedAt": "2025-03-02T00:00:00Z",
            "status": "IN_REVIEW",
            "message": None,
        },
        {
            "updatedBy": {"id": "user-2", "displayName": None, "email": None},
            "updatedAt": "2025-03-01T00:00:00Z",
            "status": "IN_PROGRESS",
            "message": "started",
        },
    ],
    "ownerAssignment": OWNER,
    "approverAssignment": TEAM,
    "customerTrustAccountId": "acct-1",
    "dueDate": "2025-04-01T00:00:00Z",
    "metadata": [{"key": "crm", "value": "123"}],
    "tagAndCategoryIds": [TAG],
    "createdDate": "2025-03-01T00:00:00Z",
    "updatedDate": "2025-03-02T00:00:00Z",
    "completedDate": "2025-03-03T00:00:00Z",
}

QUESTIONNAIRE_MINIMAL = {
    "id": "q-2",
    "displayName": "Minimal",
    "type": "WEBSITE",
    "status": "QUEUED_FOR_EXTRACTION",
    "statusLog": [],
    "tagAndCategoryIds": [],
    "createdDate": "2025-03-01T00:00:00Z",
    "updatedDate": "2025-03-01T00:00:00Z",
}

ACCOUNT = {
    "id": "acct-1",
    "name": "Acme",
    "emailDomain": "acme.example.test",
    "createdDate": "2025-01-01T00:00:00Z",
    "updatedDate": "2025-01-02T00:00:00Z",
    "ndaDetails": {"ndaStatus": "SIGNED", "ndaSatisfiedDate": "2025-01-01T00:00:00Z"},
    "accessConfig": {"autoApprovalEnabled": True, "grantAccessOption": "INCLUDE_ONLY_CONFIGURED"},
    "customFields": [{"label": "Tier", "value": "gold"}, {"label": "Regions", "value": ["EU"]}],
    "tagsByCategory": [{"categoryId": "cat-region", "tagIds": ["tag-eu", "tag-us"]}],
}

ACCOUNT_NULLS = {
    **ACCOUNT,
    "id": "acct-2",
    "ndaDetails": {"ndaStatus": "NOT_REQUIRED", "ndaSatisfiedDate": None},
    "accessConfig": None,
    "customFields": [],
    "tagsByCategory": [],
}

VENDOR = {
    "id": "vendor-1",
    "name": "Acme Cloud",
    "websiteUrl": "https://acme.example.test",
    "accountManagerName": None,
    "accountManagerEmail": None,
    "servicesProvided": "Hosting",
    "additionalNotes": None,
    "securityOwnerUserId": "user-1",
    "businessOwnerUserId": None,
    "contractStartDate": "2025-01-01T00:00:00Z",
    "contractRenewalDate": None,
    "contractTerminationDate": None,
    "nextSecurityReviewDueDate": None,
    "lastSecurityReviewCompletionDate": None,
    "isVisibleToAuditors": False,
    "isRiskAutoScored": None,
    "riskAttributeIds": ["risk-1"],
    "category": {"displayName": "Infrastructure"},
    "authDetails": {
        "method": "OKTA",
        "passwordMFA": True,
        "passwordRequiresNumber": None,
        "passwordRequiresSymbol": None,
        "passwordMinimumLength": 12,
    },
    "status": "MANAGED",
    "inherentRiskLevel": "HIGH",
    "residualRiskLevel": "UNSCORED",
    "vendorHeadquarters": "DEU",
    "contractAmount": {"amount": 1200.5, "currency": "EUR"},
    "customFields": [{"label": "Owner team", "value": "platform"}],
    "latestDecision": {"status": "CONDITIONALLY_APPROVED", "lastUpdatedAt": "2025-01-05T00:00:00Z"},
    "linkedTaskTrackerTaskProcurementRequest": {
        "service": "jira",
        "url": "https://jira.example.test/P-1",
    },
}

VENDOR_NULLS = {
    **VENDOR,
    "id": "vendor-2",
    "category": None,
    "authDetails": {
        "method": None,
        "passwordMFA": None,
        "passwordRequiresNumber": None,
        "passwordRequiresSymbol": None,
        "passwordMinimumLength": None,
    },
    "vendorHeadquarters": None,
    "contractAmount": None,
    "customFields": None,
    "latestDecision": None,
    "linkedTaskTrackerTaskProcurementRequest": None,
}

#: compliance-api.md: the procurement-request link is present only when one is linked
VENDOR_UNLINKED = {
    key: value for key, value in VENDOR.items() if key != "linkedTaskTrackerTaskProcurementRequest"
} | {"id": "vendor-3"}

DOCUMENT_LINK = {
    "id": "link-1",
    "creationDate": "2025-03-01T00:00:00Z",
    "effectiveDate": None,
    "title": "Pen test summary",
    "url": "https://evidence.example.test/pentest",
    "description": "2025 external test",
}

VULNERABILITY = {
    "displayName": "lodash prototype pollution",
    "uniqueId": "vuln-1",
    "externalUrl": "https://scanner.example.test/vuln-1",
    "packageName": "lodash",
    "packageVersion": "4.17.15",
    "severity": 7.5,
    "vulnerableComponentUniqueId": "repo-1",
    "description": "Prototype pollution",
    "isResolvable": True,
    "remediationInstructions": "Upgrade to 4.17.21",
    "isReachable": False,
    "cveId": "CVE-2020-8203",
    "cvss3Vector": "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:N/I:H/A:H",
    "cvss3Score": 7.4,
}

TRAINING = {
    "displayName": "Ada - GDPR",
    "uniqueId": "training-1",
    "externalUrl": "https://lms.example.test/t/1",
    "trainingId": "gdpr-training-123",
    "trainingName": "GDPR Training",
    "frameworksFulfilled": ["GDPR", "SOC2"],
    "traineeFullName": "Ada Lovelace",
    "traineeAccountName": "ada",
    "traineeEmail": "ada@example.test",
    "status": "INCOMPLETE",
    "trainingCreatedTimestamp": "2025-01-01T00:00:00Z",
    "trainingDueTimestamp": "2025-02-01T00:00:00Z",
}

TAG_CATEGORIES = {"results": [{"id": "cat-framework", "displayName": "Framework"}]}

TAG_CATEGORY = {
    "category": {"id": "cat-framework", "displayName": "Framework"},
    "tags": [{"id": "tag-soc2", "category": "cat-framework", "displayName": "SOC 2"}],
}

GROUP_RESULTS = {
    "results": [
        {"id": "person-1", "status": "SUCCESS"},
        {"id": "person-2", "status": "ERROR", "message": "person person-2 not found"},
    ]
}


def list_body(items: list[dict[str, Any]], end_cursor: str | None, has_next: bool) -> Any:
    return {"results": {"data": items, "pageInfo": page_info(end_cursor, has_next)}}


#: operation schema file -> response body that must validate against it
RESPONSES: dict[str, Any] = {
    "get_knowledge_base_resources": list_body([KB_FILE, KB_URL], "c-1", True),
    "get_knowledge_base_answer_library": list_body([ANSWER], None, False),
    "get_event_logs": list_body([EVENT], "c-9", False),
    "patch_customer_trust_questionnaires_questionnaireId": QUESTIONNAIRE,
    "post_customer_trust_questionnaires_questionnaireId_approve": QUESTIONNAIRE_MINIMAL,
    "patch_customer_trust_accounts_accountId": ACCOUNT,
    "post_discovered_vendors_discoveredVendorId_add_to_managed": VENDOR,
    "get_resources_package_vulnerability_connectors": {"resources": [VULNERABILITY]},
    "get_resources_user_security_training_status": {"resources": [TRAINING]},
    "post_documents_documentId_links": DOCUMENT_LINK,
    "post_groups_groupId_add_people": GROUP_RESULTS,
    "get_customer_trust_tag_categories": TAG_CATEGORIES,
    "get_customer_trust_tag_categories_tagCategoryId": TAG_CATEGORY,
}

#: more bodies for the same schemas, exercising the null branches and optional fields
MORE_RESPONSES: list[tuple[str, Any]] = [
    ("patch_customer_trust_accounts_accountId", ACCOUNT_NULLS),
    ("post_discovered_vendors_discoveredVendorId_add_to_managed", VENDOR_NULLS),
    ("post_discovered_vendors_discoveredVendorId_add_to_managed", VENDOR_UNLINKED),
    ("patch_customer_trust_questionnaires_questionnaireId", QUESTIONNAIRE_MINIMAL),
]


def fresh(value: Any) -> Any:
    """A deep copy, so a test can mutate a sample without touching the others."""
    return copy.deepcopy(value)
