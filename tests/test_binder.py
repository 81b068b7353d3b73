"""Binder's configuration: what repo2docker reads in binder/, checked against the tested pins.

Binder itself cannot run here; tests/test_offline.py runs every notebook under its 2 GB ceiling.
"""
import re

from execute_notebooks import ROOT

BINDER = ROOT / "binder"
SERVER_SIDE = {"jupyterlab", "notebook", "jupyter-server", "jupyter_server", "jupyterhub", "nbclassic"}


def pins(path):
    """{name: version} of the `name==version` lines of a requirements file (names lower-case, '-')."""
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s#;]+)", line.strip())
        if match:
            found[match.group(1).lower().replace("_", "-")] = match.group(2)
    return found


def test_runtime_is_python_3_11():
    assert (BINDER / "runtime.txt").read_text().strip() == "python-3.11"


def test_binder_installs_kernel_side_libraries_only():
    pinned = pins(BINDER / "requirements.txt")
    clash = sorted(name for name in pinned if name.replace("-", "_") in {s.replace("-", "_") for s in SERVER_SIDE})
    assert not clash, f"Binder already has these; pinning them conflicts with its JupyterLab: {clash}"


def test_binder_takes_cpu_torch_from_pytorchs_cpu_index():
    text = (BINDER / "requirements.txt").read_text()
    assert re.search(r"^--extra-index-url https://download\.pytorch\.org/whl/cpu\s*$", text, re.M)
    assert pins(BINDER / "requirements.txt")["torch"].endswith("+cpu")


def test_ci_never_reads_the_cpu_index():
    for name in ("requirements.txt", "pyproject.toml", ".ci/run"):
        assert "download.pytorch.org" not in (ROOT / name).read_text(), f"{name} names PyTorch's index"


def test_binder_runs_the_versions_ci_tests():
    binder, tested = pins(BINDER / "requirements.txt"), pins(ROOT / "requirements.txt")
    differ = {name: (version, tested.get(name)) for name, version in binder.items()
              if version.split("+")[0] != (tested.get(name) or "").split("+")[0]}
    assert not differ, f"binder/requirements.txt pins differ from requirements.txt (binder, tested): {differ}"


def test_binder_installs_the_helpers_package():
    post_build = BINDER / "postBuild"
    assert post_build.stat().st_mode & 0o111, "postBuild must be executable"
    assert re.search(r"^pip install .*-e \.\s*$", post_build.read_text(), re.M)


def test_readme_badge_opens_the_tour_in_jupyterlab():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"mybinder\.org/v2/gh/[\w-]+/[\w-]+/main\?urlpath=lab/tree/notebooks/00_tour\.ipynb", readme)
