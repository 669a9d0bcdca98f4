"""Every ``COMPLIANCE_*`` variable is declared by one settings class and documented once.

- docs/settings.md lists each variable of every settings class, and no other;
- no product module reads a ``COMPLIANCE_*`` variable from ``os.environ`` itself: only the
  settings classes do (``deployments/stack.py`` and ``deployments/processes.py`` pass them on to
  the processes they start, which is not reading them).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pydantic_settings import BaseSettings

from compliance_api.settings import Settings
from deployments.settings import DeploymentSettings
from runtime.settings import RuntimeSettings

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_CLASSES: list[type[BaseSettings]] = [Settings, RuntimeSettings, DeploymentSettings]
PRODUCT_PACKAGES = [
    "compliance_api",
    "runtime",
    "deployments",
    "flows",
    "tasks",
    "write_engine",
    "audit_log",
    "read_reports",
]
#: modules that may touch COMPLIANCE_* variables in os.environ: the settings modules (which
#: leave reading to pydantic-settings) and the two that build child processes' environments
ALLOWED = {
    "compliance_api/settings.py",
    "runtime/settings.py",
    "deployments/settings.py",
    "deployments/stack.py",
    "deployments/processes.py",
}
VARIABLE = re.compile(r"\bCOMPLIANCE_[A-Z][A-Z0-9_]*[A-Z0-9]\b")


def declared_variables() -> dict[str, str]:
    """``{variable: class name}`` from each class's env_prefix and fields (aliases included)."""
    declared: dict[str, str] = {}
    for cls in SETTINGS_CLASSES:
        prefix = str(cls.model_config.get("env_prefix") or "")
        assert prefix == "COMPLIANCE_", cls
        for name, field in cls.model_fields.items():
            alias = field.validation_alias or field.alias
            variable = alias if isinstance(alias, str) else f"{prefix}{name}"
            declared[variable.upper()] = cls.__name__
    return declared


def test_docs_list_every_variable_of_every_settings_class_and_no_other() -> None:
    documented = set(VARIABLE.findall((ROOT / "docs" / "settings.md").read_text()))
    declared = declared_variables()
    missing = sorted(f"{name} ({cls})" for name, cls in declared.items() if name not in documented)
    unknown = sorted(documented - set(declared))
    assert not missing, f"docs/settings.md does not list: {missing}"
    assert not unknown, f"docs/settings.md lists variables no settings class has: {unknown}"


def test_every_variable_is_declared_by_one_class() -> None:
    """A variable two classes read (state dir, rate-limit name) comes from one shared base,
    so its default and checks cannot drift apart."""
    owners: dict[str, set[str]] = {}
    for cls in SETTINGS_CLASSES:
        for klass in cls.__mro__:
            for name in vars(klass).get("__annotations__", {}):
                if name in cls.model_fields:
                    owners.setdefault(name, set()).add(klass.__qualname__)
    shared = {name: classes for name, classes in owners.items() if len(classes) > 1}
    assert shared == {}, shared
    assert {"state_dir", "token_rate_limit_name"} <= set(DeploymentSettings.model_fields)
    assert {"state_dir", "token_rate_limit_name"} <= set(Settings.model_fields)


def _string_constants(trees: dict[str, ast.Module]) -> dict[str, str]:
    """Module-level ``NAME = "..."`` of every product module (env-name constants)."""
    constants: dict[str, str] = {}
    for tree in trees.values():
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        constants[target.id] = node.value.value
    return constants


def _is_environ(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    ) or (isinstance(node, ast.Name) and node.id == "environ")


def _read_keys(tree: ast.Module) -> list[tuple[int, ast.expr]]:
    """(line, key) of each ``os.environ[key]``, ``os.environ.get(key)``, ``os.getenv(key)``,
    ``os.environ.pop/setdefault(key)`` and ``key in os.environ``."""
    keys: list[tuple[int, ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            keys.append((node.lineno, node.slice))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            getenv = isinstance(func, ast.Attribute) and func.attr == "getenv"
            environ_method = (
                isinstance(func, ast.Attribute)
                and func.attr in ("get", "pop", "setdefault")
                and _is_environ(func.value)
            )
            if getenv or environ_method:
                keys.append((node.lineno, node.args[0]))
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            keys.append((node.lineno, node.left))
    return keys


def _names(key: ast.expr, constants: dict[str, str]) -> list[str]:
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return [key.value]
    if isinstance(key, ast.Name) and key.id in constants:
        return [constants[key.id]]
    if isinstance(key, ast.JoinedStr):
        return [ast.unparse(key)]
    return []


def test_only_the_settings_classes_read_compliance_variables() -> None:
    trees = {
        str(path.relative_to(ROOT)): ast.parse(path.read_text(), str(path))
        for package in PRODUCT_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert "deployments/automations.py" in trees  # the walk found the product code
    constants = _string_constants(trees)
    reads = [
        f"{module}:{line}: {name}"
        for module, tree in trees.items()
        if module not in ALLOWED
        for line, key in _read_keys(tree)
        for name in _names(key, constants)
        if "COMPLIANCE_" in name
    ]
    assert not reads, "read these through a settings class instead: " + ", ".join(reads)


def test_the_check_finds_a_read_it_should_refuse() -> None:
    tree = ast.parse(
        'import os\nENV = "COMPLIANCE_X"\na = os.environ.get(ENV, "")\n'
        'b = os.getenv("COMPLIANCE_Y")\nc = os.environ["COMPLIANCE_Z"]\n'
    )
    constants = _string_constants({"m.py": tree})
    found = [name for _, key in _read_keys(tree) for name in _names(key, constants)]
    assert found == ["COMPLIANCE_X", "COMPLIANCE_Y", "COMPLIANCE_Z"]
