"""Maps the top-level folders `domains/`, `data/` and `recipes/` into the `titans_seq` namespace.

Metadata lives in pyproject.toml; this file only computes the package list so that new
sub-packages are picked up without editing a hand-written list.
"""

from pathlib import Path

from setuptools import setup

ROOTS = {
    "titans_seq": "titans_seq",
    "titans_seq.domains": "domains",
    "titans_seq.data": "data",
    "titans_seq.recipes": "recipes",
}


def find_packages_under(package: str, folder: str) -> list[str]:
    found = []
    for init in sorted(Path(folder).rglob("__init__.py")):
        relative = init.parent.relative_to(folder)
        if "__pycache__" in relative.parts:
            continue
        found.append(".".join([package, *relative.parts]) if relative.parts else package)
    return found


packages = [p for package, folder in ROOTS.items() for p in find_packages_under(package, folder)]
# the mapped roots are nested inside titans_seq's namespace but live in their own folders
package_dir = {package: folder for package, folder in ROOTS.items()}

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"titans_seq.recipes": ["**/*.yaml"]},
    include_package_data=True,
)
