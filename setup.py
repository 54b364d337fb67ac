"""Package layout that pyproject.toml cannot state statically (all metadata is in pyproject).

- `wgc` and its subpackages are discovered (namespace-aware, so a folder without
  `__init__.py` still ships).
- The top-level `grammar/` folder ships as package `wgc._grammar`, so the parser finds
  `walk.lark` through `importlib.resources.files("wgc._grammar")` in editable and regular installs.
- The top-level `runtime/` folder, once it exists, ships as `wgc_runtime`: the name `runtime` is
  taken on PyPI and would collide with whatever else is installed.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).parent
_SKIP = ["*.__pycache__", "*.__pycache__.*"]

packages = find_namespace_packages(include=["wgc", "wgc.*"], exclude=_SKIP)
package_dir = {"wgc._grammar": "grammar"}
# every folder is a (namespace) package, so one pattern list covers explanations, the grammar,
# and codegen templates wherever they live
package_data = {"": ["*.lark", "*.md", "*.j2", "*.jinja", "*.jinja2", "*.yaml", "*.json"]}
packages.append("wgc._grammar")

if (ROOT / "runtime").is_dir():
    package_dir["wgc_runtime"] = "runtime"
    runtime = find_namespace_packages(where="runtime", exclude=_SKIP)
    packages += ["wgc_runtime", *(f"wgc_runtime.{name}" for name in runtime)]

setup(packages=sorted(set(packages)), package_dir=package_dir, package_data=package_data)
