"""Package layout that pyproject.toml cannot state statically (all metadata is in pyproject).

- `wgc` and its subpackages are discovered (namespace-aware, so a folder without
  `__init__.py` still ships).
- The top-level `grammar/` folder ships as package `wgc._grammar`, so the parser finds
  `walk.lark` through `importlib.resources.files("wgc._grammar")` in editable and regular installs.
- `wgc_runtime/` (the runtime) is discovered like `wgc`; the folder is named as it imports.
- `wgc_models/` (one folder per model family, shared `layers`) is discovered too, with each
  family's `.walk` file, placements and tiny tokenizers as package data, so an installed `wgc`
  runs its models from any folder.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).parent
_SKIP = ["*.__pycache__", "*.__pycache__.*"]

packages = find_namespace_packages(include=["wgc", "wgc.*"], exclude=_SKIP)
package_dir = {"wgc._grammar": "grammar"}
# every folder is a (namespace) package, so one pattern list covers explanations, the grammar,
# and codegen templates wherever they live
package_data = {"": ["*.lark", "*.md", "*.j2", "*.jinja", "*.jinja2", "*.yaml", "*.json", "*.walk"]}
packages.append("wgc._grammar")

packages += find_namespace_packages(include=["wgc_runtime", "wgc_runtime.*"], exclude=_SKIP)
packages += find_namespace_packages(include=["wgc_models", "wgc_models.*"], exclude=_SKIP)

setup(packages=sorted(set(packages)), package_dir=package_dir, package_data=package_data)
